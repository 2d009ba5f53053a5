import Hummingbird
import ItemModel
import ServerStorage
import SyncAPI

extension SyncServer {
    /// `/v1/containers/{container}/changes`: the change log, by page and as a push stream.
    func addChangeRoutes(to router: Router<ServerContext>) {
        router.get("/v1/containers/:container/changes") { request, context in
            let c = try await container(context)
            let since = ChangeCursor(String(request.uri.queryParameters["since"] ?? "0"))
            let rawLimit = request.uri.queryParameters["limit"].map(String.init) ?? "1000"
            guard let limit = Int(rawLimit), (1...10_000).contains(limit) else {
                throw APIError(.invalidRequest, "limit must be a number of 1…10000, not '\(rawLimit)'")
            }
            let page = try await storage.changes.changes(in: c, since: since, limit: limit)
            return try json(ChangePage(changes: page.changes, cursor: page.cursor, hasMore: page.hasMore))
        }
        router.get("/v1/containers/:container/changes/stream") { request, context in
            let c = try await container(context)
            let since = ChangeCursor(String(request.uri.queryParameters["since"] ?? "0"))
            // Validate the cursor now, while an error can still be a status code.
            _ = try await storage.changes.changes(in: c, since: since, limit: 1)
            return PushStream(storage: storage, hub: hub, container: c, since: since, keepAlive: configuration.keepAliveInterval)
                .response()
        }
    }
}
