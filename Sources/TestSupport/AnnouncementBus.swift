import Synchronization
import SyncService

/// Commit announcements between server processes, in one test process: each replica takes an
/// `endpoint`, and what one announces reaches every other endpoint, as `LISTEN`/`NOTIFY` would.
/// `lose` drops announcements on their way, and `reconnected` tells an endpoint that some may
/// have been missed, as a replica whose listening connection came back is told.
public final class AnnouncementBus: Sendable {
    public final class Endpoint: CommitAnnouncer {
        let bus: AnnouncementBus
        let id: Int
        let stream: AsyncStream<Int64?>
        let continuation: AsyncStream<Int64?>.Continuation

        init(bus: AnnouncementBus, id: Int) {
            self.bus = bus
            self.id = id
            (stream, continuation) = AsyncStream<Int64?>.makeStream()
        }

        public func announce(container: Int64) { bus.deliver(container, from: id) }
        public func announcements() -> AsyncStream<Int64?> { stream }
        /// Some announcements may have been missed: wake every stream.
        public func reconnected() { continuation.yield(nil) }
    }

    private let state = Mutex<(endpoints: [Endpoint], lost: Int, losing: Bool)>(([], 0, false))

    public init() {}

    public func endpoint() -> Endpoint {
        state.withLock { state in
            let endpoint = Endpoint(bus: self, id: state.endpoints.count)
            state.endpoints.append(endpoint)
            return endpoint
        }
    }

    /// While true, announcements are dropped (and counted in `lost`).
    public func lose(_ losing: Bool) { state.withLock { $0.losing = losing } }
    public var lost: Int { state.withLock { $0.lost } }

    func deliver(_ container: Int64, from sender: Int) {
        let targets: [Endpoint] = state.withLock { state in
            if state.losing {
                state.lost += 1
                return []
            }
            return state.endpoints.filter { $0.id != sender }
        }
        for endpoint in targets { endpoint.continuation.yield(container) }
    }
}
