import Crypto
import Foundation
import ItemModel
import S3BlobStore
import ServerStorage
import Synchronization
import SyncAPI
import SyncService
import Testing
import TestSupport

/// The server's own content path (`SyncService`: an upload hashed, checked, committed and
/// granted; a download read in the chunks a transport hands on) over blobs in S3.
@Suite struct S3ServiceTests {
    @Test func contentGoesThroughTheServiceToABucketAndBack() async throws {
        let bucket = try await S3TestServer.makeBucket("service")
        let dir = try TempDirectory("ubiq-s3-service")
        defer { dir.remove() }
        do {
            let s3 = bucket.configuration
            let store = try S3BlobStore(S3BlobStoreConfiguration(
                endpoint: s3.endpoint, region: s3.region, bucket: s3.bucket, pathStyle: true, keyPrefix: "b/", credentials: s3.credentials,
                partSize: S3BlobStoreConfiguration.minimumPartSize))
            let metadata = try SQLiteMetadataStore.inMemory()
            let account = try await metadata.addAccount(name: "s3", passwordHash: "unused")
            let service = SyncService(storage: ServerStorage.sqlite(metadata, blobs: store))
            let remote = ServiceRemote(service: service, account: account, container: .default)
            _ = try await remote.ensureContainer()

            let bytes = (0..<(2 * S3BlobStoreConfiguration.minimumPartSize + 12_345)).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ ($0 >> 11)) }
            let path = dir.path + "/content"
            FileManager.default.createFile(atPath: path, contents: Data(bytes))
            let digest = ContentDigest(SHA256.hash(data: bytes))
            try await remote.uploadBlob(digest, size: Int64(bytes.count), fromFile: path) { _ in }
            #expect(try await remote.hasBlob(digest))
            #expect(try await bucket.keys() == ["b/" + digest.hex])

            let received = Mutex<[UInt8]>([])
            let start = Int64(S3BlobStoreConfiguration.minimumPartSize - 100)
            try await remote.download(digest, range: start..<(start + 300_000)) { chunk in received.withLock { $0 += chunk } }
            #expect(received.withLock { $0 } == Array(bytes[Int(start)..<(Int(start) + 300_000)]))

            // Declared as other bytes: refused, and nothing of it stays in the bucket.
            let other = ContentDigest(SHA256.hash(data: Data("something else".utf8)))
            do {
                try await remote.uploadBlob(other, size: Int64(bytes.count), fromFile: path) { _ in }
                Issue.record("an upload that hashes to another digest was accepted")
            } catch RemoteError.refused(let code, _, _) {
                #expect(code == .digestMismatch)
            }
            #expect(try await bucket.keys() == ["b/" + digest.hex])
            #expect(try await bucket.client.listMultipartUploads(prefix: "").isEmpty)
        } catch {
            try? await bucket.remove()
            throw error
        }
        try await bucket.remove()
    }
}
