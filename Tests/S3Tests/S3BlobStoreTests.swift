import Crypto
import Foundation
import ItemModel
import NIOCore
import S3BlobStore
import S3Client
import ServerStorage
import Testing
import TestSupport

/// What the conformance suite cannot see of the S3 store: the multipart path, what a refused or
/// aborted upload leaves in the bucket, ranges across part boundaries.
@Suite struct S3BlobStoreTests {
    static let part = S3BlobStoreConfiguration.minimumPartSize
    static let prefix = "ubiq/blobs/"

    /// Runs `body` with a store on a fresh bucket, removed afterwards whatever happened.
    func withStore(singleCopyLimit: Int64 = 5 << 30, _ body: (S3BlobStore, S3TestBucket) async throws -> Void) async throws {
        let bucket = try await S3TestServer.makeBucket("blobs")
        do {
            let s3 = bucket.configuration
            let store = try S3BlobStore(S3BlobStoreConfiguration(
                endpoint: s3.endpoint, region: s3.region, bucket: s3.bucket, pathStyle: true, keyPrefix: Self.prefix, credentials: s3.credentials,
                partSize: Self.part, singleCopyLimit: singleCopyLimit))
            try await body(store, bucket)
        } catch {
            try? await bucket.remove()
            throw error
        }
        try await bucket.remove()
    }

    static func content(_ count: Int, seed: UInt8 = 1) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: ($0 >> 3) &* 31 &+ $0 &+ Int(seed)) }
    }

    /// Written in pieces of an odd size, as a request body arrives, so that parts are cut inside them.
    func write(_ bytes: [UInt8], to writer: any BlobWriter) async throws {
        var start = 0
        while start < bytes.count {
            let end = min(start + 777_777, bytes.count)
            try await writer.write(ByteBuffer(bytes: bytes[start..<end]))
            start = end
        }
    }

    func read(_ store: S3BlobStore, _ digest: ContentDigest, _ range: Range<Int64>) async throws -> [UInt8] {
        let reader = try await store.openReader(digest)
        defer { reader.close() }
        var out: [UInt8] = []
        try await reader.read(range, firstChunkSize: 1000, chunkSize: 64 << 10) { chunk in
            #expect(chunk.readableBytes <= (out.isEmpty ? 1000 : 64 << 10))
            out += chunk.readableBytesView
        }
        return out
    }

    func roundTrip(_ store: S3BlobStore, _ bucket: S3TestBucket) async throws {
        let bytes = Self.content(2 * Self.part + 3 * 1024 + 5)
        let expected = ContentDigest(SHA256.hash(data: bytes))
        let writer = try await store.makeWriter()
        try await write(bytes, to: writer)
        #expect(try await bucket.client.listMultipartUploads(prefix: "").count == 1, "two parts went as they filled")
        #expect(try await bucket.keys().isEmpty, "nothing visible before the commit")
        let (digest, size) = try await writer.commit(expecting: expected)
        #expect(digest == expected && size == Int64(bytes.count))
        #expect(try await bucket.keys() == [Self.prefix + digest.hex], "only the blob, under its digest: the temporary object is gone")
        #expect(try await bucket.client.listMultipartUploads(prefix: "").isEmpty)
        #expect(try await store.size(of: digest) == Int64(bytes.count))
        let p = Int64(Self.part), n = Int64(bytes.count)
        for range in [0..<n, (p - 1)..<(p + 1), (2 * p - 10)..<(2 * p + 10), (n - 1)..<n, 12_345..<(p + 54_321)] {
            #expect(try await read(store, digest, range) == Array(bytes[Int(range.lowerBound)..<Int(range.upperBound)]), "bytes \(range)")
        }
        #expect(try await store.digests(writtenBefore: WallClock.now() + 1) == [digest])
    }

    @Test func aBlobLargerThanAPartRoundTripsWithRangesAcrossItsParts() async throws {
        try await withStore { store, bucket in try await roundTrip(store, bucket) }
    }

    /// The copy to the digest's key in parts, as for a blob past S3's 5 GiB single copy (here
    /// past a limit lowered to a part).
    @Test func aBlobPastTheSingleCopyLimitIsCopiedInParts() async throws {
        try await withStore(singleCopyLimit: Int64(Self.part)) { store, bucket in try await roundTrip(store, bucket) }
    }

    @Test func aMismatchedDigestLeavesNoObjectAndNoUpload() async throws {
        try await withStore { store, bucket in
            for size in [1000, Self.part + 1000] {
                let writer = try await store.makeWriter()
                let bytes = Self.content(size, seed: 9)
                try await write(bytes, to: writer)
                let declared = ContentDigest(SHA256.hash(data: Self.content(size, seed: 10)))
                await #expect(throws: BlobStoreError.digestMismatch(declared: declared, actual: ContentDigest(SHA256.hash(data: bytes)))) {
                    _ = try await writer.commit(expecting: declared)
                }
                #expect(try await bucket.keys().isEmpty, "\(size) bytes: no object under any key, temporary or digest")
                #expect(try await bucket.client.listMultipartUploads(prefix: "").isEmpty, "\(size) bytes: no upload left")
                await writer.abort()  // safe after a failed commit
                #expect(try await bucket.keys().isEmpty)
                #expect(try await store.size(of: declared) == nil)
                #expect(try await store.size(of: ContentDigest(SHA256.hash(data: bytes))) == nil)
            }
        }
    }

    @Test func anAbortRemovesTheParts() async throws {
        try await withStore { store, bucket in
            let writer = try await store.makeWriter()
            try await write(Self.content(Self.part + 1), to: writer)
            #expect(try await bucket.client.listMultipartUploads(prefix: "").count == 1)
            await writer.abort()
            #expect(try await bucket.client.listMultipartUploads(prefix: "").isEmpty)
            #expect(try await bucket.keys().isEmpty)
            await writer.abort()  // twice is no error
        }
    }

    /// A writer whose request went away without a commit or an abort cleans up after itself.
    @Test func aDroppedWriterRemovesItsPartsLater() async throws {
        try await withStore { store, bucket in
            do {
                let writer = try await store.makeWriter()
                try await write(Self.content(Self.part + 1), to: writer)
            }
            try await eventually("the dropped upload's parts are removed") {
                try await bucket.client.listMultipartUploads(prefix: "").isEmpty
            }
            #expect(try await bucket.keys().isEmpty)
        }
    }

    /// What a crashed server left under tmp/: uploads started before the cutoff, and temporary
    /// objects written before it, go; blobs and newer uploads stay.
    @Test func leftoversBeforeTheCutoffAreRemoved() async throws {
        try await withStore { store, bucket in
            let writer = try await store.makeWriter()
            try await write(Self.content(Self.part + 1), to: writer)
            let small = try await store.makeWriter()
            try await small.write(ByteBuffer(string: "a blob"))
            let (blob, _) = try await small.commit(expecting: nil)
            try await bucket.client.putObject(store.temporaryPrefix + "left", bytes: ByteBuffer(string: "a completed upload's temporary object"))
            #expect(try await store.removeLeftovers(startedBefore: Date(timeIntervalSinceNow: -3600)) == 0, "nothing is an hour old")
            #expect(try await bucket.client.listMultipartUploads(prefix: "").count == 1)
            #expect(try await store.removeLeftovers(startedBefore: Date(timeIntervalSinceNow: 60)) == 2)
            #expect(try await bucket.client.listMultipartUploads(prefix: "").isEmpty)
            #expect(try await bucket.keys() == [Self.prefix + blob.hex])
            await writer.abort()  // its upload is already gone: no error
        }
    }

    @Test func aSmallBlobGoesInOnePutAndTheEmptyBlobIsNeverStored() async throws {
        try await withStore { store, bucket in
            let writer = try await store.makeWriter()
            try await writer.write(ByteBuffer(string: "small"))
            #expect(try await bucket.client.listMultipartUploads(prefix: "").isEmpty, "held in memory until the commit")
            #expect(try await bucket.keys().isEmpty)
            let (digest, _) = try await writer.commit(expecting: nil)
            #expect(try await bucket.keys() == [Self.prefix + digest.hex])
            #expect(try await store.size(of: .empty) == 0)
            #expect(try await store.openReader(.empty).size == 0)
            try await store.remove(.empty)
            try await store.remove(digest)
            try await store.remove(digest)
            #expect(try await bucket.keys().isEmpty)
            await #expect(throws: BlobStoreError.notFound(digest)) { _ = try await store.openReader(digest) }
        }
    }

    @Test func aPartSmallerThanS3AllowsIsRefused() throws {
        let config = S3BlobStoreConfiguration(
            endpoint: URL(string: "http://127.0.0.1:1")!, region: "us-east-1", bucket: "b", pathStyle: true, credentials: S3TestServer.credentials,
            partSize: 1 << 20)
        #expect(throws: S3BlobStoreConfigurationError.self) { try S3BlobStore(config) }
    }
}
