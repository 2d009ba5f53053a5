import ItemModel
import Logging
import ServerStorage
import ServiceLifecycle
import SyncService

/// What accounts leave behind: the contents queued when their last account was removed
/// (`ubiq-server account remove` may run in another process, which cannot delete a file an
/// upload here may be granting at that moment), looked for every `interval`; and tokens that
/// expired more than `keepExpired` ago, forgotten hourly (until then a client is told its
/// token expired rather than that it is unknown).
public struct AccountCleanup: Service {
    let service: SyncService
    let logger: Logger
    let interval: Duration
    static let keepExpired: Timestamp = 30 * 86_400 * 1_000_000_000
    static let tokenPass: Duration = .seconds(3600)

    public init(service: SyncService, logger: Logger, interval: Duration = .seconds(2)) {
        self.service = service
        self.logger = logger
        self.interval = interval
    }

    public func run() async throws {
        var lastTokenPass: ContinuousClock.Instant?
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            do {
                let removed = try await service.deletePendingBlobs()
                if removed > 0 { logger.info("contents of removed accounts deleted", metadata: ["count": "\(removed)"]) }
                if lastTokenPass.map({ .now - $0 >= Self.tokenPass }) ?? true {
                    lastTokenPass = .now
                    let forgotten = try await service.storage.accounts.forgetTokens(expiredBefore: WallClock.now() - Self.keepExpired)
                    if forgotten > 0 { logger.info("expired tokens forgotten", metadata: ["count": "\(forgotten)"]) }
                }
            } catch {
                logger.error("cannot delete what removed accounts left", metadata: ["error": "\(error)"])
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }
}
