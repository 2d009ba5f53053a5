import Hummingbird
import HummingbirdCore
import HummingbirdTLS
import Logging
import NIOCore
import ServiceLifecycle
import SyncAPI

/// Where the server listens: a TCP address, or a Unix socket (the embedded default of each user,
/// which only that user can reach).
public enum ListenAddress: Sendable, Equatable, CustomStringConvertible {
    case tcp(host: String, port: Int)
    case unixSocket(path: String)

    /// `HOST:PORT` (`[::1]:8420` for IPv6), or `unix:PATH` with an absolute path.
    public init?(_ text: String) {
        if let path = UnixSocketAddress.path(in: text) {
            guard path.hasPrefix("/"), path.utf8.count <= UnixSocketAddress.longestPath else { return nil }
            self = .unixSocket(path: path)
            return
        }
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { return nil }
        self = .tcp(host: host, port: port)
    }

    public var description: String {
        switch self {
        case .tcp(let host, let port): host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        case .unixSocket(let path): UnixSocketAddress.address(of: path)
        }
    }
}

extension SyncServer {
    /// The runnable server: the router on `address`. `onListening` gets the address as bound
    /// (with the port chosen when asked for port 0). Run it with `runService()` or inside a
    /// `ServiceGroup`.
    /// `tls`: serve HTTPS with these certificates.
    public func makeApplication(
        address: ListenAddress, tls: TLSCertificates? = nil, logger: Logger, onListening: @escaping @Sendable (ListenAddress) async -> Void = { _ in }
    ) throws -> some ApplicationProtocol {
        try Self.application(router: makeRouter(), address: address, tls: tls, limits: configuration.connections, logger: logger, onListening: onListening)
    }

    /// `/metrics` alone, on an address of its own (`ubiq-server --metrics-listen`): the API may
    /// face the world while its metrics stay on a private network. The main router then has
    /// no such route.
    public func makeMetricsApplication(
        address: ListenAddress, logger: Logger, onListening: @escaping @Sendable (ListenAddress) async -> Void = { _ in }
    ) throws -> some ApplicationProtocol {
        let router = Router(context: ServerContext.self)
        addMetricsRoute(to: router)
        return try Self.application(router: router, address: address, tls: nil, limits: configuration.connections, logger: logger, onListening: onListening)
    }

    static func application(
        router: Router<ServerContext>, address: ListenAddress, tls: TLSCertificates?, limits: ConnectionLimits, logger: Logger,
        onListening: @escaping @Sendable (ListenAddress) async -> Void
    ) throws -> some ApplicationProtocol {
        let bind: BindAddress
        switch address {
        case .tcp(let host, let port): bind = .hostname(host, port: port)
        case .unixSocket(let path): bind = .unixDomainSocket(path: path)
        }
        let writeTimeout = TimeAmount(limits.writeTimeout)
        let http1 = HTTPServerBuilder.http1(configuration: .init(
            additionalChannelHandlers: [StalledWriteTimeout(limit: writeTimeout)],
            idleTimeout: TimeAmount(limits.idleTimeout),
            httpDecoderConfiguration: .init(maxHeaderFieldSize: limits.maxHeaderBytes, maxHeaderListSize: limits.maxHeaderBytes, maxHeaderFieldCount: 200)))
        return Application(
            router: router,
            server: try tls.map { try .tls(http1, tlsConfiguration: $0.serverConfiguration()) } ?? http1,
            configuration: .init(
                address: bind, serverName: "ubiq-server", availableConnectionsDelegate: MaximumAvailableConnections(limits.maxConnections)),
            onServerRunning: { channel in
                if case .tcp(let host, let port) = address {
                    await onListening(.tcp(host: host, port: channel.localAddress?.port ?? port))
                } else {
                    await onListening(address)
                }
            },
            logger: logger)
    }
}
