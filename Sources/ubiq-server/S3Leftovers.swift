import Foundation
import Logging
import S3BlobStore
import ServiceLifecycle

/// Takes back what uploads to the bucket left unfinished (a server that died mid-upload leaves
/// parts, which the service keeps and bills until they are aborted): at start, then every six
/// hours. Only uploads begun a day ago or more: other servers of the deployment may share the
/// bucket, and no upload of theirs runs that long.
struct S3Leftovers: Service {
    let bucket: S3BlobStore
    let logger: Logger
    static let age: TimeInterval = 86_400
    static let interval: Duration = .seconds(6 * 3600)

    func run() async throws {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            do {
                let removed = try await bucket.removeLeftovers(startedBefore: Date() - Self.age)
                if removed > 0 { logger.info("unfinished uploads to the bucket taken back", metadata: ["count": "\(removed)"]) }
            } catch {
                logger.error("cannot take back unfinished uploads to the bucket", metadata: ["error": "\(error)"])
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: Self.interval) }
        }
    }
}
