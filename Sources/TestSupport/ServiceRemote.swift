import Foundation
import ItemModel
import NIOCore
import ServerStorage
import Synchronization
import SyncAPI
import SyncEngine
import SyncService

/// A `RemoteStore` that calls `SyncService` in the same process: the server's rules, checks
/// and refusals exactly as `ubiq-server` applies them, without HTTP. It does what `SyncServer`
/// does around each call (decode, one service call, encode), so each refusal reaches the
/// engine as the `RemoteError` that `SyncHTTPClient` would have made of the server's answer.
public final class ServiceRemote: RemoteStore, Sendable {
    public let service: SyncService
    public let container: ContainerID
    /// Downloads are handed over in parts of this size, as a transport delivers a body.
    public let chunkSize: Int
    let accountBox: Mutex<AccountRef>

    public init(service: SyncService, account: AccountRef, container: ContainerID, chunkSize: Int = 64 * 1024) {
        self.service = service
        self.container = container
        self.chunkSize = max(1, chunkSize)
        accountBox = Mutex(account)
    }

    /// The account this connection's token belongs to; another one plays a token of another account.
    public var account: AccountRef {
        get { accountBox.withLock { $0 } }
        set { accountBox.withLock { $0 = newValue } }
    }

    /// The server's answer as the HTTP client reads it: a refusal keeps its code, message and
    /// the current item; anything else is the server's internal error.
    static func remoteError(_ error: any Error) -> RemoteError {
        if let error = error as? RemoteError { return error }
        guard let refusal = try? APIError(mapping: error) else {
            return .refused(code: .internalError, message: "\(error)", current: nil)
        }
        return .refused(code: refusal.code, message: refusal.message, current: refusal.current)
    }

    func answer<T>(_ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch { throw Self.remoteError(error) }
    }

    func opened() async throws -> ContainerService {
        try await service.container(container, of: account)
    }

    public func ensureContainer() async throws -> ContainerInfo {
        try await answer { try await service.ensureContainer(container, of: account).info }
    }

    public func changes(since: ChangeCursor, limit: Int) async throws -> ChangePage {
        try await answer {
            try JSONDecoder().decode(ChangePage.self, from: try await opened().changes(since: since, limit: limit))
        }
    }

    /// As the push stream sends it: the catch-up, `ready`, the key-value version, then each
    /// commit's changes and every move of the key-value version.
    public func changeStream(since: ChangeCursor) -> AsyncThrowingStream<ChangeStreamEvent, Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    let feed = try await self.answer { try await self.opened().follow(since: since) }
                    let subscription = feed.subscribe()
                    defer { subscription.close() }
                    var cursor = try await self.send(feed, after: since, to: continuation)
                    continuation.yield(.ready(cursor))
                    var version = try await self.answer { try await feed.keyValueVersion() }
                    continuation.yield(.keyValues(version: version))
                    for await _ in subscription.signals {
                        cursor = try await self.send(feed, after: cursor, to: continuation)
                        let now = try await self.answer { try await feed.keyValueVersion() }
                        if now != version {
                            version = now
                            continuation.yield(.keyValues(version: now))
                        }
                    }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    func send(
        _ feed: ChangeFollower, after cursor: ChangeCursor, to continuation: AsyncThrowingStream<ChangeStreamEvent, Error>.Continuation
    ) async throws -> ChangeCursor {
        try await answer {
            try await feed.send(after: cursor) { changes in
                for change in changes { continuation.yield(.change(change)) }
            }
        }
    }

    public func item(_ id: ItemID) async throws -> ItemMetadata {
        try await answer { try await opened().item(id) }
    }

    public func children(of id: ItemID) async throws -> [ItemMetadata] {
        try await answer { try await opened().children(of: id) }
    }

    /// As the server's Range handling: an empty range is the whole content, a start at or past
    /// the end is 416, an end past the end is clamped.
    public func download(
        _ digest: ContentDigest, range: Range<Int64>, receive: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void
    ) async throws {
        let reader = try await answer {
            guard try await service.grantedSize(digest, for: account) != nil else {
                throw APIError(.blobNotFound, "no content with digest \(digest)")
            }
            return try await service.openContent(digest)
        }
        defer { reader.close() }
        var span = 0..<reader.size
        if !range.isEmpty {
            guard range.lowerBound < reader.size else {
                throw RemoteError.refused(code: .rangeNotSatisfiable, message: "the content is \(reader.size) bytes long", current: nil)
            }
            span = range.lowerBound..<min(range.upperBound, reader.size)
        }
        if Task.isCancelled { throw RemoteError.unreachable("cancelled") }
        try await reader.read(span, chunkSize: chunkSize) { chunk in
            try chunk.withUnsafeReadableBytes { try receive($0) }
            if Task.isCancelled { throw RemoteError.unreachable("cancelled") }
        }
    }

    public func hasBlob(_ digest: ContentDigest) async throws -> Bool {
        try await answer { try await service.renewedSize(digest, for: account) != nil }
    }

    /// Sends at most `size` bytes of the file, as the HTTP client does; the server hashes what it got.
    public func uploadBlob(_ digest: ContentDigest, size: Int64, fromFile path: String, progress: @escaping @Sendable (Int64) -> Void) async throws {
        guard let handle = FileHandle(forReadingAtPath: path) else { throw RemoteError.protocolError("cannot read \(path)") }
        defer { try? handle.close() }
        try await answer {
            let upload = try await service.beginUpload(digest, length: size, for: account)
            do {
                var sent: Int64 = 0
                while sent < size, let data = try handle.read(upToCount: Int(min(1 << 20, size - sent))), !data.isEmpty {
                    try await upload.write(ByteBuffer(bytes: data))
                    sent += Int64(data.count)
                    progress(sent)
                }
                _ = try await upload.finish()
            } catch {
                await upload.abort()
                throw error
            }
        }
    }

    public func createItem(_ request: CreateItemRequest) async throws -> ItemMetadata {
        try await answer { try await service.createItem(request, in: container, of: account) }
    }

    public func createItems(_ requests: [CreateItemRequest]) async throws -> [Result<ItemMetadata, RemoteError>] {
        let results = try await answer { try await service.createItems(requests, in: container, of: account) }
        return try results.map { result in
            if let item = result.item { return .success(item) }
            guard let e = result.error else { throw RemoteError.protocolError("a batch result with neither item nor error") }
            return .failure(.refused(code: e.code, message: e.message, current: e.current))
        }
    }

    public func updateContent(_ id: ItemID, _ request: UpdateContentRequest) async throws -> ItemMetadata {
        try await answer { try await opened().updateContent(id, request) }
    }

    public func updateItem(_ id: ItemID, _ request: UpdateItemRequest) async throws -> ItemMetadata {
        try await answer { try await opened().updateItem(id, request) }
    }

    public func deleteItem(_ id: ItemID, base: Revision, recursive: Bool) async throws -> [ItemMetadata] {
        try await answer { try await opened().deleteItem(id, base: base, recursive: recursive) }
    }

    public func setXattrs(_ id: ItemID, _ request: SetXattrsRequest) async throws -> ItemMetadata {
        try await answer { try await opened().setXattrs(id, request) }
    }

    public func addConflictVersion(_ id: ItemID, _ request: AddConflictVersionRequest) async throws -> ItemMetadata {
        try await answer { try await opened().addConflictVersion(id, request) }
    }

    public func resolveConflicts(_ id: ItemID, _ request: ResolveConflictsRequest) async throws -> ItemMetadata {
        try await answer { try await opened().resolveConflicts(id, request) }
    }

    public func earlierVersions(of id: ItemID) async throws -> [EarlierVersion] {
        try await answer { try await opened().earlierVersions(of: id) }
    }

    public func restore(_ id: ItemID, _ request: RestoreRequest) async throws -> ItemMetadata {
        try await answer { try await opened().restore(id, request) }
    }

    public func whoami() async throws -> WhoAmI {
        try await answer { try await service.whoami(account) }
    }

    public func keyValues(since: Int64) async throws -> KeyValuePage {
        try await answer { try await opened().keyValues(since: String(since)) }
    }

    public func setKeyValue(_ key: String, json: Data) async throws -> Int64 {
        try await answer { try await opened().setKeyValue(Array(key.utf8), json: json).version }
    }

    public func removeKeyValue(_ key: String) async throws -> Int64 {
        try await answer { try await opened().removeKeyValue(Array(key.utf8)).version }
    }
}
