import Foundation
import ItemModel
import SyncAPI
import SyncEngine
import Synchronization

/// The device's connection to a test's server, with faults injected on the way: it passes each
/// call to the connection it wraps (an in-process `ServiceRemote`, or `SyncHTTPClient` to a
/// running `ubiq-server`), so the server's own rules answer, and lets a test break the link.
///
/// Fault injection: `isOnline` (false: every call throws `RemoteError.unreachable` and
/// the push streams end with it), `failUploadsAfter`, `failNext(_:with:times:)`,
/// `loseAnswer(_:times:)` (the call is carried out but its answer never arrives), gates that hold
/// a call in flight (`hold(_:)`, then `answered(_:)` tells when the released call is done),
/// `holdDownloads(afterBytes:)` that stops every download part way, and `jitter`. Counters
/// (`calls(_:)`, `bytesDownloaded`) let a test check that something did not talk to the server.
/// `server` sees the server and changes it as another device, through a connection of its own
/// that no fault touches, whether or not this one is online.
///
/// Guarded by `state` (one Mutex, a leaf). Stream ends and gate continuations are resumed
/// after it is released.
public final class FaultInjectingRemote: RemoteStore, Sendable {
    /// The calls a client makes; the keys of the counters, gates and injected failures.
    public enum Operation: String, Sendable, Hashable, CaseIterable {
        case ensureContainer, changes, changeStream, item, children, download, hasBlob, uploadBlob
        case createItem, createItems, updateContent, updateItem, deleteItem, setXattrs, addConflictVersion, resolveConflicts, earlierVersions, restore
        case whoami, keyValues, setKeyValue, removeKeyValue
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
        /// Ends each open push stream: with an error when the link goes, without one when the
        /// server drops it.
        var streams: [Int: @Sendable ((any Error)?) -> Void] = [:]
    }

    let state = Mutex(State())
    /// The connection every call goes on to.
    public let base: any RemoteStore
    /// The server as another device sees it (no fault applies there).
    public let server: ServerView
    /// The in-process server behind `base`, when it is one.
    public let inMemory: InMemoryServer?

    public init(wrapping base: any RemoteStore, server: ServerView, inMemory: InMemoryServer? = nil) {
        self.base = base
        self.server = server
        self.inMemory = inMemory
    }

    /// A connection to a new in-process server (or to `server`), with its own view of it.
    public static func inMemory(_ server: InMemoryServer? = nil, chunkSize: Int = 64 * 1024) async throws -> FaultInjectingRemote {
        let server = if let server { server } else { try await InMemoryServer() }
        return FaultInjectingRemote(wrapping: server.connect(chunkSize: chunkSize), server: ServerView(server.connect()), inMemory: server)
    }

    // MARK: Fault injection

    /// false: every call throws `RemoteError.unreachable`, running downloads fail, and open push
    /// streams end with that error. Another device's changes (`otherDevice`) still happen.
    public var isOnline: Bool {
        get { state.withLock { $0.online } }
        set {
            let ended = state.withLock { s -> [@Sendable ((any Error)?) -> Void] in
                s.online = newValue
                guard !newValue else { return [] }
                defer { s.streams.removeAll() }
                return Array(s.streams.values)
            }
            for end in ended { end(RemoteError.unreachable("the link to the server went down")) }
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
    /// its answer (a refusal too) then waits until the gate opens: the push stream overtakes it, as it may on
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
        let ended = state.withLock { s -> [@Sendable ((any Error)?) -> Void] in
            defer { s.streams.removeAll() }
            return Array(s.streams.values)
        }
        for end in ended { end(nil) }
    }

    // MARK: Counters

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

    // MARK: RemoteStore

    public func ensureContainer() async throws -> ContainerInfo {
        try await enter(.ensureContainer)
        defer { answer(.ensureContainer) }
        return try await base.ensureContainer()
    }

    public func changes(since: ChangeCursor, limit: Int) async throws -> ChangePage {
        try await enter(.changes)
        defer { answer(.changes) }
        return try await base.changes(since: since, limit: limit)
    }

    /// The wrapped stream, passed on event by event (a live change after `jitter`), until it
    /// ends, the link goes down (`isOnline`: it ends with `unreachable`) or the server drops it
    /// (`dropStreams`: it ends normally).
    public func changeStream(since: ChangeCursor) -> AsyncThrowingStream<ChangeStreamEvent, Error> {
        AsyncThrowingStream { continuation in
            let id = state.withLock { s in
                s.nextStream += 1
                return s.nextStream
            }
            let task = Task {
                do {
                    try await self.enter(.changeStream)
                    try self.register(id) { error in continuation.finish(throwing: error) }
                    var caughtUp = false
                    for try await event in self.base.changeStream(since: since) {
                        switch event {
                        case .ready: caughtUp = true
                        case .change where caughtUp: await self.jitterPause("push")
                        default: break
                        }
                        continuation.yield(event)
                    }
                    self.unregister(id)
                    continuation.finish()
                } catch {
                    self.unregister(id)
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in
                task.cancel()
                self.unregister(id)
            }
        }
    }

    public func item(_ id: ItemID) async throws -> ItemMetadata {
        try await enter(.item)
        defer { answer(.item) }
        return try await base.item(id)
    }

    public func children(of id: ItemID) async throws -> [ItemMetadata] {
        try await enter(.children)
        defer { answer(.children) }
        return try await base.children(of: id)
    }

    public func download(
        _ digest: ContentDigest, range: Range<Int64>, receive: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void
    ) async throws {
        do {
            try await enter(.download)
            defer { answer(.download) }
            let delivery = Delivery(remote: self, receive: receive)
            guard let hold = state.withLock({ $0.downloadHold }) else {
                return try await base.download(digest, range: range, receive: delivery.pass)
            }
            // An empty range is the whole content.
            let start = range.isEmpty ? 0 : range.lowerBound
            let end = range.isEmpty ? Int64.max : range.upperBound
            if start < hold.after {
                try await base.download(digest, range: start..<min(end, hold.after), receive: delivery.pass)
                // The content or the range ended before the hold.
                if delivery.count < hold.after - start || end <= hold.after { return }
            }
            await hold.gate.pass()
            guard isOnline else { throw RemoteError.unreachable("the connection to the server dropped") }
            try await base.download(digest, range: max(start, hold.after)..<end, receive: delivery.pass)
        } catch is CancellationError {
            throw RemoteError.unreachable("cancelled")
        }
    }

    /// Hands a download's bytes on, counted, flipped when `corruptDownloads`, and failing once
    /// the link is down.
    final class Delivery: Sendable {
        let remote: FaultInjectingRemote
        let receive: @Sendable (UnsafeRawBufferPointer) throws -> Void
        let passed = Mutex<Int64>(0)

        init(remote: FaultInjectingRemote, receive: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void) {
            self.remote = remote
            self.receive = receive
        }

        var count: Int64 { passed.withLock { $0 } }

        @Sendable func pass(_ chunk: UnsafeRawBufferPointer) throws {
            guard remote.isOnline else { throw RemoteError.unreachable("the connection to the server dropped") }
            passed.withLock { $0 += Int64(chunk.count) }
            let corrupt = remote.state.withLock { s in
                s.blobBytesServed += Int64(chunk.count)
                return s.corruptDownloads
            }
            guard corrupt, !chunk.isEmpty else { return try receive(chunk) }
            var flipped = [UInt8](chunk)
            flipped[0] ^= 0xFF
            try flipped.withUnsafeBytes { try receive($0) }
        }
    }

    public func hasBlob(_ digest: ContentDigest) async throws -> Bool {
        try await enter(.hasBlob)
        defer { answer(.hasBlob) }
        return try await base.hasBlob(digest)
    }

    public func uploadBlob(_ digest: ContentDigest, size: Int64, fromFile path: String, progress: @escaping @Sendable (Int64) -> Void) async throws {
        try await enter(.uploadBlob)
        defer { answer(.uploadBlob) }
        try consumeUpload()
        try await base.uploadBlob(digest, size: size, fromFile: path, progress: progress)
    }

    public func createItem(_ request: CreateItemRequest) async throws -> ItemMetadata {
        try await enter(.createItem)
        defer { answer(.createItem) }
        stage("create started")
        if request.content != nil { try consumeUpload() }
        return try await delivered(.createItem) { try await base.createItem(request) }
    }

    /// A batch whose inline contents run out of `failUploadsAfter` fails as a connection
    /// dropped part way: the creates before that one are done, then the call throws.
    public func createItems(_ requests: [CreateItemRequest]) async throws -> [Result<ItemMetadata, RemoteError>] {
        try await enter(.createItems)
        defer { answer(.createItems) }
        var sent = requests.count
        for (index, request) in requests.enumerated() where request.content != nil {
            do { try consumeUpload() } catch {
                sent = index
                break
            }
        }
        if sent < requests.count {
            if sent > 0 { _ = try await base.createItems(Array(requests.prefix(sent))) }
            throw Self.uploadDropped
        }
        return try await delivered(.createItems) { try await base.createItems(requests) }
    }

    public func updateContent(_ id: ItemID, _ request: UpdateContentRequest) async throws -> ItemMetadata {
        try await enter(.updateContent)
        defer { answer(.updateContent) }
        if request.content != nil { try consumeUpload() }
        return try await delivered(.updateContent) { try await base.updateContent(id, request) }
    }

    public func updateItem(_ id: ItemID, _ request: UpdateItemRequest) async throws -> ItemMetadata {
        try await enter(.updateItem)
        defer { answer(.updateItem) }
        return try await delivered(.updateItem) { try await base.updateItem(id, request) }
    }

    public func deleteItem(_ id: ItemID, base revision: Revision, recursive: Bool) async throws -> [ItemMetadata] {
        try await enter(.deleteItem)
        defer { answer(.deleteItem) }
        return try await delivered(.deleteItem) { try await base.deleteItem(id, base: revision, recursive: recursive) }
    }

    public func setXattrs(_ id: ItemID, _ request: SetXattrsRequest) async throws -> ItemMetadata {
        try await enter(.setXattrs)
        defer { answer(.setXattrs) }
        return try await delivered(.setXattrs) { try await base.setXattrs(id, request) }
    }

    public func addConflictVersion(_ id: ItemID, _ request: AddConflictVersionRequest) async throws -> ItemMetadata {
        try await enter(.addConflictVersion)
        defer { answer(.addConflictVersion) }
        if request.content != nil { try consumeUpload() }
        return try await delivered(.addConflictVersion) { try await base.addConflictVersion(id, request) }
    }

    public func resolveConflicts(_ id: ItemID, _ request: ResolveConflictsRequest) async throws -> ItemMetadata {
        try await enter(.resolveConflicts)
        defer { answer(.resolveConflicts) }
        return try await delivered(.resolveConflicts) { try await base.resolveConflicts(id, request) }
    }

    public func earlierVersions(of id: ItemID) async throws -> [EarlierVersion] {
        try await enter(.earlierVersions)
        defer { answer(.earlierVersions) }
        return try await delivered(.earlierVersions) { try await base.earlierVersions(of: id) }
    }

    public func restore(_ id: ItemID, _ request: RestoreRequest) async throws -> ItemMetadata {
        try await enter(.restore)
        defer { answer(.restore) }
        return try await delivered(.restore) { try await base.restore(id, request) }
    }

    public func whoami() async throws -> WhoAmI {
        try await enter(.whoami)
        defer { answer(.whoami) }
        return try await base.whoami()
    }

    public func keyValues(since: Int64) async throws -> KeyValuePage {
        try await enter(.keyValues)
        defer { answer(.keyValues) }
        return try await delivered(.keyValues) { try await base.keyValues(since: since) }
    }

    public func setKeyValue(_ key: String, json: Data) async throws -> Int64 {
        try await enter(.setKeyValue)
        defer { answer(.setKeyValue) }
        return try await delivered(.setKeyValue) { try await base.setKeyValue(key, json: json) }
    }

    public func removeKeyValue(_ key: String) async throws -> Int64 {
        try await enter(.removeKeyValue)
        defer { answer(.removeKeyValue) }
        return try await delivered(.removeKeyValue) { try await base.removeKeyValue(key) }
    }

    // MARK: Plumbing

    /// Counts the call, then: offline → unreachable; an injected failure → it; a gate → wait.
    func enter(_ operation: Operation) async throws {
        await jitterPause("\(operation.rawValue) call")
        let task = Self.currentTask
        let (failure, gate) = state.withLock { s -> (RemoteError?, CallGate?) in
            s.calls[operation, default: 0] += 1
            if operation != .changeStream { s.stages[task] = "\(operation.rawValue) entered" }
            if !s.online { return (.unreachable("the link to the server is down"), nil) }
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
            guard isOnline else { throw RemoteError.unreachable("the link to the server went down") }
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

    /// Makes the call, waits at the operation's answer gate (a refusal too is an answer that
    /// can come late), then `deliver`.
    func delivered<T>(_ operation: Operation, _ call: () async throws -> T) async throws -> T {
        let result: Result<T, any Error>
        do { result = .success(try await call()) } catch { result = .failure(error) }
        stage("\(operation.rawValue) done, to be delivered")
        if let gate = state.withLock({ $0.answerGates[operation] }) { await gate.pass() }
        stage("\(operation.rawValue) answer pausing")
        await jitterPause("\(operation.rawValue) answer")
        stage("\(operation.rawValue) answer paused")
        return try deliver(operation, try result.get())
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

    static let uploadDropped = RemoteError.unreachable("injected: the upload connection dropped")

    /// Counts one upload against `failUploadsAfter`; throws when it must fail.
    func consumeUpload() throws {
        let fail = state.withLock { s -> Bool in
            guard let left = s.uploadsLeft else { return false }
            if left <= 0 { return true }
            s.uploadsLeft = left - 1
            return false
        }
        if fail { throw Self.uploadDropped }
    }

    /// Lets `isOnline` and `dropStreams` end the stream; refused while the link is down.
    func register(_ id: Int, end: @escaping @Sendable ((any Error)?) -> Void) throws {
        try state.withLock { s in
            guard s.online else { throw RemoteError.unreachable("the link to the server is down") }
            s.streams[id] = end
        }
    }

    func unregister(_ id: Int) {
        _ = state.withLock { $0.streams.removeValue(forKey: id) }
    }

    // MARK: The server, through `server`

    public var otherDevice: OtherDevice { server.otherDevice }
    public func latestCursor() async throws -> ChangeCursor { try await server.latestCursor() }
    public func liveItem(_ id: ItemID) async throws -> ItemMetadata? { try await server.liveItem(id) }
    public func item(atPath path: String) async throws -> ItemMetadata? { try await server.item(atPath: path) }
    public func content(of id: ItemID) async throws -> [UInt8]? { try await server.content(of: id) }
    public func content(atPath path: String) async throws -> [UInt8]? { try await server.content(atPath: path) }
    public func tree() async throws -> [String: ServerView.TreeEntry] { try await server.tree() }
    public func storedKeyValues() async throws -> [String: Data] { try await server.storedKeyValues() }
}
