import Hummingbird
import ItemModel
import ServerStorage
import SyncAPI
import SyncService

extension SyncServer {
    /// `/v1/containers/{container}/changes`: the change log, by page and as a push stream.
    func addChangeRoutes(to router: Router<ServerContext>) {
        router.get("/v1/containers/:container/changes") { request, context in
            let c = try await container(context)
            let since = ChangeCursor(String(request.uri.queryParameters["since"] ?? "0"))
            let rawLimit = request.uri.queryParameters["limit"].map(String.init) ?? "1000"
            guard let limit = Int(rawLimit) else {
                throw APIError(.invalidRequest, "limit must be a number of 1…10000, not '\(rawLimit)'")
            }
            return json(encoded: try await c.changes(since: since, limit: limit))
        }
        router.get("/v1/containers/:container/changes/stream") { request, context in
            let c = try await container(context)
            let since = ChangeCursor(String(request.uri.queryParameters["since"] ?? "0"))
            // Checked now, while an error can still be a status code.
            let feed = try await c.follow(since: since)
            let hash = AuthMiddleware.tokenHash(request) ?? ""
            // The token is checked again as the stream goes on: one revoked or expired meanwhile
            // ends it (within the auth cache's lifetime; a logout here at once).
            return PushStream(feed: feed, keepAlive: configuration.keepAliveInterval) { [service, tokens] in
                (try? await tokens.account(tokenHash: hash, service: service)) != nil
            }.response()
        }
    }
}
