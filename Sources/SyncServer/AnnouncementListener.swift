import ServiceLifecycle
import SyncService

/// Wakes this process's push streams for the commits other server processes of the deployment
/// announce (`ChangeHub.follow`), for as long as the server runs.
public struct AnnouncementListener: Service {
    let hub: ChangeHub

    public init(hub: ChangeHub) {
        self.hub = hub
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown { await hub.follow() }
    }
}
