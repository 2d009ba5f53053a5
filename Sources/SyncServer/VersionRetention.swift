import ItemModel
import Logging
import ServerStorage
import ServiceLifecycle

/// Forgets the earlier contents of files once they have been kept for `keep`
/// (`ubiq-server --keep-versions`): at start, then every `keep` / 10 (at most an hour), so that
/// nothing is kept much past its time.
public struct VersionRetention: Service {
    let metadata: any MetadataStore
    let keep: Duration
    let logger: Logger

    public init(metadata: any MetadataStore, keep: Duration, logger: Logger) {
        self.metadata = metadata
        self.keep = keep
        self.logger = logger
    }

    var interval: Duration { min(.seconds(3600), max(.milliseconds(100), keep / 10)) }

    public func run() async throws {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            let nanos = keep.components.seconds * 1_000_000_000 + keep.components.attoseconds / 1_000_000_000
            do {
                let gone = try await metadata.forgetEarlierVersions(replacedBefore: WallClock.now() - nanos)
                if gone > 0 { logger.info("earlier versions past their retention forgotten", metadata: ["count": "\(gone)"]) }
            } catch {
                logger.error("cannot forget earlier versions", metadata: ["error": "\(error)"])
            }
            // Ends early on a graceful shutdown: the sleep is cancelled with the service.
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }
}
