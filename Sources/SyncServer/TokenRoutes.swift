import HTTPTypes
import Hummingbird
import SyncAPI

extension SyncServer {
    /// `POST /v1/auth/token`: a login token for a user and password; `GET /v1/whoami`: whose
    /// token it is.
    func addTokenRoutes(to router: Router<ServerContext>) {
        router.post(RouterPath(APIPath.token)) { request, _ in
            let body = try await decode(TokenRequest.self, request)
            return try json(try await service.issueToken(user: body.user, password: body.password), status: .created)
        }
        router.get(RouterPath(APIPath.whoami)) { _, context in
            try json(try await service.whoami(try context.requireAccount()))
        }
    }
}
