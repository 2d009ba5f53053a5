import Foundation
import ItemModel
import ServerStorage
import SyncAPI
import SyncEngine
import SyncService
import Synchronization

/// A sync server for one container, in memory: the `RemoteStore` the engine and VFS suites run
/// against instead of HTTP.
///
/// Every call is answered by `SyncService`, the rules `ubiq-server` answers with, over an
/// in-memory SQLite metadata store and an `InMemoryBlobStore`: one account, one container.
/// Refusals become `RemoteError` as `SyncHTTPClient` makes them of the server's answers.
///
/// Fault injection (`InMemoryRemoteStore+Faults`): `isOnline` (false: every call throws
/// `RemoteError.unreachable` and the push streams end with it), `failUploadsAfter`,
/// `failNext(_:with:times:)`, `loseAnswer(_:times:)` (the call is carried out but its answer
/// never arrives), gates that hold a call in flight (`hold(_:)`, then `answered(_:)` tells when
/// the released call is done), and `holdDownloads(afterBytes:)` that stops every download part
/// way. `otherDevice` changes the container as another client would, whether or not this client
/// is online. Counters (`calls(_:)`, `bytesDownloaded`) let a test check that something did not
/// talk to the server.
///
/// The test powers are guarded by `state` (one Mutex, a leaf). Push-stream subscriptions and
/// gate continuations are resumed after it is released.
public final class InMemoryRemoteStore: RemoteStore, Sendable {
    /// The calls a client makes; the keys of the counters, gates and injected failures.
    public enum Operation: String, Sendable, Hashable, CaseIterable {
        case ensureContainer, changes, changeStream, item, download, hasBlob, uploadBlob
        case createItem, createItems, updateContent, updateItem, deleteItem, setXattrs
    }

    struct State {
        var online = true
        var uploadsLeft: Int?
        var injected: [Operation: [RemoteError]] = [:]
        var lostAnswers: [Operation: [RemoteError]] = [:]
        var answerGates: [Operation: CallGate] = [:]
        var jitter: Duration?
        /// Jitter pauses not over yet, by a serial number: what, how long, since when.
        var pauses: [Int: (what: String, nanos: Int64, since: ContinuousClock.Instant)] = [:]
        var nextPause = 0
        /// Where each call counted and not yet answered is, by its task: what a stalled client
        /// waits for.
        var stages: [Int: String] = [:]
        var gates: [Operation: CallGate] = [:]
        var downloadHold: (after: Int64, gate: CallGate)?
        var corruptDownloads = false
        var calls: [Operation: Int] = [:]
        var answered: [Operation: Int] = [:]
        var blobBytesServed: Int64 = 0
        var nextStream = 0
        /// Each open push stream's wake-ups; closed to end it.
        var streams: [Int: ChangeHub.Subscription] = [:]
    }

    let state = Mutex(State())
    let server: SyncService
    let account: AccountRef
    public let containerID: ContainerID
    public let created: Timestamp
    /// Downloads arrive in chunks of this size, so that readers see content land progressively.
    public let chunkSize: Int

    /// - Parameter created: the container's creation time; another store's, for a server
    ///   restored from a backup of it (same container, a change log behind).
    public init(container: ContainerID = .default, chunkSize: Int = 64 * 1024, created: Timestamp? = nil) {
        self.containerID = container
        self.chunkSize = max(1, chunkSize)
        let created = created ?? WallClock.now()
        self.created = created
        // The store's clock tells the container's creation time while it is made, then runs.
        let clock = CreationClock(created)
        do {
            let metadata = try SQLiteMetadataStore.inMemory(now: clock.now)
            server = SyncService(storage: ServerStorage(accounts: metadata, metadata: metadata, changes: metadata, blobs: InMemoryBlobStore()))
            let server = server
            account = try BlockingCall.run {
                let account = try await metadata.addAccount(name: "test", passwordHash: "")
                _ = try await server.ensureContainer(container, of: account)
                return account
            }
        } catch {
            fatalError("the in-memory server cannot start: \(error)")
        }
        clock.release()
    }

    final class CreationClock: Sendable {
        let pinned: Mutex<Timestamp?>
        init(_ time: Timestamp) { pinned = Mutex(time) }
        var now: @Sendable () -> Timestamp { { self.pinned.withLock { $0 } ?? WallClock.now() } }
        func release() { pinned.withLock { $0 = nil } }
    }

    /// The container, through the server's rules.
    func container() async throws -> ContainerService {
        try await server.container(containerID, of: account)
    }

    /// A change carried out on the server (its refusals as a client hears them), then its
    /// answer delivered, held or lost as the test asked.
    func carriedOut<T>(_ operation: Operation, _ work: () async throws -> T) async throws -> T {
        let lost = answerFate(operation)
        let result: T
        do {
            result = try await serverCall(work)
        } catch {
            // Refused: nothing was carried out, so the next call's answer is the one to lose.
            if let lost { state.withLock { $0.lostAnswers[operation, default: []].insert(lost, at: 0) } }
            throw error
        }
        return try await delivered(operation, lost: lost, result)
    }

    /// Runs `body` against the server, its refusals as a client hears them.
    func serverCall<T>(_ body: () async throws -> T) async throws -> T {
        do { return try await body() } catch {
            throw Self.remoteError(error)
        }
    }

    /// What `SyncHTTPClient` makes of the server's answer to `error`.
    static func remoteError(_ error: any Error) -> any Error {
        if error is RemoteError || error is CancellationError { return error }
        guard let refusal = try? APIError(mapping: error) else {
            return RemoteError.refused(code: .internalError, message: "internal error: \(error)", current: nil)
        }
        if refusal.code.httpStatus == 401 { return RemoteError.unauthorized }
        return RemoteError.refused(code: refusal.code, message: refusal.message, current: refusal.current)
    }

    // MARK: RemoteStore

    public func ensureContainer() async throws -> ContainerInfo {
        try await enter(.ensureContainer)
        defer { answer(.ensureContainer) }
        return try await serverCall { try await server.ensureContainer(containerID, of: account).info }
    }

    public func changes(since: ChangeCursor, limit: Int) async throws -> ChangePage {
        try await enter(.changes)
        defer { answer(.changes) }
        return try await serverCall { try await container().changes(since: since, limit: limit) }
    }

    public func changeStream(since: ChangeCursor) -> AsyncThrowingStream<ChangeStreamEvent, Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                var registered: Int?
                do {
                    try await self.enter(.changeStream)
                    let feed = try await self.serverCall { try await self.container().follow(since: since) }
                    let subscription = feed.subscribe()
                    registered = try self.state.withLock { s -> Int in
                        guard s.online else { throw RemoteError.unreachable("the in-memory server is offline") }
                        s.nextStream += 1
                        s.streams[s.nextStream] = subscription
                        return s.nextStream
                    }
                    var cursor = try await self.send(feed, after: since, to: continuation)
                    continuation.yield(.ready(cursor))
                    for await _ in subscription.signals {
                        await self.jitterPause("push")
                        cursor = try await self.send(feed, after: cursor, to: continuation)
                    }
                    self.unregister(registered)
                    if !Task.isCancelled && !self.isOnline {
                        throw RemoteError.unreachable("the in-memory server went offline")
                    }
                    continuation.finish()
                } catch {
                    self.unregister(registered)
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    func send(_ feed: ChangeFollower, after cursor: ChangeCursor, to continuation: AsyncThrowingStream<ChangeStreamEvent, Error>.Continuation) async throws -> ChangeCursor {
        try await serverCall {
            try await feed.send(after: cursor) { changes in
                for change in changes { continuation.yield(.change(change)) }
            }
        }
    }

    func unregister(_ id: Int?) {
        guard let id else { return }
        state.withLock { $0.streams.removeValue(forKey: id) }?.close()
    }

    public func item(_ id: ItemID) async throws -> ItemMetadata {
        try await enter(.item)
        defer { answer(.item) }
        return try await serverCall { try await container().item(id) }
    }

    public func download(
        _ digest: ContentDigest, range: Range<Int64>, receive: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void
    ) async throws {
        do {
            try await enter(.download)
            defer { self.answer(.download) }
            let reader = try await serverCall {
                guard try await server.grantedSize(digest, for: account) != nil else {
                    throw APIError(.blobNotFound, "no content with digest \(digest)")
                }
                return try await server.openContent(digest)
            }
            defer { reader.close() }
            let hold = state.withLock { $0.downloadHold }
            let size = reader.size
            // As the server answers the Range header `SyncHTTPClient` sends: an empty range is
            // the whole content, a start at or past the end is 416, an end past the end is clamped.
            var span = 0..<size
            if !range.isEmpty {
                guard range.lowerBound < size else {
                    throw RemoteError.refused(code: .rangeNotSatisfiable, message: "the content is \(size) bytes long", current: nil)
                }
                span = range.lowerBound..<min(range.upperBound, size)
            }
            var offset = span.lowerBound
            var held = false
            while offset < span.upperBound {
                try Task.checkCancellation()
                var end = min(span.upperBound, offset + Int64(self.chunkSize))
                if let hold, !held {
                    if offset >= hold.after {
                        await hold.gate.pass()
                        held = true
                    } else if end > hold.after {
                        end = hold.after
                    }
                }
                guard self.isOnline else { throw RemoteError.unreachable("the connection to the in-memory server dropped") }
                var chunk = [UInt8](repeating: 0, count: Int(end - offset))
                let got = try chunk.withUnsafeMutableBytes { try reader.read(at: offset, into: $0) }
                guard got == chunk.count else { throw RemoteError.protocolError("the content ended early") }
                let corrupt = self.state.withLock { s in
                    s.blobBytesServed += Int64(chunk.count)
                    return s.corruptDownloads
                }
                if corrupt { chunk[0] ^= 0xFF }
                try chunk.withUnsafeBytes { try receive($0) }
                offset = end
            }
        } catch is CancellationError {
            throw RemoteError.unreachable("cancelled")
        }
    }

    public func hasBlob(_ digest: ContentDigest) async throws -> Bool {
        try await enter(.hasBlob)
        defer { answer(.hasBlob) }
        return try await serverCall { try await server.grantedSize(digest, for: account) != nil }
    }

    public func uploadBlob(_ digest: ContentDigest, size: Int64, fromFile path: String) async throws {
        try await enter(.uploadBlob)
        defer { answer(.uploadBlob) }
        if consumeUpload() { throw RemoteError.unreachable("injected: the upload connection dropped") }
        // The HTTP client sends at most `size` bytes of the file; the server hashes what it got.
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw RemoteError.protocolError("cannot read \(path)")
        }
        defer { try? handle.close() }
        let data = (try? handle.read(upToCount: Int(size))) ?? Data()
        _ = try await serverCall {
            let upload = try server.beginUpload(digest, length: Int64(data.count), for: account)
            try data.withUnsafeBytes { try upload.write($0) }
            return try await upload.finish()
        }
    }

    /// Counts one upload against `failUploadsAfter`; true when it must fail.
    func consumeUpload() -> Bool {
        state.withLock { s -> Bool in
            guard let left = s.uploadsLeft else { return false }
            if left <= 0 { return true }
            s.uploadsLeft = left - 1
            return false
        }
    }

    /// Content carried by a create or an update counts as an upload for `failUploadsAfter`:
    /// when the connection drops, the server never gets the request.
    func sendInline(_ requests: some Sequence<Data?>) throws {
        for content in requests where content != nil {
            if consumeUpload() { throw RemoteError.unreachable("injected: the upload connection dropped") }
        }
    }

    public func createItem(_ request: CreateItemRequest) async throws -> ItemMetadata {
        try await enter(.createItem)
        defer { answer(.createItem) }
        stage("create started")
        try sendInline([request.content])
        return try await carriedOut(.createItem) { try await server.createItem(request, in: containerID, of: account) }
    }

    public func createItems(_ requests: [CreateItemRequest]) async throws -> [Result<ItemMetadata, RemoteError>] {
        try await enter(.createItems)
        defer { answer(.createItems) }
        try sendInline(requests.map(\.content))
        return try await carriedOut(.createItems) {
            try await server.createItems(requests, in: containerID, of: account).map { result -> Result<ItemMetadata, RemoteError> in
                if let item = result.item { return .success(item) }
                let e = result.error!
                return .failure(.refused(code: e.code, message: e.message, current: e.current))
            }
        }
    }

    public func updateContent(_ id: ItemID, _ request: UpdateContentRequest) async throws -> ItemMetadata {
        try await enter(.updateContent)
        defer { answer(.updateContent) }
        try sendInline([request.content])
        return try await carriedOut(.updateContent) { try await container().updateContent(id, request) }
    }

    public func updateItem(_ id: ItemID, _ request: UpdateItemRequest) async throws -> ItemMetadata {
        try await enter(.updateItem)
        defer { answer(.updateItem) }
        return try await carriedOut(.updateItem) { try await container().updateItem(id, request) }
    }

    public func deleteItem(_ id: ItemID, base: Revision, recursive: Bool) async throws -> [ItemMetadata] {
        try await enter(.deleteItem)
        defer { answer(.deleteItem) }
        return try await carriedOut(.deleteItem) { try await container().deleteItem(id, base: base, recursive: recursive) }
    }

    public func setXattrs(_ id: ItemID, _ request: SetXattrsRequest) async throws -> ItemMetadata {
        try await enter(.setXattrs)
        defer { answer(.setXattrs) }
        return try await carriedOut(.setXattrs) { try await container().setXattrs(id, request) }
    }
}
