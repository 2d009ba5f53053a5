import AsyncHTTPClient
import Crypto
import Foundation
import ItemModel
import NIOCore
import S3Client
import ServerStorage

/// Content in an S3 bucket, one object per blob under `PREFIX<sha256 hex>`.
///
/// Nothing reaches a digest's key before its bytes were hashed and checked: a blob smaller than
/// a part is held in memory and sent in one PUT at its commit, signed with its hash, which is
/// its digest (so the service checks the bytes too); a larger one is sent as a multipart
/// upload to a temporary key `PREFIX tmp/<random>` as it arrives, and only at the commit, after
/// the check, completed and copied to its digest's key on the service's side. A refused or
/// aborted upload's parts or temporary object are deleted; none is ever under a digest.
/// `commit` returns once the service acknowledged the object under its digest: as durable as
/// that service makes an acknowledged write.
public final class S3BlobStore: BlobStore, Sendable {
    public let configuration: S3BlobStoreConfiguration
    public let client: S3Client

    public init(_ configuration: S3BlobStoreConfiguration, http: HTTPClient = .shared) throws {
        guard configuration.partSize >= S3BlobStoreConfiguration.minimumPartSize else {
            throw S3BlobStoreConfigurationError(description: "the part size is \(configuration.partSize) bytes; S3 needs at least \(S3BlobStoreConfiguration.minimumPartSize)")
        }
        guard configuration.singleCopyLimit > 0 else { throw S3BlobStoreConfigurationError(description: "the single copy limit must be positive") }
        self.configuration = configuration
        self.client = S3Client(configuration.s3, http: http)
    }

    public func key(of digest: ContentDigest) -> String { configuration.keyPrefix + digest.hex }

    /// Checks that the bucket is there and that these keys may list, write and delete under the
    /// prefix, by doing each once (a probe object under `tmp/`): a server refuses to start on a
    /// store it cannot use rather than failing its first upload.
    ///
    /// Within `limit`: a request to an endpoint nobody answers at is retried by the HTTP
    /// client's connection pool until the request's own timeout, which is minutes.
    public func checkAccess(within limit: Duration = .seconds(15)) async throws {
        let client = client
        let prefix = configuration.keyPrefix
        let probe = temporaryPrefix + "probe-" + ItemID.random().rawValue
        try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask {
                _ = try await Self.calling("list") { try await client.listObjectsV2(prefix: prefix, maxKeys: 1) }
                try await Self.calling("PUT \(probe)") { try await client.putObject(probe, bytes: ByteBuffer()) }
                try await Self.calling("DELETE \(probe)") { try await client.deleteObject(probe) }
                return true
            }
            group.addTask {
                try await Task.sleep(for: limit)
                return false
            }
            defer { group.cancelAll() }
            guard try await group.next() == true else {
                throw BlobStoreError.remote(operation: "list", detail: "no answer within \(limit)")
            }
        }
    }

    /// Where uploads wait for their commit.
    public var temporaryPrefix: String { configuration.keyPrefix + "tmp/" }

    public func makeWriter() async throws -> any BlobWriter {
        S3BlobWriter(store: self, temporaryKey: temporaryPrefix + ItemID.random().rawValue)
    }

    public func size(of digest: ContentDigest) async throws -> Int64? {
        if digest == .empty { return 0 }
        return try await Self.calling("HEAD \(digest.hex)") { try await client.headObject(key(of: digest))?.size }
    }

    public func openReader(_ digest: ContentDigest) async throws -> any BlobReader {
        if digest == .empty { return EmptyBlobReader() }
        guard let size = try await size(of: digest) else { throw BlobStoreError.notFound(digest) }
        return S3BlobReader(client: client, key: key(of: digest), size: size)
    }

    public func digests(writtenBefore cutoff: Timestamp) async throws -> [ContentDigest] {
        var out: [ContentDigest] = []
        var continuation: String?
        repeat {
            let page = try await Self.calling("list") { [continuation] in
                try await client.listObjectsV2(prefix: configuration.keyPrefix, continuation: continuation)
            }
            for object in page.objects {
                // Uploads under tmp/ and anything else in the bucket are not blobs. An object
                // without a time is left out: collection must never take a new blob for an old one.
                guard let digest = try? ContentDigest(hex: String(object.key.dropFirst(configuration.keyPrefix.count))),
                      object.key.count == configuration.keyPrefix.count + digest.hex.count,
                      let written = object.lastModified
                else { continue }
                if Timestamp(written.timeIntervalSince1970 * 1e9) < cutoff { out.append(digest) }
            }
            continuation = page.next
        } while continuation != nil
        return out
    }

    public func remove(_ digest: ContentDigest) async throws {
        guard digest != .empty else { return }
        try await Self.calling("DELETE \(digest.hex)") { try await client.deleteObject(key(of: digest)) }
    }

    /// Removes what uploads begun before `cutoff` left under `tmp/` and never finished: the
    /// parts of one whose process died, the temporary object of one whose cleanup failed.
    /// Returns how many went. Other servers may share the bucket: only a cutoff older than any
    /// upload still running (hours, not seconds) is safe.
    @discardableResult
    public func removeLeftovers(startedBefore cutoff: Date) async throws -> Int {
        var removed = 0
        let uploads = try await Self.calling("list uploads") { try await client.listMultipartUploads(prefix: temporaryPrefix) }
        for upload in uploads where upload.initiated.map({ $0 < cutoff }) == true {
            try await Self.calling("abort \(upload.key)") { try await client.abortMultipartUpload(upload.key, uploadID: upload.uploadID) }
            removed += 1
        }
        var continuation: String?
        repeat {
            let page = try await Self.calling("list") { [continuation] in try await client.listObjectsV2(prefix: temporaryPrefix, continuation: continuation) }
            for object in page.objects where object.lastModified.map({ $0 < cutoff }) == true {
                try await Self.calling("DELETE \(object.key)") { try await client.deleteObject(object.key) }
                removed += 1
            }
            continuation = page.next
        } while continuation != nil
        return removed
    }

    /// Runs one call to the service, its failures as the storage's error.
    static func calling<T>(_ operation: String, _ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as BlobStoreError {
            throw error
        } catch {
            throw BlobStoreError.remote(operation: operation, detail: "\(error)")
        }
    }
}

/// One upload, owned by one request.
final class S3BlobWriter: BlobWriter {
    enum State {
        case open
        /// The parts are one object under the temporary key, to be copied and deleted.
        case completedUnderTemporaryKey
        case committed
        case aborted
    }

    let store: S3BlobStore
    let temporaryKey: String
    var client: S3Client { store.client }
    var partSize: Int { store.configuration.partSize }
    var hasher = SHA256()
    private(set) var bytesWritten: Int64 = 0
    /// What arrived since the last part went: less than a part.
    var pending: ByteBuffer
    var uploadID: String?
    var parts: [(number: Int, etag: String)] = []
    var state = State.open
    /// S3's most parts in one upload.
    static let maxParts = 10_000

    init(store: S3BlobStore, temporaryKey: String) {
        self.store = store
        self.temporaryKey = temporaryKey
        self.pending = ByteBufferAllocator().buffer(capacity: 0)
    }

    func write(_ bytes: ByteBuffer) async throws {
        guard state == .open else { throw BlobStoreError.remote(operation: "write", detail: "the upload is already finished") }
        bytes.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
        bytesWritten += Int64(bytes.readableBytes)
        var rest = bytes
        // The first part's buffer grows as bytes come (most blobs are far smaller than a part);
        // the next ones are made whole.
        while rest.readableBytes > 0 {
            var piece = rest.readSlice(length: min(partSize - pending.readableBytes, rest.readableBytes))!
            pending.writeBuffer(&piece)
            if pending.readableBytes == partSize { try await sendPart() }
        }
    }

    /// Sends what is pending as the next part, starting the multipart upload at the first.
    func sendPart() async throws {
        guard parts.count < Self.maxParts else {
            throw BlobStoreError.remote(operation: "upload", detail: "more than \(Self.maxParts) parts of \(partSize) bytes: a larger part size is needed")
        }
        let key = temporaryKey
        if uploadID == nil {
            uploadID = try await S3BlobStore.calling("start the upload of \(key)") { try await client.createMultipartUpload(key) }
        }
        let id = uploadID!, number = parts.count + 1, part = pending
        let etag = try await S3BlobStore.calling("upload part \(number) of \(key)") {
            try await client.uploadPart(key, uploadID: id, number: number, bytes: part)
        }
        parts.append((number, etag))
        // A new buffer: the request that sent the last one may still hold it.
        pending = ByteBufferAllocator().buffer(capacity: partSize)
    }

    func commit(expecting expected: ContentDigest?) async throws -> (digest: ContentDigest, size: Int64) {
        guard state == .open else { throw BlobStoreError.remote(operation: "commit", detail: "the upload is already finished") }
        let digest = ContentDigest(hasher.finalize())
        if let expected, expected != digest {
            await abort()
            throw BlobStoreError.digestMismatch(declared: expected, actual: digest)
        }
        let key = store.key(of: digest)
        if uploadID == nil {
            // Less than a part: one PUT, straight to the digest's key, signed with the digest.
            let body = pending
            try await S3BlobStore.calling("PUT \(digest.hex)") { try await client.putObject(key, bytes: body, payloadHash: digest.hex) }
        } else {
            if pending.readableBytes > 0 { try await sendPart() }
            let id = uploadID!, temporaryKey = self.temporaryKey, parts = self.parts
            try await S3BlobStore.calling("complete the upload of \(temporaryKey)") {
                try await client.completeMultipartUpload(temporaryKey, uploadID: id, parts: parts)
            }
            uploadID = nil
            state = .completedUnderTemporaryKey
            try await copy(to: key)
            // The blob is in place: a temporary object left by a failed delete is only space,
            // which `removeLeftovers` takes back.
            try? await client.deleteObject(temporaryKey)
        }
        state = .committed
        pending = ByteBuffer()
        return (digest, bytesWritten)
    }

    /// The completed temporary object to `key`: in one request up to the single copy limit,
    /// else as a multipart upload of copied ranges.
    func copy(to key: String) async throws {
        let source = temporaryKey, size = bytesWritten, limit = store.configuration.singleCopyLimit
        if size <= limit {
            try await S3BlobStore.calling("copy \(source) to \(key)") { try await client.copyObject(from: source, to: key) }
            return
        }
        let id = try await S3BlobStore.calling("start the copy to \(key)") { try await client.createMultipartUpload(key) }
        do {
            var copied: [(number: Int, etag: String)] = []
            var offset: Int64 = 0
            while offset < size {
                let end = min(offset + limit, size) - 1, number = copied.count + 1
                let etag = try await S3BlobStore.calling("copy part \(number) to \(key)") {
                    try await client.uploadPartCopy(key, uploadID: id, number: number, from: source, range: offset...end)
                }
                copied.append((number, etag))
                offset = end + 1
            }
            try await S3BlobStore.calling("complete the copy to \(key)") { try await client.completeMultipartUpload(key, uploadID: id, parts: copied) }
        } catch {
            try? await client.abortMultipartUpload(key, uploadID: id)
            throw error
        }
    }

    func abort() async {
        let state = self.state
        guard state == .open || state == .completedUnderTemporaryKey else { return }
        self.state = .aborted
        pending = ByteBuffer()
        await Self.cleanUp(client: client, key: temporaryKey, uploadID: uploadID, completed: state == .completedUnderTemporaryKey)
        uploadID = nil
    }

    /// Drops what an unfinished upload left: its parts, or its completed temporary object.
    /// Failures are left to `removeLeftovers`: an abort has no one to report them to.
    static func cleanUp(client: S3Client, key: String, uploadID: String?, completed: Bool) async {
        if let uploadID { try? await client.abortMultipartUpload(key, uploadID: uploadID) }
        if completed { try? await client.deleteObject(key) }
    }

    deinit {
        // Dropped without a commit or an abort (its request went away): clean up later.
        guard state == .open || state == .completedUnderTemporaryKey, uploadID != nil || state == .completedUnderTemporaryKey else { return }
        Self.cleanUpLater(client: client, key: temporaryKey, uploadID: uploadID, completed: state == .completedUnderTemporaryKey)
    }

    static func cleanUpLater(client: S3Client, key: String, uploadID: String?, completed: Bool) {
        Task { await cleanUp(client: client, key: key, uploadID: uploadID, completed: completed) }
    }
}

/// Reads a blob with one ranged GET per `read`, handing its body on as it arrives.
final class S3BlobReader: BlobReader, Sendable {
    let client: S3Client
    let key: String
    let size: Int64

    init(client: S3Client, key: String, size: Int64) {
        self.client = client
        self.key = key
        self.size = size
    }

    func read(_ range: Range<Int64>, firstChunkSize: Int, chunkSize: Int, into sink: (ByteBuffer) async throws -> Void) async throws {
        guard range.lowerBound >= 0, range.upperBound <= size else {
            throw BlobStoreError.remote(operation: "read \(key)", detail: "bytes \(range) are not within its \(size)")
        }
        guard !range.isEmpty else { return }
        let object = try await S3BlobStore.calling("GET \(key)") { try await client.getObject(key, range: range.lowerBound...(range.upperBound - 1)) }
        var delivered: Int64 = 0
        var iterator = object.body.makeAsyncIterator()
        while true {
            let next = try await S3BlobStore.calling("GET \(key)") { try await iterator.next() }
            guard var piece = next else { break }
            while piece.readableBytes > 0 {
                let limit = delivered == 0 ? firstChunkSize : chunkSize
                let chunk = piece.readSlice(length: min(limit, piece.readableBytes))!
                delivered += Int64(chunk.readableBytes)
                guard delivered <= Int64(range.count) else { throw BlobStoreError.remote(operation: "GET \(key)", detail: "more bytes than the range \(range)") }
                try await sink(chunk)
            }
        }
        guard delivered == Int64(range.count) else {
            throw BlobStoreError.remote(operation: "GET \(key)", detail: "the content ended after \(delivered) of \(range.count) bytes")
        }
    }

    func close() {}
}
