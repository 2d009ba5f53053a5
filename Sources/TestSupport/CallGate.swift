import Synchronization

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
