import ItemModel
import Logging
import ServerStorage
import ServiceLifecycle
import SyncService

/// Forgets the earlier contents of files once they have been kept for `keep`
/// (`ubiq-server --keep-versions`), then deletes the blobs nothing names any more and that no
/// account uploaded or asked about for as long: at start, then every `keep` / 10 (at most an
/// hour), so that nothing is kept much past its time.
public struct VersionRetention: Service {
    let service: SyncService
    let keep: Duration
    let logger: Logger

    public init(service: SyncService, keep: Duration, logger: Logger) {
        self.service = service
        self.keep = keep
        self.logger = logger
    }

    var interval: Duration { min(.seconds(3600), max(.milliseconds(100), keep / 10)) }

    public func run() async throws {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            let nanos = keep.components.seconds * 1_000_000_000 + keep.components.attoseconds / 1_000_000_000
            let cutoff = WallClock.now() - nanos
            do {
                let gone = try await service.storage.metadata.forgetEarlierVersions(replacedBefore: cutoff)
                if gone > 0 { logger.info("earlier versions past their retention forgotten", metadata: ["count": "\(gone)"]) }
                let removed = try await service.collectBlobs(grantedBefore: cutoff)
                if removed > 0 { logger.info("contents nothing names any more deleted", metadata: ["count": "\(removed)"]) }
            } catch {
                logger.error("cannot forget earlier versions or delete unused contents", metadata: ["error": "\(error)"])
            }
            // Ends early on a graceful shutdown: the sleep is cancelled with the service.
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }
}
