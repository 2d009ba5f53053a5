import Synchronization

/// Wakes the push streams of a container when one of its changes commits.
///
/// A signal carries no data: a woken stream reads the change log from its own cursor, so a
/// burst of commits coalesces into one read and nothing can be missed between signals
/// (each subscriber subscribes before its first read).
///
/// With an announcer (`CommitAnnouncer`), each commit here is also announced to the other
/// server processes of the deployment, and theirs wake the streams here (`follow`).
///
/// Guarded by one `Mutex`; continuations are resumed outside it.
public final class ChangeHub: Sendable {
    struct Subscriber {
        let container: Int64
        let continuation: AsyncStream<Void>.Continuation
    }

    private let state = Mutex<(next: Int, subscribers: [Int: Subscriber])>((0, [:]))
    let announcer: (any CommitAnnouncer)?

    public init(announcer: (any CommitAnnouncer)? = nil) {
        self.announcer = announcer
    }

    public struct Subscription: Sendable {
        public let signals: AsyncStream<Void>
        let cancel: @Sendable () -> Void
        public func close() { cancel() }
    }

    public func subscribe(container: Int64) -> Subscription {
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let id = state.withLock { state in
            state.next += 1
            state.subscribers[state.next] = Subscriber(container: container, continuation: continuation)
            return state.next
        }
        return Subscription(signals: stream) { [weak self] in
            let removed = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
            removed?.continuation.finish()
        }
    }

    /// A commit in `container`: wakes its streams here and tells the other processes.
    public func publish(container: Int64) {
        wake(container: container)
        announcer?.announce(container: container)
    }

    func wake(container: Int64?) {
        let targets = state.withLock { $0.subscribers.values.filter { container == nil || $0.container == container } }
        for t in targets { t.continuation.yield() }
    }

    /// Wakes the streams here for what the other processes announce, until the announcements
    /// end or the task is cancelled. A nil announcement (some may have been missed) wakes every
    /// stream, each of which reads the log from its own cursor: nothing is taken on trust.
    public func follow() async {
        guard let announcer else { return }
        for await container in announcer.announcements() {
            wake(container: container)
        }
    }

    /// Ends every stream, so that a graceful shutdown does not wait for clients to hang up.
    public func finishAll() {
        let all = state.withLock { state in
            defer { state.subscribers.removeAll() }
            return Array(state.subscribers.values)
        }
        for s in all { s.continuation.finish() }
    }

    public var subscriberCount: Int { state.withLock { $0.subscribers.count } }
}
