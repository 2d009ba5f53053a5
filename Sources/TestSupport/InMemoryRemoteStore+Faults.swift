import Foundation
import ItemModel
import SyncAPI
import SyncService

// The test powers of the in-memory server: failures, lost answers, gates and jitter, which its
// calls meet before and after the server's rules run.

extension InMemoryRemoteStore {
    /// false: every call throws `RemoteError.unreachable`, running downloads fail, and open push
    /// streams end with that error. Another device's changes (`otherDevice`) still happen.
    public var isOnline: Bool {
        get { state.withLock { $0.online } }
        set {
            let ended = state.withLock { s -> [ChangeHub.Subscription] in
                s.online = newValue
                guard !newValue else { return [] }
                defer { s.streams.removeAll() }
                return Array(s.streams.values)
            }
            for subscription in ended { subscription.close() }
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
        let ended = state.withLock { s -> [ChangeHub.Subscription] in
            defer { s.streams.removeAll() }
            return Array(s.streams.values)
        }
        for subscription in ended { subscription.close() }
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

    /// Whether this call's answer is to be lost, decided as the call starts its work: a test
    /// that stops losing answers gets answers only for the calls made after that.
    func answerFate(_ operation: Operation) -> RemoteError? {
        state.withLock { s -> RemoteError? in
            guard let error = s.lostAnswers[operation]?.first else { return nil }
            s.lostAnswers[operation]?.removeFirst()
            return error
        }
    }

    /// Waits at the operation's answer gate, if any, then delivers the result, or throws when
    /// the answer of this (already carried out) call is lost.
    func delivered<T>(_ operation: Operation, lost: RemoteError?, _ result: T) async throws -> T {
        stage("\(operation.rawValue) done, to be delivered")
        if let gate = state.withLock({ $0.answerGates[operation] }) { await gate.pass() }
        stage("\(operation.rawValue) answer pausing")
        await jitterPause("\(operation.rawValue) answer")
        stage("\(operation.rawValue) answer paused")
        if let lost { throw lost }
        return result
    }
}
