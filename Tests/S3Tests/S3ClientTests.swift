import Foundation
import NIOCore
import Testing
import TestSupport
@testable import S3Client

/// The client against a live S3-compatible server (SeaweedFS, `S3TestServer`), each test in a
/// bucket of its own.
@Suite struct S3ClientTests {
    /// Runs `body` with a fresh bucket, removed afterwards whatever happened.
    func withBucket(_ body: (S3TestBucket) async throws -> Void) async throws {
        let bucket = try await S3TestServer.makeBucket("client")
        do {
            try await body(bucket)
        } catch {
            try? await bucket.remove()
            throw error
        }
        try await bucket.remove()
    }

    func collect(_ object: S3ObjectStream) async throws -> [UInt8] {
        var out: [UInt8] = []
        for try await chunk in object.body { out += chunk.readableBytesView }
        return out
    }

    @Test func aWrongSecretIsRefusedWithSignatureDoesNotMatch() async throws {
        try await withBucket { bucket in
            var wrong = bucket.configuration
            wrong.credentials.secretAccessKey = "not-the-secret"
            let client = S3Client(wrong)
            do {
                _ = try await client.listObjectsV2(prefix: "")
                Issue.record("a request signed with the wrong secret was answered")
            } catch let error as S3Error {
                #expect(error.code == "SignatureDoesNotMatch" && error.status == 403, "\(error)")
            }
            // The right secret, the same request: the refusal was the signature's.
            #expect(try await bucket.client.listObjectsV2(prefix: "").objects.isEmpty)
        }
    }

    @Test func anObjectRoundTripsWithRangesAndGoesAway() async throws {
        try await withBucket { bucket in
            let client = bucket.client
            let bytes = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }
            // A key with characters the path must encode.
            let key = "dir/a b+c=é~.bin"
            try await client.putObject(key, bytes: ByteBuffer(bytes: bytes))
            let info = try await client.headObject(key)
            #expect(info?.size == 300_000 && info?.lastModified != nil)
            #expect(try await collect(client.getObject(key)) == bytes)
            let ranged = try await client.getObject(key, range: 299_990...299_999)
            #expect(ranged.contentLength == 10)
            #expect(try await collect(ranged) == Array(bytes.suffix(10)))
            try await client.deleteObject(key)
            #expect(try await client.headObject(key) == nil)
            do {
                _ = try await client.getObject(key)
                Issue.record("a deleted object was read")
            } catch let error as S3Error {
                #expect(error.code == "NoSuchKey" && error.status == 404, "\(error)")
            }
            // Deleting what is not there is no error, as S3 answers it.
            try await client.deleteObject(key)
        }
    }

    @Test func aStreamedPutSendsItsBodyUnsigned() async throws {
        try await withBucket { bucket in
            let pieces = (0..<8).map { i in ByteBuffer(bytes: [UInt8](repeating: UInt8(i), count: 100_000)) }
            let body = AsyncStream<ByteBuffer> { continuation in
                for piece in pieces { continuation.yield(piece) }
                continuation.finish()
            }
            try await bucket.client.putObject("streamed", length: 800_000, body: body)
            let back = try await collect(bucket.client.getObject("streamed"))
            #expect(back == pieces.flatMap { Array($0.readableBytesView) })
        }
    }

    @Test func listingPagesWithContinuationTokens() async throws {
        try await withBucket { bucket in
            let keys = ["p/a", "p/b b", "p/c+", "p/d/é", "p/e", "q/other"]
            for key in keys { try await bucket.client.putObject(key, bytes: ByteBuffer(string: key)) }
            var listed: [S3ObjectInfo] = []
            var pages = 0
            var next: String?
            repeat {
                let page = try await bucket.client.listObjectsV2(prefix: "p/", continuation: next, maxKeys: 2)
                listed += page.objects
                next = page.next
                pages += 1
            } while next != nil
            #expect(listed.map(\.key) == keys.filter { $0.hasPrefix("p/") }, "in key order, each once")
            #expect(pages == 3)
            #expect(listed.allSatisfy { $0.lastModified != nil && $0.size == Int64($0.key.utf8.count) })
        }
    }

    @Test func aMultipartUploadIsInvisibleUntilCompletedAndGoneWhenAborted() async throws {
        try await withBucket { bucket in
            let client = bucket.client
            let part = ByteBuffer(bytes: [UInt8](repeating: 1, count: 5 << 20))
            let id = try await client.createMultipartUpload("big")
            let first = try await client.uploadPart("big", uploadID: id, number: 1, bytes: part)
            let second = try await client.uploadPart("big", uploadID: id, number: 2, bytes: ByteBuffer(string: "tail"))
            #expect(try await client.headObject("big") == nil, "nothing before the completion")
            #expect(try await client.listMultipartUploads(prefix: "").map(\.uploadID) == [id])
            try await client.completeMultipartUpload("big", uploadID: id, parts: [(1, first), (2, second)])
            #expect(try await client.headObject("big")?.size == Int64(5 << 20) + 4)

            let dropped = try await client.createMultipartUpload("dropped")
            _ = try await client.uploadPart("dropped", uploadID: dropped, number: 1, bytes: part)
            try await client.abortMultipartUpload("dropped", uploadID: dropped)
            #expect(try await client.listMultipartUploads(prefix: "").isEmpty)
            #expect(try await client.headObject("dropped") == nil)
        }
    }
}

@Suite struct S3XMLTests {
    @Test func anErrorBodyGivesItsCodeAndMessage() throws {
        let body = Data("""
            <?xml version="1.0" encoding="UTF-8"?>
            <Error><Code>NoSuchKey</Code><Message>The key &lt;x&gt; &amp; more &#34;quoted&#34;</Message><RequestId>R1</RequestId></Error>
            """.utf8)
        let error = try #require(S3Error(status: 404, body: body))
        #expect(error == S3Error(code: "NoSuchKey", message: "The key <x> & more \"quoted\"", status: 404, requestID: "R1"))
        #expect(S3Error(status: 200, body: Data("<ListBucketResult/>".utf8)) == nil)
    }

    @Test func namespacedElementsAreFoundByTheirLocalName() throws {
        let doc = try S3XML.parse(Data("""
            <ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Contents><Key>a&amp;b</Key></Contents><IsTruncated>false</IsTruncated></ListBucketResult>
            """.utf8))
        #expect(doc.name == "ListBucketResult" && doc.all("Contents").first?["Key"] == "a&b" && doc["IsTruncated"] == "false")
        #expect(S3XML.element("ETag", "\"x\"&<") == "<ETag>&quot;x&quot;&amp;&lt;</ETag>")
    }
}
