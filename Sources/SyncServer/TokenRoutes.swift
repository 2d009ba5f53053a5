import HTTPTypes
import Hummingbird
import ServerStorage
import SyncAPI
import SyncService

extension SyncServer {
    /// `POST /v1/auth/token`: a login token for a user and password (throttled per account and
    /// address, `LoginThrottle`); `DELETE /v1/auth/token`: the caller's token revoked (a
    /// logout); `GET /v1/whoami`: whose token it is.
    func addTokenRoutes(to router: Router<ServerContext>) {
        router.post(RouterPath(APIPath.token)) { request, context in
            let body = try await decode(TokenRequest.self, request)
            let address = context.remoteAddress?.ipAddress ?? "local"
            if let wait = logins.wait(account: body.user, address: address) {
                throw APIError(.rateLimited, "too many failed logins; try again in \(wait) s", retryAfter: wait)
            }
            do {
                return try json(try await service.issueToken(user: body.user, password: body.password, device: body.device), status: .created)
            } catch let error as APIError where error.code == .invalidCredentials {
                try? await Task.sleep(for: logins.failed(account: body.user, address: address))
                throw error
            }
        }
        router.delete(RouterPath(APIPath.token)) { request, context in
            _ = try context.requireAccount()
            guard let hash = AuthMiddleware.tokenHash(request) else { throw APIError(.unauthorized, "a bearer token is required") }
            try await service.revokeToken(hash: hash)
            tokens.forget(hash)
            return Response(status: .noContent)
        }
        router.get(RouterPath(APIPath.whoami)) { _, context in
            try json(try await service.whoami(try context.requireAccount()))
        }
    }
}
