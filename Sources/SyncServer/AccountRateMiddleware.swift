import Hummingbird
import SyncService

/// Requests per account (`--account-rate`), counted once `AuthMiddleware` knows the account:
/// past the limit 429 `rate_limited` with `Retry-After`.
struct AccountRateMiddleware: RouterMiddleware {
    let limit: RateLimit

    func handle(_ request: Request, context: ServerContext, next: (Request, ServerContext) async throws -> Response) async throws -> Response {
        if let account = context.account, let wait = limit.take(for: String(account.key)) {
            throw APIError(.rateLimited, "too many requests for this account; try again in \(wait) s", retryAfter: wait)
        }
        return try await next(request, context)
    }
}
