import HTTPTypes
import Hummingbird
import ItemModel
import ServerStorage
import SyncAPI

extension SyncServer {
    /// `POST /v1/token`: a login token for a user and password.
    func addTokenRoutes(to router: Router<ServerContext>) {
        router.post(RouterPath(APIPath.token)) { request, context in try await issueToken(request, context) }
    }

    func issueToken(_ request: Request, _ context: ServerContext) async throws -> Response {
        let body = try await decode(TokenRequest.self, request)
        // The same answer for an unknown user and a wrong password: no account enumeration.
        let found = try await storage.accounts.passwordHash(account: body.user)
        // An unknown user costs the same scrypt as a wrong password: timing tells nothing either.
        let verified = Credentials.verifyPassword(body.password, against: found?.1 ?? Credentials.decoyHash)
        guard let (account, _) = found, verified else { throw APIError(.invalidCredentials, "unknown user or wrong password") }
        let token = Credentials.newToken()
        try await storage.accounts.addToken(hash: Credentials.hashToken(token), for: account, created: WallClock.now())
        return try json(TokenResponse(token: token, account: account.name), status: .created)
    }
}
