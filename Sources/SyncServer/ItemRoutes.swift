import Foundation
import HTTPTypes
import Hummingbird
import ItemModel
import ServerStorage
import SyncAPI
import SyncService

extension SyncServer {
    /// `/v1/containers/{container}/items` and `…/batch`: items read, made (one or a batch),
    /// changed and deleted, with their content and xattrs.
    func addItemRoutes(to router: Router<ServerContext>) {
        router.get("/v1/containers/:container/items/:item") { _, context in
            let c = try await container(context)
            return try json(try await c.item(try itemID(context)))
        }
        router.get("/v1/containers/:container/items/:item/children") { _, context in
            let c = try await container(context)
            return try json(ItemList(items: try await c.children(of: try itemID(context))))
        }
        router.post("/v1/containers/:container/batch") { request, context in
            let account = try context.requireAccount()
            let body = try await decode(BatchRequest.self, request, limit: configuration.maxBatchBytes)
            let results = try await service.createItems(body.creates, in: try containerID(context), of: account)
            return try json(BatchResponse(results: results))
        }
        router.post("/v1/containers/:container/items") { request, context in
            let body = try await decode(CreateItemRequest.self, request)
            let item = try await service.createItem(body, in: try containerID(context), of: try context.requireAccount())
            return try json(item, status: .created)
        }
        router.patch("/v1/containers/:container/items/:item") { request, context in
            let c = try await container(context)
            let body = try await decode(UpdateItemRequest.self, request)
            return try json(try await c.updateItem(try itemID(context), body))
        }
        router.delete("/v1/containers/:container/items/:item") { request, context in
            let c = try await container(context)
            let base = request.uri.queryParameters["baseRevision"].map { Revision(String($0)) }
            let recursive = request.uri.queryParameters["recursive"].map { $0 == "true" || $0 == "1" } ?? false
            return try json(DeleteResponse(deleted: try await c.deleteItem(try itemID(context), base: base, recursive: recursive)))
        }
        router.put("/v1/containers/:container/items/:item/content") { request, context in
            let c = try await container(context)
            let body = try await decode(UpdateContentRequest.self, request)
            return try json(try await c.updateContent(try itemID(context), body))
        }
        router.get("/v1/containers/:container/items/:item/content") { request, context in
            let c = try await container(context)
            let (item, reader) = try await c.fileContent(try itemID(context))
            var response = serve(reader, digest: item.digest!, request: request)
            response.headers[.ubiqRevision] = item.revision.rawValue
            return response
        }
        router.put("/v1/containers/:container/items/:item/xattrs") { request, context in
            let c = try await container(context)
            let body = try await decode(SetXattrsRequest.self, request)
            return try json(try await c.setXattrs(try itemID(context), body))
        }
        router.post("/v1/containers/:container/items/:item/conflicts") { request, context in
            let c = try await container(context)
            let body = try await decode(AddConflictVersionRequest.self, request)
            return try json(try await c.addConflictVersion(try itemID(context), body))
        }
        router.get("/v1/containers/:container/items/:item/versions") { _, context in
            let c = try await container(context)
            return try json(EarlierVersionList(versions: try await c.earlierVersions(of: try itemID(context))))
        }
        router.post("/v1/containers/:container/items/:item/restore") { request, context in
            let c = try await container(context)
            let body = try await decode(RestoreRequest.self, request)
            return try json(try await c.restore(try itemID(context), body))
        }
        router.post("/v1/containers/:container/items/:item/resolve") { request, context in
            let c = try await container(context)
            let body = try await decode(ResolveConflictsRequest.self, request)
            return try json(try await c.resolveConflicts(try itemID(context), body))
        }
    }
}
