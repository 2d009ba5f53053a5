import Hummingbird
import Logging
import NIOCore
import ServiceLifecycle

extension SyncServer {
    /// The runnable server: the router on `host:port`. `onListening` gets the bound port (useful
    /// with port 0). Run it with `runService()` or inside a `ServiceGroup`.
    public func makeApplication(
        host: String, port: Int, logger: Logger, onListening: @escaping @Sendable (Int) async -> Void = { _ in }
    ) -> some ApplicationProtocol {
        Application(
            router: makeRouter(),
            configuration: .init(address: .hostname(host, port: port), serverName: "ubiq-server"),
            onServerRunning: { channel in await onListening(channel.localAddress?.port ?? port) },
            logger: logger)
    }
}
