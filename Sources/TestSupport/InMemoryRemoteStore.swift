import Foundation
import ItemModel
import SyncAPI
import SyncEngine
import Synchronization

/// A sync server for one container, in memory: the `RemoteStore` the engine and VFS suites run
/// against instead of HTTP.
///
/// It answers as `ubiq-server` does (SQLiteMetadataStore + SyncServer): revisions and cursors
/// from one increasing sequence (an item's revision is the cursor of the change that made it),
/// a compacted change log (one entry per item, its latest), base-revision checks that refuse
/// with `RemoteError.refused(code: .revisionConflict, message:, current:)`, the same refusal
/// codes for bad names, missing parents, name clashes and unknown blobs, and a push stream that
/// sends the catch-up, then `.ready(cursor)`, then live changes.
///
/// Fault injection: `isOnline` (false: every call throws `RemoteError.unreachable` and
/// the push streams end with it), `failUploadsAfter`, `failNext(_:with:times:)`,
/// `loseAnswer(_:times:)` (the call is carried out but its answer never arrives), gates that hold
/// a call in flight (`hold(_:)`, then `answered(_:)` tells when the released call is done), and
/// `holdDownloads(afterBytes:)` that stops every download part way. `otherDevice` changes the
/// container as another client would, whether or not this client is online. Counters
/// (`calls(_:)`, `bytesDownloaded`) let a test check that something did not talk to the server.
///
/// Guarded by `state` (one Mutex, a leaf). Push-stream and gate continuations are resumed after
/// it is released.
public final class InMemoryRemoteStore: RemoteStore, Sendable {
    /// The calls a client makes; the keys of the counters, gates and injected failures.
    public enum Operation: String, Sendable, Hashable, CaseIterable {
        case ensureContainer, changes, changeStream, item, download, hasBlob, uploadBlob
        case createItem, createItems, updateContent, updateItem, deleteItem, setXattrs, addConflictVersion, resolveConflicts, earlierVersions, restore
        case whoami, keyValues, setKeyValue, removeKeyValue
    }

    /// A path's entry in `tree()`.
    public struct TreeEntry: Sendable, Hashable, CustomStringConvertible {
        public var kind: ItemKind
        public var digest: ContentDigest?
        public init(kind: ItemKind, digest: ContentDigest?) {
            self.kind = kind
            self.digest = digest
        }
        public var description: String { kind == .folder ? "folder" : "file(\(digest?.hex.prefix(8) ?? "-"))" }
    }

    struct State {
        var seq: Int64 = 0
        /// Every item ever created, tombstones included (ids are never reused).
        var items: [ItemID: ItemMetadata] = [:]
        /// Each file's earlier contents, the most recently replaced first (kept for ever here).
        var earlier: [ItemID: [EarlierVersion]] = [:]
        /// The device that saved each file's current content, when its writer named one.
        var savedBy: [ItemID: String] = [:]
        /// The compacted log: each item's latest change.
        var log: [ItemID: ItemChange] = [:]
        var blobs: [ContentDigest: [UInt8]] = [:]
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
        /// Wakes each open push stream; finished to end it.
        var streams: [Int: AsyncStream<Void>.Continuation] = [:]
        /// The key-value store: each key (by its UTF-8) at its latest change, removals included.
        var keyValues: [Data: KeyValueEntry] = [:]
        var keyValueVersion: Int64 = 0
        var identity = String(repeating: "5e", count: 32)
    }

    let state = Mutex(State())
    public let containerID: ContainerID
    public let created: Timestamp
    /// Downloads arrive in chunks of this size, so that readers see content land progressively.
    public let chunkSize: Int

    /// - Parameter created: the container's creation time; another store's, for a server
    ///   restored from a backup of it (same container, a change log behind).
    public init(container: ContainerID = .default, chunkSize: Int = 64 * 1024, created: Timestamp? = nil) {
        self.containerID = container
        self.chunkSize = max(1, chunkSize)
        self.created = created ?? Self.now()
        let created = self.created
        state.withLock { s in
            var root = ItemMetadata(
                id: .root, parentID: nil, name: "", kind: .folder, revision: Revision("0"), size: 0, digest: nil,
                mode: ItemMetadata.defaultMode(for: .folder), created: created, modified: created)
            s.commit(&root, kind: .upsert)
        }
    }

    // MARK: Fault injection

    /// false: every call throws `RemoteError.unreachable`, running downloads fail, and open push
    /// streams end with that error. Another device's changes (`otherDevice`) still happen.
    public var isOnline: Bool {
        get { state.withLock { $0.online } }
        set {
            let ended = state.withLock { s -> [AsyncStream<Void>.Continuation] in
                s.online = newValue
                guard !newValue else { return [] }
                defer { s.streams.removeAll() }
                return Array(s.streams.values)
            }
            for c in ended { c.finish() }
        }
    }

    /// nil: uploads always work. n: the next n blob uploads work, every later one throws
    /// `RemoteError.unreachable` (as a connection dropped mid-upload does) until this is reset.
    public var failUploadsAfter: Int? {
        get { state.withLock { $0.uploadsLeft } }
        set { state.withLock { $0.uploadsLeft = newValue } }
    }

    /// The next `times` calls of `operation` throw `error` (after being counted, before doing anything).
    public func failNext(_ operation: Operation, with error: RemoteError, times: Int = 1) {
        state.withLock { $0.injected[operation, default: []] += Array(repeating: error, count: times) }
    }

    /// The next `times` calls of `operation` are carried out, but their answer is lost: the
    /// caller gets `error`. The default, `RemoteError.unreachable`, is a connection dropped
    /// after the commit; a `protocolError` is a proxy's 502 after the server committed (the
    /// client does not take it for offline, so the rest of the queue goes on meanwhile).
    public func loseAnswer(_ operation: Operation, times: Int = 1,
                           as error: RemoteError = .unreachable("injected: the connection dropped before the answer arrived")) {
        state.withLock { $0.lostAnswers[operation, default: []] += Array(repeating: error, count: times) }
    }

    /// nil: calls, answers and pushes go at once. Set: each call, each answer and each push of
    /// new changes first waits a random time up to this, as on a real link whose requests and
    /// push stream overtake one another.
    public var jitter: Duration? {
        get { state.withLock { $0.jitter } }
        set { state.withLock { $0.jitter = newValue } }
    }

    func jitterPause(_ what: String) async {
        guard let most = jitter else { return }
        let nanos = most.components.seconds * 1_000_000_000 + most.components.attoseconds / 1_000_000_000
        guard nanos > 0 else { return }
        let pause = Int64.random(in: 0...nanos)
        let id = state.withLock { s in
            s.nextPause += 1
            s.pauses[s.nextPause] = (what, pause, ContinuousClock.now)
            return s.nextPause
        }
        try? await Task.sleep(nanoseconds: UInt64(pause))
        _ = state.withLock { $0.pauses.removeValue(forKey: id) }
    }

    /// Jitter pauses that have not ended though their time is up by more than a second.
    public var overduePauses: String {
        let now = ContinuousClock.now
        return state.withLock { s in
            s.pauses.values.filter { now - $0.since > .nanoseconds($0.nanos) + .seconds(1) }
                .map { "\($0.what) (\($0.nanos) ns, \(now - $0.since) ago)" }.joined(separator: ", ")
        }
    }

    /// Answers every later call again (undoes `loseAnswer` that was not used up).
    public func stopLosingAnswers() {
        state.withLock { $0.lostAnswers.removeAll() }
    }

    /// Holds every later call of `operation` in flight (counted, nothing done yet) until the
    /// gate opens. `gate.arrivals` tells how many calls reached it.
    @discardableResult
    public func hold(_ operation: Operation) -> CallGate {
        let gate = CallGate()
        state.withLock { $0.gates[operation] = gate }
        return gate
    }

    /// Every later call of `operation` is carried out (committed, pushed to the streams), and
    /// its answer then waits until the gate opens: the push stream overtakes it, as it may on
    /// a loaded machine. `gate.arrivals` tells how many answers wait.
    @discardableResult
    public func holdAnswers(_ operation: Operation) -> CallGate {
        let gate = CallGate()
        state.withLock { $0.answerGates[operation] = gate }
        return gate
    }

    /// true: every download delivers its bytes with the first one of each chunk flipped, as a
    /// broken transport or disk would; the digest check must catch it.
    public var corruptDownloads: Bool {
        get { state.withLock { $0.corruptDownloads } }
        set { state.withLock { $0.corruptDownloads = newValue } }
    }

    /// Every later download stops after delivering the bytes before offset `afterBytes`, until the gate opens.
    @discardableResult
    public func holdDownloads(afterBytes: Int64) -> CallGate {
        let gate = CallGate()
        state.withLock { $0.downloadHold = (afterBytes, gate) }
        return gate
    }

    /// Opens every gate and forgets them (tests call this on the way out so nothing stays parked).
    public func releaseAll() {
        let gates = state.withLock { s -> [CallGate] in
            defer { s.gates.removeAll(); s.answerGates.removeAll(); s.downloadHold = nil }
            return Array(s.gates.values) + Array(s.answerGates.values) + (s.downloadHold.map { [$0.gate] } ?? [])
        }
        for g in gates { g.open() }
    }

    /// Ends every open push stream normally, as a server restart does; clients reconnect.
    public func dropStreams() {
        let ended = state.withLock { s -> [AsyncStream<Void>.Continuation] in
            defer { s.streams.removeAll() }
            return Array(s.streams.values)
        }
        for c in ended { c.finish() }
    }

    // MARK: Inspection

    /// How many times `operation` was called (including refused and failed calls).
    public func calls(_ operation: Operation) -> Int { state.withLock { $0.calls[operation] ?? 0 } }

    /// How many calls of `operation` got past the injected failures and gates and were answered
    /// (with a result or a refusal). After a gate opens, this tells when the held call is done.
    public func answered(_ operation: Operation) -> Int { state.withLock { $0.answered[operation] ?? 0 } }

    /// Calls entered but not yet answered, per operation ("createItem 3/2" means three calls,
    /// two answered): what a stalled client is still waiting for. The push stream is left out
    /// (it is never answered). Calls refused at the door (offline, an injected failure) are
    /// never answered either, so they show here too; `unansweredStages` says so for each.
    public var callsInFlight: String {
        state.withLock { s in
            Operation.allCases.filter { $0 != .changeStream && (s.calls[$0] ?? 0) != (s.answered[$0] ?? 0) }
                .map { "\($0.rawValue) \(s.calls[$0] ?? 0)/\(s.answered[$0] ?? 0)" }.joined(separator: ", ")
        }
    }

    /// Content bytes sent by downloads so far.
    public var bytesDownloaded: Int64 { state.withLock { $0.blobBytesServed } }

    public var openStreamCount: Int { state.withLock { $0.streams.count } }

    public var latestCursor: ChangeCursor { state.withLock { ChangeCursor(String($0.seq)) } }

    /// A live item; nil for unknown ids and tombstones.
    public func liveItem(_ id: ItemID) -> ItemMetadata? {
        state.withLock { s in s.items[id].flatMap { $0.deleted ? nil : $0 } }
    }

    /// The live item at `/a/b` (`/` is the root).
    public func item(atPath path: String) -> ItemMetadata? {
        state.withLock { s in
            var current = s.items[.root]
            for name in path.split(separator: "/", omittingEmptySubsequences: true) {
                guard let folder = current else { return nil }
                current = s.liveChild(named: String(name), of: folder.id)
            }
            return current
        }
    }

    /// The content of a live file.
    public func content(of id: ItemID) -> [UInt8]? {
        state.withLock { s in
            guard let item = s.items[id], !item.deleted, let digest = item.digest else { return nil }
            return digest == .empty ? [] : s.blobs[digest]
        }
    }

    public func content(atPath path: String) -> [UInt8]? {
        item(atPath: path).flatMap { content(of: $0.id) }
    }

    public func hasBlobStored(_ digest: ContentDigest) -> Bool {
        state.withLock { digest == .empty || $0.blobs[digest] != nil }
    }

    /// Drops a content, as the server's collection does once nothing names it.
    public func forgetBlob(_ digest: ContentDigest) {
        _ = state.withLock { $0.blobs.removeValue(forKey: digest) }
    }

    /// Every live item but the root, by path: what a client that is in sync must show.
    public func tree() -> [String: TreeEntry] {
        state.withLock { s in
            var out: [String: TreeEntry] = [:]
            func walk(_ folder: ItemID, _ prefix: String) {
                for child in s.items.values where child.parentID == folder && !child.deleted {
                    let path = prefix + "/" + child.name
                    out[path] = TreeEntry(kind: child.kind, digest: child.digest)
                    if child.kind == .folder { walk(child.id, path) }
                }
            }
            walk(.root, "")
            return out
        }
    }

    // MARK: Another device

    /// Changes the container as another client would: straight on the server, counted nowhere,
    /// working while this client is offline. Each call is one commit, with a new revision.
    public var otherDevice: OtherDevice { OtherDevice(remote: self) }

    public struct OtherDevice: Sendable {
        let remote: InMemoryRemoteStore

        @discardableResult
        public func createFolder(_ name: String, in parent: ItemID = .root, xattrs: [String: Data] = [:]) throws -> ItemMetadata {
            try remote.mutate { s in
                try s.create(CreateItemRequest(parentID: parent, name: name, kind: .folder, xattrs: xattrs), now: InMemoryRemoteStore.now())
            }
        }

        @discardableResult
        public func createFile(_ name: String, in parent: ItemID = .root, content: [UInt8], mode: UInt32 = 0o644, xattrs: [String: Data] = [:]) throws -> ItemMetadata {
            try remote.mutate { s in
                let digest = s.store(content)
                return try s.create(
                    CreateItemRequest(parentID: parent, name: name, kind: .file, digest: digest, size: Int64(content.count), mode: mode, xattrs: xattrs),
                    now: InMemoryRemoteStore.now())
            }
        }

        /// New content on top of the item's current revision.
        @discardableResult
        public func updateContent(_ id: ItemID, to content: [UInt8]) throws -> ItemMetadata {
            try remote.mutate { s in
                let digest = s.store(content)
                let base = try s.requireLive(id).revision
                return try s.updateContent(id, UpdateContentRequest(baseRevision: base, digest: digest, size: Int64(content.count)), now: InMemoryRemoteStore.now())
            }
        }

        /// Renames and/or moves on top of the item's current revision.
        @discardableResult
        public func move(_ id: ItemID, to name: String? = nil, parent: ItemID? = nil) throws -> ItemMetadata {
            try remote.mutate { s in
                let base = try s.requireLive(id).revision
                return try s.updateItem(id, UpdateItemRequest(baseRevision: base, name: name, parentID: parent))
            }
        }

        /// chmod on top of the item's current revision.
        @discardableResult
        public func setMode(_ id: ItemID, _ mode: UInt32) throws -> ItemMetadata {
            try remote.mutate { s in
                let base = try s.requireLive(id).revision
                return try s.updateItem(id, UpdateItemRequest(baseRevision: base, mode: mode))
            }
        }

        @discardableResult
        public func setXattrs(_ id: ItemID, _ xattrs: [String: Data]) throws -> ItemMetadata {
            try remote.mutate { s in try s.setXattrs(id, SetXattrsRequest(baseRevision: nil, xattrs: xattrs)) }
        }

        /// Resolves every conflict version the file has now, keeping `keep` (nil: the current content).
        @discardableResult
        public func resolveConflicts(_ id: ItemID, keep: ItemID?) throws -> ItemMetadata {
            try remote.mutate { s in
                let item = try s.requireLive(id)
                return try s.resolveConflicts(id, ResolveConflictsRequest(baseRevision: item.revision, settled: item.conflicts.map(\.id), keep: keep))
            }
        }

        @discardableResult
        public func delete(_ id: ItemID, recursive: Bool = false) throws -> [ItemMetadata] {
            try remote.mutate { s in
                let base = try s.requireLive(id).revision
                return try s.delete(id, base: base, recursive: recursive)
            }
        }
    }

    // MARK: RemoteStore

    public func ensureContainer() async throws -> ContainerInfo {
        try await enter(.ensureContainer)
        defer { answer(.ensureContainer) }
        let created = self.created
        return state.withLock { ContainerInfo(id: containerID, created: created, cursor: ChangeCursor(String($0.seq))) }
    }

    public func changes(since: ChangeCursor, limit: Int) async throws -> ChangePage {
        try await enter(.changes)
        defer { answer(.changes) }
        guard (1...10_000).contains(limit) else { throw RemoteError.refused(code: .invalidRequest, message: "limit must be 1…10000", current: nil) }
        return try state.withLock { try $0.page(after: since, limit: limit) }
    }

    public func changeStream(since: ChangeCursor) -> AsyncThrowingStream<ChangeStreamEvent, Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                var registered: Int?
                do {
                    try await self.enter(.changeStream)
                    _ = try self.state.withLock { try $0.page(after: since, limit: 1) }  // the server validates the cursor first
                    // Subscribe before the first read: a commit between the read and the wait still wakes us.
                    let (signals, sink) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
                    registered = try self.state.withLock { s -> Int in
                        guard s.online else { throw RemoteError.unreachable("the in-memory server is offline") }
                        s.nextStream += 1
                        s.streams[s.nextStream] = sink
                        return s.nextStream
                    }
                    var cursor = try self.send(after: since, to: continuation)
                    continuation.yield(.ready(cursor))
                    var sentVersion = self.state.withLock { $0.keyValueVersion }
                    continuation.yield(.keyValues(version: sentVersion))
                    for await _ in signals {
                        await self.jitterPause("push")
                        cursor = try self.send(after: cursor, to: continuation)
                        let version = self.state.withLock { $0.keyValueVersion }
                        if version != sentVersion {
                            sentVersion = version
                            continuation.yield(.keyValues(version: version))
                        }
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

    public func item(_ id: ItemID) async throws -> ItemMetadata {
        try await enter(.item)
        defer { answer(.item) }
        return try state.withLock { s in
            try Self.wellFormed(id)
            return try s.requireLive(id)
        }
    }

    public func download(
        _ digest: ContentDigest, range: Range<Int64>, receive: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void
    ) async throws {
        do {
            try await enter(.download)
            defer { self.answer(.download) }
            let (bytes, hold) = try self.state.withLock { s -> ([UInt8], (after: Int64, gate: CallGate)?) in
                guard let bytes = digest == .empty ? [] : s.blobs[digest] else {
                    throw RemoteError.refused(code: .blobNotFound, message: "no content with digest \(digest)", current: nil)
                }
                return (bytes, s.downloadHold)
            }
            let size = Int64(bytes.count)
            // As the server's Range handling: an empty range is the whole content, a
            // start at or past the end is 416, an end past the end is clamped.
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
                var chunk = bytes[Int(offset)..<Int(end)]
                let corrupt = self.state.withLock { s in
                    s.blobBytesServed += Int64(chunk.count)
                    return s.corruptDownloads
                }
                if corrupt { chunk[chunk.startIndex] ^= 0xFF }
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
        return hasBlobStored(digest)
    }

    /// Content carried by a create or an update, stored as the server does: it counts as an
    /// upload for `failUploadsAfter`, and must hash to its declared digest.
    func storeInline(_ content: Data, declared: ContentDigest?) throws {
        if consumeUpload() { throw RemoteError.unreachable("injected: the upload connection dropped") }
        guard content.count <= SyncProtocol.maxInlineContent else {
            throw RemoteError.refused(code: .payloadTooLarge, message: "inline content is too large", current: nil)
        }
        let bytes = [UInt8](content)
        let actual = ContentDigest.of(bytes)
        guard let declared, actual == declared else {
            throw RemoteError.refused(code: .digestMismatch, message: "the inline content hashes to \(actual); nothing was stored", current: nil)
        }
        state.withLock { $0.blobs[actual] = bytes }
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

    public func uploadBlob(_ digest: ContentDigest, size: Int64, fromFile path: String, progress: @escaping @Sendable (Int64) -> Void) async throws {
        try await enter(.uploadBlob)
        defer { answer(.uploadBlob) }
        if consumeUpload() { throw RemoteError.unreachable("injected: the upload connection dropped") }
        // The HTTP client sends at most `size` bytes of the file; the server hashes what it got.
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw RemoteError.protocolError("cannot read \(path)")
        }
        defer { try? handle.close() }
        let data = (try? handle.read(upToCount: Int(size))) ?? Data()
        let bytes = [UInt8](data)
        let actual = ContentDigest.of(bytes)
        guard actual == digest else {
            throw RemoteError.refused(
                code: .digestMismatch, message: "declared digest \(digest) but the body hashes to \(actual); nothing was stored", current: nil)
        }
        progress(Int64(bytes.count))
        state.withLock { $0.blobs[digest] = bytes }
    }

    public func createItem(_ request: CreateItemRequest) async throws -> ItemMetadata {
        try await enter(.createItem)
        defer { answer(.createItem) }
        return try await delivered(.createItem, try create(request))
    }

    /// A create as the server does it: its inline content first, then the item.
    func create(_ request: CreateItemRequest) throws -> ItemMetadata {
        stage("create started")
        if let content = request.content { try storeInline(content, declared: request.digest) }
        return try mutate { s in try s.create(request, now: Self.now()) }
    }

    /// Each create as `createItem` would do it (a refusal is its result); a lost answer or the
    /// server going away fails the whole batch, after what was done is done.
    public func createItems(_ requests: [CreateItemRequest]) async throws -> [Result<ItemMetadata, RemoteError>] {
        try await enter(.createItems)
        defer { answer(.createItems) }
        var results: [Result<ItemMetadata, RemoteError>] = []
        for request in requests {
            do {
                results.append(.success(try create(request)))
            } catch let error as RemoteError {
                if case .refused = error { results.append(.failure(error)) } else { throw error }
            }
        }
        return try await delivered(.createItems, results)
    }

    public func updateContent(_ id: ItemID, _ request: UpdateContentRequest) async throws -> ItemMetadata {
        try await enter(.updateContent)
        defer { answer(.updateContent) }
        if let content = request.content { try storeInline(content, declared: request.digest) }
        return try await delivered(.updateContent, try mutate { s in try s.updateContent(id, request, now: Self.now()) })
    }

    public func updateItem(_ id: ItemID, _ request: UpdateItemRequest) async throws -> ItemMetadata {
        try await enter(.updateItem)
        defer { answer(.updateItem) }
        return try await delivered(.updateItem, try mutate { s in try s.updateItem(id, request) })
    }

    public func deleteItem(_ id: ItemID, base: Revision, recursive: Bool) async throws -> [ItemMetadata] {
        try await enter(.deleteItem)
        defer { answer(.deleteItem) }
        return try await delivered(.deleteItem, try mutate { s in try s.delete(id, base: base, recursive: recursive) })
    }

    public func setXattrs(_ id: ItemID, _ request: SetXattrsRequest) async throws -> ItemMetadata {
        try await enter(.setXattrs)
        defer { answer(.setXattrs) }
        return try await delivered(.setXattrs, try mutate { s in try s.setXattrs(id, request) })
    }

    public func addConflictVersion(_ id: ItemID, _ request: AddConflictVersionRequest) async throws -> ItemMetadata {
        try await enter(.addConflictVersion)
        defer { answer(.addConflictVersion) }
        if let content = request.content { try storeInline(content, declared: request.version.digest) }
        return try await delivered(.addConflictVersion, try mutate { s in try s.addConflictVersion(id, request.version) })
    }

    public func resolveConflicts(_ id: ItemID, _ request: ResolveConflictsRequest) async throws -> ItemMetadata {
        try await enter(.resolveConflicts)
        defer { answer(.resolveConflicts) }
        return try await delivered(.resolveConflicts, try mutate { s in try s.resolveConflicts(id, request) })
    }

    public func earlierVersions(of id: ItemID) async throws -> [EarlierVersion] {
        try await enter(.earlierVersions)
        defer { answer(.earlierVersions) }
        return try await delivered(.earlierVersions, try mutate { s in
            _ = try s.requireLive(id)
            return s.earlier[id] ?? []
        })
    }

    public func restore(_ id: ItemID, _ request: RestoreRequest) async throws -> ItemMetadata {
        try await enter(.restore)
        defer { answer(.restore) }
        return try await delivered(.restore, try mutate { s in try s.restore(id, request, now: Self.now()) })
    }

    // MARK: Plumbing

    /// Counts the call, then: offline → unreachable; an injected failure → it; a gate → wait.
    func enter(_ operation: Operation) async throws {
        await jitterPause("\(operation.rawValue) call")
        let task = Self.currentTask
        let (failure, gate) = state.withLock { s -> (RemoteError?, CallGate?) in
            s.calls[operation, default: 0] += 1
            if operation != .changeStream { s.stages[task] = "\(operation.rawValue) entered" }
            if !s.online { return (.unreachable("the in-memory server is offline"), nil) }
            if var queue = s.injected[operation], !queue.isEmpty {
                let e = queue.removeFirst()
                s.injected[operation] = queue
                return (e, nil)
            }
            return (nil, s.gates[operation])
        }
        if let failure {
            stage("\(operation.rawValue) refused at the door")
            throw failure
        }
        if let gate {
            stage("\(operation.rawValue) at its gate")
            await gate.pass()
            guard isOnline else { throw RemoteError.unreachable("the in-memory server went offline") }
        }
    }

    func answer(_ operation: Operation) {
        let task = Self.currentTask
        state.withLock { s in
            s.answered[operation, default: 0] += 1
            s.stages[task] = nil
        }
    }

    static var currentTask: Int { withUnsafeCurrentTask { $0?.hashValue ?? 0 } }

    func stage(_ what: String) {
        let task = Self.currentTask
        state.withLock { $0.stages[task] = what }
    }

    /// Where the calls not yet answered are (see `callsInFlight`).
    public var unansweredStages: String { state.withLock { $0.stages.values.sorted().joined(separator: ", ") } }

    /// Waits at the operation's answer gate, if any, then `deliver`.
    func delivered<T>(_ operation: Operation, _ result: T) async throws -> T {
        stage("\(operation.rawValue) done, to be delivered")
        if let gate = state.withLock({ $0.answerGates[operation] }) { await gate.pass() }
        stage("\(operation.rawValue) answer pausing")
        await jitterPause("\(operation.rawValue) answer")
        stage("\(operation.rawValue) answer paused")
        return try deliver(operation, result)
    }

    /// Throws when the answer of this (already carried out) call is to be lost.
    func deliver<T>(_ operation: Operation, _ result: T) throws -> T {
        let lost = state.withLock { s -> RemoteError? in
            guard let error = s.lostAnswers[operation]?.first else { return nil }
            s.lostAnswers[operation]?.removeFirst()
            return error
        }
        if let lost { throw lost }
        return result
    }

    /// One commit (or refusal) under the lock, then the push streams are woken.
    func mutate<T>(_ body: (inout State) throws -> T) throws -> T {
        let (result, wake) = try state.withLock { s -> (T, [AsyncStream<Void>.Continuation]) in
            let before = (s.seq, s.keyValueVersion)
            let result = try body(&s)
            return (result, (s.seq, s.keyValueVersion) != before ? Array(s.streams.values) : [])
        }
        for c in wake { c.yield() }
        return result
    }

    func send(after cursor: ChangeCursor, to continuation: AsyncThrowingStream<ChangeStreamEvent, Error>.Continuation) throws -> ChangeCursor {
        let page = try state.withLock { try $0.page(after: cursor, limit: Int.max) }
        for change in page.changes { continuation.yield(.change(change)) }
        return page.cursor
    }

    func unregister(_ id: Int?) {
        guard let id else { return }
        let c = state.withLock { $0.streams.removeValue(forKey: id) }
        c?.finish()
    }

    static func wellFormed(_ id: ItemID) throws {
        guard id.isWellFormed else {
            throw RemoteError.refused(code: .invalidItemID, message: "'\(id.rawValue.prefix(80))' is not an item id", current: nil)
        }
    }

    static func now() -> Timestamp { WallClock.now() }
}

// MARK: The server's rules (SQLiteMetadataStore and SyncServer, one container)

extension InMemoryRemoteStore.State {
    static func refused(_ code: APIErrorCode, _ message: String, current: ItemMetadata? = nil) -> RemoteError {
        .refused(code: code, message: message, current: current)
    }

    /// Gives the item its new revision and records it as the item's latest change.
    mutating func commit(_ item: inout ItemMetadata, kind: ItemChange.Kind) {
        seq += 1
        item.revision = Revision(String(seq))
        items[item.id] = item
        log[item.id] = ItemChange(cursor: ChangeCursor(String(seq)), kind: kind, item: item)
    }

    mutating func store(_ content: [UInt8]) -> ContentDigest {
        let digest = ContentDigest.of(content)
        blobs[digest] = content
        return digest
    }

    func page(after cursor: ChangeCursor, limit: Int) throws -> ChangePage {
        guard let after = cursor.position else {
            throw Self.refused(.invalidCursor, "'\(cursor.rawValue)' is not a cursor of this server")
        }
        let newer = log.values.compactMap { c -> (Int64, ItemChange)? in
            let n = Int64(c.cursor.rawValue)!
            return n > after ? (n, c) : nil
        }.sorted { $0.0 < $1.0 }.map(\.1)
        let changes = Array(newer.prefix(max(1, limit)))
        return ChangePage(changes: changes, cursor: changes.last?.cursor ?? cursor, hasMore: newer.count > changes.count)
    }

    func requireLive(_ id: ItemID) throws -> ItemMetadata {
        guard let item = items[id], !item.deleted else { throw Self.refused(.itemNotFound, "no item '\(id)'") }
        return item
    }

    func liveChild(named name: String, of parent: ItemID) -> ItemMetadata? {
        items.values.first { $0.parentID == parent && $0.name == name && !$0.deleted }
    }

    func liveChildren(of parent: ItemID) -> [ItemMetadata] {
        items.values.filter { $0.parentID == parent && !$0.deleted }
    }

    static func validName(_ raw: String) throws -> ItemName {
        do { return try ItemName(raw) } catch { throw refused(.invalidName, error.description) }
    }

    static func validXattrs(_ xattrs: [String: Data]) throws {
        do { try SyncedXattr.validate(xattrs) } catch { throw refused(.invalidXattr, error.description) }
    }

    func blobSize(_ digest: ContentDigest, declared: Int64?) throws -> Int64 {
        let size: Int64
        if digest == .empty {
            size = 0
        } else {
            guard let bytes = blobs[digest] else { throw Self.refused(.blobNotFound, "no content with digest \(digest); upload it first") }
            size = Int64(bytes.count)
        }
        if let declared, declared != size {
            throw Self.refused(.sizeMismatch, "declared size \(declared) but the content is \(size) bytes")
        }
        return size
    }

    mutating func create(_ body: CreateItemRequest, now: Timestamp) throws -> ItemMetadata {
        if body.kind == .folder && (body.digest != nil || (body.size ?? 0) != 0) {
            throw Self.refused(.invalidRequest, "a folder has no content: omit digest and size")
        }
        let id = body.id ?? ItemID.random()
        try InMemoryRemoteStore.wellFormed(id)
        try InMemoryRemoteStore.wellFormed(body.parentID)
        let name = try Self.validName(body.name)
        let xattrs = body.xattrs ?? [:]
        try Self.validXattrs(xattrs)
        let parent = try requireLive(body.parentID)
        guard parent.kind == .folder else { throw Self.refused(.notAFolder, "item '\(body.parentID)' is not a folder") }
        if let existing = items[id] {
            // A retried create (the answer to the first was lost) gets the same item back.
            if !existing.deleted, existing.parentID == body.parentID, existing.name == name.rawValue, existing.kind == body.kind,
               body.kind == .folder || existing.digest == (body.digest ?? .empty) {
                return existing
            }
            throw Self.refused(.itemIDTaken, "item id '\(id)' is already used by another item")
        }
        if let clash = liveChild(named: name.rawValue, of: body.parentID) {
            throw Self.refused(.nameExists, "the folder already holds an item named '\(clash.name)'", current: clash)
        }
        var digest: ContentDigest?
        var size: Int64 = 0
        if body.kind == .file {
            digest = body.digest ?? .empty
            size = try blobSize(digest!, declared: body.size)
        }
        var item = ItemMetadata(
            id: id, parentID: body.parentID, name: name.rawValue, kind: body.kind, revision: Revision("0"), size: size,
            digest: digest, mode: (body.mode ?? ItemMetadata.defaultMode(for: body.kind)) & 0o7777,
            created: body.created ?? now, modified: body.modified ?? body.created ?? now, xattrs: xattrs)
        commit(&item, kind: .upsert)
        if body.kind == .file { savedBy[id] = body.device }
        return item
    }

    mutating func updateContent(_ id: ItemID, _ body: UpdateContentRequest, now: Timestamp) throws -> ItemMetadata {
        try InMemoryRemoteStore.wellFormed(id)
        var item = try requireLive(id)
        guard item.kind == .file else { throw Self.refused(.notAFile, "item '\(id)' is not a file") }
        guard item.revision == body.baseRevision else { throw conflict(item) }
        let size = try blobSize(body.digest, declared: body.size)
        keepEarlier(item, replacedBy: body.digest, now: now)
        item.size = size
        item.digest = body.digest
        item.modified = body.modified ?? now
        commit(&item, kind: .upsert)
        savedBy[id] = body.device
        return item
    }

    /// As the server does: the content a change replaces is kept, with the revision that had it.
    mutating func keepEarlier(_ item: ItemMetadata, replacedBy digest: ContentDigest?, now: Timestamp) {
        guard item.kind == .file, let old = item.digest, old != digest else { return }
        earlier[item.id, default: []].insert(
            EarlierVersion(revision: item.revision, digest: old, size: item.size, modified: item.modified, replaced: now, device: savedBy[item.id]), at: 0)
    }

    mutating func restore(_ id: ItemID, _ body: RestoreRequest, now: Timestamp) throws -> ItemMetadata {
        try InMemoryRemoteStore.wellFormed(id)
        var item = try requireLive(id)
        guard item.kind == .file else { throw Self.refused(.notAFile, "item '\(id)' is not a file") }
        guard item.revision == body.baseRevision else { throw conflict(item) }
        guard let chosen = earlier[id]?.first(where: { $0.revision == body.revision }) else {
            throw Self.refused(.versionNotFound, "the file has no earlier version of revision \(body.revision)")
        }
        keepEarlier(item, replacedBy: chosen.digest, now: now)
        item.digest = chosen.digest
        item.size = chosen.size
        item.modified = chosen.modified
        commit(&item, kind: .upsert)
        savedBy[id] = chosen.device
        return item
    }

    mutating func updateItem(_ id: ItemID, _ body: UpdateItemRequest) throws -> ItemMetadata {
        try InMemoryRemoteStore.wellFormed(id)
        let newName = try body.name.map(Self.validName)
        if let p = body.parentID { try InMemoryRemoteStore.wellFormed(p) }
        var item = try requireLive(id)
        guard id != .root else { throw Self.refused(.rootIsImmutable, "the root folder cannot be renamed, moved or deleted") }
        guard item.revision == body.baseRevision else { throw conflict(item) }
        let parentID = body.parentID ?? item.parentID!
        let name = newName?.rawValue ?? item.name
        if parentID != item.parentID {
            let parent = try requireLive(parentID)
            guard parent.kind == .folder else { throw Self.refused(.notAFolder, "item '\(parentID)' is not a folder") }
            var cursor: ItemID? = parentID
            while let c = cursor {
                if c == id { throw Self.refused(.invalidMove, "folder '\(id)' cannot move into itself or below itself") }
                cursor = items[c]?.parentID
            }
        }
        if parentID != item.parentID || name != item.name, let clash = liveChild(named: name, of: parentID), clash.id != id {
            throw Self.refused(.nameExists, "the folder already holds an item named '\(clash.name)'", current: clash)
        }
        item.parentID = parentID
        item.name = name
        if let mode = body.mode { item.mode = mode & 0o7777 }
        if let modified = body.modified { item.modified = modified }
        commit(&item, kind: .upsert)
        return item
    }

    mutating func delete(_ id: ItemID, base: Revision?, recursive: Bool) throws -> [ItemMetadata] {
        try InMemoryRemoteStore.wellFormed(id)
        let item = try requireLive(id)
        guard id != .root else { throw Self.refused(.rootIsImmutable, "the root folder cannot be renamed, moved or deleted") }
        if let base, item.revision != base { throw conflict(item) }
        // Children before their folder, as the server writes its tombstones.
        let doomed = try ItemMetadata.deletionOrder(of: item) { folder in
            let kids = liveChildren(of: folder.id)
            if !kids.isEmpty && !recursive {
                throw Self.refused(.folderNotEmpty, "folder '\(folder.id)' is not empty; pass recursive=true")
            }
            return kids
        }
        var tombstones: [ItemMetadata] = []
        for item in doomed {
            var victim = item.tombstone
            commit(&victim, kind: .delete)
            tombstones.append(victim)
        }
        return tombstones
    }

    mutating func setXattrs(_ id: ItemID, _ body: SetXattrsRequest) throws -> ItemMetadata {
        try InMemoryRemoteStore.wellFormed(id)
        try Self.validXattrs(body.xattrs)
        var item = try requireLive(id)
        if let base = body.baseRevision, item.revision != base { throw conflict(item) }
        item.xattrs = body.xattrs
        commit(&item, kind: .upsert)
        return item
    }

    mutating func addConflictVersion(_ id: ItemID, _ version: ConflictVersion) throws -> ItemMetadata {
        try InMemoryRemoteStore.wellFormed(id)
        try InMemoryRemoteStore.wellFormed(version.id)
        guard ConflictVersion.isValidDevice(version.device) else {
            throw Self.refused(.invalidDevice, "a device name must be 1 to \(ConflictVersion.maxDeviceBytes) bytes")
        }
        var item = try requireLive(id)
        guard item.kind == .file else { throw Self.refused(.notAFile, "item '\(id)' is not a file") }
        if item.conflicts.contains(where: { $0.id == version.id }) { return item }
        var kept = version
        kept.size = try blobSize(version.digest, declared: version.size)
        item.conflicts.append(kept)
        commit(&item, kind: .upsert)
        return item
    }

    mutating func resolveConflicts(_ id: ItemID, _ body: ResolveConflictsRequest) throws -> ItemMetadata {
        try InMemoryRemoteStore.wellFormed(id)
        var item = try requireLive(id)
        guard item.kind == .file, let parentID = item.parentID else { throw Self.refused(.notAFile, "item '\(id)' is not a file") }
        guard item.revision == body.baseRevision else { throw conflict(item) }
        let made: [ConflictCopy]
        let before = item
        do {
            made = try item.conflictCopies(of: Set(body.copies)) { liveChild(named: $0, of: parentID) != nil }
            try item.resolveConflicts(settled: Set(body.settled).union(body.copies), keep: body.keep)
            keepEarlier(before, replacedBy: item.digest, now: InMemoryRemoteStore.now())
        } catch let error as UnknownConflictVersion {
            throw Self.refused(.versionNotFound, "the item has no conflict version '\(error.id)'")
        }
        for copy in made {
            var sibling = ItemMetadata(
                id: copy.id, parentID: parentID, name: copy.name, kind: .file, revision: Revision("0"), size: copy.version.size,
                digest: copy.version.digest, mode: item.mode, created: copy.version.modified, modified: copy.version.modified, xattrs: [:])
            commit(&sibling, kind: .upsert)
            savedBy[copy.id] = copy.version.device
        }
        if let keep = body.keep, let kept = before.conflicts.first(where: { $0.id == keep }) { savedBy[id] = kept.device }
        commit(&item, kind: .upsert)
        return item
    }

    func conflict(_ current: ItemMetadata) -> RemoteError {
        Self.refused(.revisionConflict, "the item changed since the base revision; it is now at \(current.revision)", current: current)
    }
}

/// Holds calls in flight until opened: a test can then act while a request is under way.
public final class CallGate: Sendable {
    struct State {
        var isOpen = false
        var arrivals = 0
        var waiting: [CheckedContinuation<Void, Never>] = []
    }

    let state = Mutex(State())

    public init() {}

    /// How many calls reached the gate so far (waiting or passed).
    public var arrivals: Int { state.withLock { $0.arrivals } }

    /// Lets every waiting and later call through.
    public func open() {
        let waiting = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.isOpen = true
            defer { s.waiting.removeAll() }
            return s.waiting
        }
        for c in waiting { c.resume() }
    }

    func pass() async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            let go = state.withLock { s -> Bool in
                s.arrivals += 1
                if s.isOpen { return true }
                s.waiting.append(c)
                return false
            }
            if go { c.resume() }
        }
    }

}
