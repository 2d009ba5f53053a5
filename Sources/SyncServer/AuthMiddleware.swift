import Hummingbird
import ServerStorage
import SyncAPI
import SyncService

/// Every `/v1/` route needs `Authorization: Bearer TOKEN`, except the login that trades a
/// password for a token. Applied to the whole router, so an unknown `/v1/` path without a token
/// is 401 too: nothing about the API shape leaks to an unauthenticated caller.
struct AuthMiddleware: RouterMiddleware {
    let service: SyncService
    /// Token hash to account (see `RecentAnswers` for why and for how long).
    let recent: RecentAnswers<String, AccountRef>

    func handle(_ request: Request, context: ServerContext, next: (Request, ServerContext) async throws -> Response) async throws -> Response {
        let path = request.uri.path
        guard path == "/v1" || path.hasPrefix("/v1/"), !(path == APIPath.token && request.method == .post) else {
            return try await next(request, context)
        }
        guard let hash = Self.tokenHash(request) else {
            throw APIError(.unauthorized, "a bearer token is required (POST \(APIPath.token))")
        }
        guard let account = try await recent.account(tokenHash: hash, service: service) else {
            throw APIError(.unauthorized, "the token is not valid (revoked, or never issued)")
        }
        var context = context
        context.account = account
        return try await next(request, context)
    }

    /// The hash of the request's bearer token, or nil when it has none.
    static func tokenHash(_ request: Request) -> String? {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else { return nil }
        let token = String(header.dropFirst("Bearer ".count)).trimmingCharacters(in: .whitespaces)
        return token.isEmpty ? nil : Credentials.hashToken(token)
    }
}

extension RecentAnswers where Key == String, Value == AccountRef {
    /// The account of the token with this hash, remembered or checked (`SyncService.authenticate`).
    func account(tokenHash hash: String, service: SyncService) async throws -> AccountRef? {
        try await value(for: hash) { try await service.authenticate(tokenHash: hash) }
    }
}
