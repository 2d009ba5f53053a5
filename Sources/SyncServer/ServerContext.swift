import Hummingbird
import NIOCore
import ServerStorage
import SyncService

/// The per-request context: who is calling, once `AuthMiddleware` has checked the token.
public struct ServerContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    public var account: AccountRef?
    /// Who is asking, for the limit on share fetches; nil on a Unix socket.
    public let remoteAddress: SocketAddress?

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.account = nil
        self.remoteAddress = source.channel.remoteAddress
    }

    /// Bodies are collected by the routes themselves, each with its own limit.
    public var maxUploadSize: Int { 1 << 20 }

    func requireAccount() throws -> AccountRef {
        guard let account else { throw APIError(.unauthorized, "a bearer token is required") }
        return account
    }
}
