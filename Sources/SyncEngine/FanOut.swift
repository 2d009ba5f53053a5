import Synchronization

/// One stream of values for any number of listeners (each `ubiq monitor`, each `kv watch`).
/// A value published with `keep` is also given to every later listener, first: it tells of
/// the state the mount is in (the account it shows changed, the store was first read), which
/// a listener that came after still needs to know.
public final class FanOut<Element: Sendable>: Sendable {
    struct Listeners {
        var next = 0
        var all: [Int: AsyncStream<Element>.Continuation] = [:]
        var kept: [Element] = []
    }
    let listeners = Mutex(Listeners())

    public init() {}

    /// A listener's stream (the kept values first), and how it stops listening.
    public func subscribe() -> (AsyncStream<Element>, @Sendable () -> Void) {
        let (stream, continuation) = AsyncStream<Element>.makeStream(bufferingPolicy: .bufferingNewest(1000))
        // Under the lock with `publish`'s: a value kept meanwhile comes once, either way.
        let id = listeners.withLock { l in
            l.next += 1
            l.all[l.next] = continuation
            for value in l.kept { continuation.yield(value) }
            return l.next
        }
        return (stream, { [weak self] in
            self?.listeners.withLock { _ = $0.all.removeValue(forKey: id) }
            continuation.finish()
        })
    }

    /// Never waits: a listener that reads too slowly loses the oldest of what it has not read.
    public func publish(_ value: Element, keep: Bool = false) {
        let all = listeners.withLock { l in
            if keep { l.kept.append(value) }
            return Array(l.all.values)
        }
        for c in all { c.yield(value) }
    }

    /// Ends every listener's stream: the mount is gone, and so a listener learns it (and the
    /// control server has no open response left to wait for as it stops).
    public func finishAll() {
        for c in listeners.withLock({ l in defer { l.all.removeAll() }; return Array(l.all.values) }) { c.finish() }
    }
}
