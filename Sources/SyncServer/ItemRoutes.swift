import Foundation
import HTTPTypes
import Hummingbird
import ItemModel
import ServerStorage
import SyncAPI

extension SyncServer {
    /// `/v1/containers/{container}/items` and `…/batch`: items read, made (one or a batch),
    /// changed and deleted, with their content and xattrs.
    func addItemRoutes(to router: Router<ServerContext>) {
        router.get("/v1/containers/:container/items/:item") { _, context in
            let c = try await container(context)
            return try json(try await liveItem(try itemID(context), c))
        }
        router.get("/v1/containers/:container/items/:item/children") { _, context in
            let c = try await container(context)
            return try json(ItemList(items: try await storage.metadata.children(of: try itemID(context), in: c)))
        }
        router.post("/v1/containers/:container/batch") { request, context in try await createBatch(request, context) }
        router.post("/v1/containers/:container/items") { request, context in
            try await createItem(request, context)
        }
        router.patch("/v1/containers/:container/items/:item") { request, context in
            let c = try await container(context)
            let body = try await decode(UpdateItemRequest.self, request)
            let update = ItemUpdate(
                name: try body.name.map(validName), parentID: try body.parentID.map(wellFormed),
                mode: body.mode.map { $0 & 0o7777 }, modified: body.modified)
            let item = try await storage.metadata.updateItem(try itemID(context), base: body.baseRevision, update: update, in: c)
            hub.publish(container: c.key)
            return try json(item)
        }
        router.delete("/v1/containers/:container/items/:item") { request, context in
            let c = try await container(context)
            guard let base = request.uri.queryParameters["baseRevision"].map({ Revision(String($0)) }) else {
                throw APIError(.invalidRequest, "baseRevision is required to delete")
            }
            let recursive = request.uri.queryParameters["recursive"].map { $0 == "true" || $0 == "1" } ?? false
            let tombstones = try await storage.metadata.deleteItem(try itemID(context), base: base, recursive: recursive, in: c)
            hub.publish(container: c.key)
            return try json(DeleteResponse(deleted: tombstones))
        }
        router.put("/v1/containers/:container/items/:item/content") { request, context in
            let c = try await container(context)
            let body = try await decode(UpdateContentRequest.self, request)
            if let content = body.content { try await storeInline(content, declared: body.digest, context) }
            let item = try await storage.metadata.updateContent(
                try itemID(context), base: body.baseRevision, digest: body.digest, declaredSize: body.size,
                modified: body.modified, in: c)
            hub.publish(container: c.key)
            return try json(item)
        }
        router.get("/v1/containers/:container/items/:item/content") { request, context in
            let c = try await container(context)
            let item = try await liveItem(try itemID(context), c)
            guard item.kind == .file, let digest = item.digest else { throw APIError(.notAFile, "item '\(item.id)' is a folder") }
            var response = try await serveBlob(digest, request: request)
            response.headers[.ubiqRevision] = item.revision.rawValue
            return response
        }
        router.put("/v1/containers/:container/items/:item/xattrs") { request, context in
            let c = try await container(context)
            let body = try await decode(SetXattrsRequest.self, request)
            let item = try await storage.metadata.setXattrs(try itemID(context), base: body.baseRevision, xattrs: body.xattrs, in: c)
            hub.publish(container: c.key)
            return try json(item)
        }
    }

    func createItem(_ request: Request, _ context: ServerContext) async throws -> Response {
        // Read and check the request before the container is created on first use: a refused
        // request changes nothing, not even that.
        let body = try await decode(CreateItemRequest.self, request)
        let new = try newItem(body)
        if let content = body.content { try await storeInline(content, declared: new.digest!, context) }
        let c = try await container(context, create: new.parentID == .root)
        let item = try await storage.metadata.createItem(new, in: c)
        hub.publish(container: c.key)
        return try json(item, status: .created)
    }

    /// A create as the storage layer takes it, once the request is checked.
    func newItem(_ body: CreateItemRequest) throws -> NewItem {
        let name = try validName(body.name)
        let parentID = try wellFormed(body.parentID)
        if body.kind == .folder && (body.digest != nil || (body.size ?? 0) != 0) {
            throw APIError(.invalidRequest, "a folder has no content: omit digest and size")
        }
        if body.content != nil, body.kind != .file || body.digest == nil {
            throw APIError(.invalidRequest, "inline content needs a file and the digest it hashes to")
        }
        let now = WallClock.now()
        return NewItem(
            id: try body.id.map(wellFormed) ?? ItemID.random(), parentID: parentID,
            name: name, kind: body.kind, digest: body.digest, declaredSize: body.size,
            mode: (body.mode ?? ItemMetadata.defaultMode(for: body.kind)) & 0o7777,
            created: body.created ?? now, modified: body.modified ?? body.created ?? now, xattrs: body.xattrs ?? [:])
    }

    /// Several creates in one request and, for those that succeed, one commit. Each create is
    /// checked, its inline content stored, and applied exactly as `createItem` would; a refused
    /// one is answered in its own result and creates nothing (content it carried that hashed to
    /// its digest stays stored for the account, as after a separate upload).
    func createBatch(_ request: Request, _ context: ServerContext) async throws -> Response {
        _ = try context.requireAccount()
        let body = try await decode(BatchRequest.self, request, limit: configuration.maxBatchBytes)
        guard body.creates.count <= SyncProtocol.maxBatchItems else {
            throw APIError(.payloadTooLarge, "a batch holds at most \(SyncProtocol.maxBatchItems) creates; this one has \(body.creates.count)")
        }
        let contentBytes = body.creates.reduce(0) { $0 + ($1.content?.count ?? 0) }
        guard contentBytes <= SyncProtocol.maxBatchContent else {
            throw APIError(.payloadTooLarge, "a batch carries at most \(SyncProtocol.maxBatchContent) bytes of inline content; this one has \(contentBytes)")
        }
        var results = [BatchResponse.Result?](repeating: nil, count: body.creates.count)
        var checked: [(index: Int, item: NewItem)] = []
        for (index, create) in body.creates.enumerated() {
            do { checked.append((index, try newItem(create))) } catch {
                results[index] = .init(error: try APIError(mapping: error).detail)
            }
        }
        guard !checked.isEmpty else { return try json(BatchResponse(results: results.map { $0! })) }
        // Before anything is stored: content is never kept for a request that fails.
        let c = try await container(context, create: checked.contains { $0.item.parentID == .root })
        // The contents are checked here, in memory, and kept by the metadata store in the
        // transaction that creates the items: one commit and one sync for the whole batch.
        var contents: [ContentDigest: Data] = [:]
        for (index, _) in checked {
            guard let content = body.creates[index].content, let declared = body.creates[index].digest else { continue }
            guard content.count <= SyncProtocol.maxInlineContent else {
                results[index] = .init(error: APIError(.payloadTooLarge, "inline content is at most \(SyncProtocol.maxInlineContent) bytes; upload it as a blob").detail)
                continue
            }
            let actual = ContentDigest.of(content)
            guard actual == declared else {
                results[index] = .init(error: APIError(BlobStoreError.digestMismatch(declared: declared, actual: actual)).detail)
                continue
            }
            contents[declared] = content
        }
        checked.removeAll { results[$0.index] != nil }
        let created = try await storage.metadata.createItems(checked.map(\.item), contents: contents, in: c)
        for ((index, _), result) in zip(checked, created) {
            switch result {
            case .success(let item): results[index] = .init(item: item)
            case .failure(let error): results[index] = .init(error: APIError(error).detail)
            }
        }
        hub.publish(container: c.key)
        return try json(BatchResponse(results: results.map { $0! }))
    }

    func liveItem(_ id: ItemID, _ c: ContainerRef) async throws -> ItemMetadata {
        guard let item = try await storage.metadata.item(id, in: c) else { throw APIError(.itemNotFound, "no item '\(id)'") }
        return item
    }
}
