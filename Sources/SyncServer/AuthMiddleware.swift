import Hummingbird
import ServerStorage
import SyncAPI
import SyncService

/// Every `/v1/` route needs `Authorization: Bearer TOKEN`, except the one that trades a password
/// for a token. Applied to the whole router, so an unknown `/v1/` path without a token is 401 too:
/// nothing about the API shape leaks to an unauthenticated caller.
struct AuthMiddleware: RouterMiddleware {
    let accounts: any AccountStore
    /// Token hash to account (see `RecentAnswers` for why and for how long).
    let recent: RecentAnswers<String, AccountRef>

    func handle(_ request: Request, context: ServerContext, next: (Request, ServerContext) async throws -> Response) async throws -> Response {
        let path = request.uri.path
        guard path == "/v1" || path.hasPrefix("/v1/"), path != APIPath.token else {
            return try await next(request, context)
        }
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else {
            throw APIError(.unauthorized, "a bearer token is required (POST \(APIPath.token))")
        }
        let token = String(header.dropFirst("Bearer ".count)).trimmingCharacters(in: .whitespaces)
        let hash = Credentials.hashToken(token)
        guard !token.isEmpty, let account = try await recent.value(for: hash, lookUp: { try await accounts.account(tokenHash: hash) }) else {
            throw APIError(.unauthorized, "the bearer token is not valid")
        }
        var context = context
        context.account = account
        return try await next(request, context)
    }
}
