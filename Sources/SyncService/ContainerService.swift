import Foundation
import ItemModel
import ServerStorage
import SyncAPI

/// The server's rules for one container the caller may use: its items read and changed, each
/// change checked against its base revision and announced on the hub after its commit, and its
/// change log.
public struct ContainerService: Sendable {
    public let service: SyncService
    public let ref: ContainerRef

    var storage: ServerStorage { service.storage }

    public func info() async throws -> ContainerInfo {
        ContainerInfo(id: ref.id, created: ref.created, cursor: try await storage.changes.latestCursor(in: ref))
    }

    // MARK: Items

    /// A live item; tombstones and unknown ids are `item_not_found`.
    public func item(_ id: ItemID) async throws -> ItemMetadata {
        let id = try RequestChecks.wellFormed(id)
        guard let item = try await storage.metadata.item(id, in: ref) else { throw APIError(.itemNotFound, "no item '\(id)'") }
        return item
    }

    public func children(of folder: ItemID) async throws -> [ItemMetadata] {
        try await storage.metadata.children(of: try RequestChecks.wellFormed(folder), in: ref)
    }

    /// Renames, moves, chmod, a new mtime.
    public func updateItem(_ id: ItemID, _ body: UpdateItemRequest) async throws -> ItemMetadata {
        let update = ItemUpdate(
            name: try body.name.map(RequestChecks.validName), parentID: try body.parentID.map(RequestChecks.wellFormed),
            mode: body.mode.map { $0 & 0o7777 }, modified: body.modified)
        let item = try await storage.metadata.updateItem(try RequestChecks.wellFormed(id), base: body.baseRevision, update: update, in: ref)
        service.hub.publish(container: ref.key)
        return item
    }

    /// New content for a file: content sent inline is stored first, as an upload of it would be.
    public func updateContent(_ id: ItemID, _ body: UpdateContentRequest) async throws -> ItemMetadata {
        if let content = body.content { try await service.storeInline(content, declared: body.digest, for: ref.account) }
        let item = try await storage.metadata.updateContent(
            try RequestChecks.wellFormed(id), base: body.baseRevision, digest: body.digest, declaredSize: body.size,
            modified: body.modified, savedBy: body.device, in: ref)
        service.hub.publish(container: ref.key)
        return item
    }

    /// Deletes an item (a folder with `recursive`, its whole subtree, children before their
    /// folder); returns the tombstones. A client must say which revision it deletes.
    public func deleteItem(_ id: ItemID, base: Revision?, recursive: Bool) async throws -> [ItemMetadata] {
        guard let base else { throw APIError(.invalidRequest, "baseRevision is required to delete") }
        let tombstones = try await storage.metadata.deleteItem(try RequestChecks.wellFormed(id), base: base, recursive: recursive, in: ref)
        service.hub.publish(container: ref.key)
        return tombstones
    }

    public func setXattrs(_ id: ItemID, _ body: SetXattrsRequest) async throws -> ItemMetadata {
        let item = try await storage.metadata.setXattrs(try RequestChecks.wellFormed(id), base: body.baseRevision, xattrs: body.xattrs, in: ref)
        service.hub.publish(container: ref.key)
        return item
    }

    /// Keeps an edit that lost to another device's as a conflict version of the file: content
    /// sent inline is stored first, as an upload of it would be.
    public func addConflictVersion(_ id: ItemID, _ body: AddConflictVersionRequest) async throws -> ItemMetadata {
        if let content = body.content { try await service.storeInline(content, declared: body.version.digest, for: ref.account) }
        let version = body.version
        _ = try RequestChecks.wellFormed(version.id)
        let item = try await storage.metadata.addConflictVersion(try RequestChecks.wellFormed(id), version, in: ref)
        service.hub.publish(container: ref.key)
        return item
    }

    public func resolveConflicts(_ id: ItemID, _ body: ResolveConflictsRequest) async throws -> ItemMetadata {
        let item = try await storage.metadata.resolveConflicts(
            try RequestChecks.wellFormed(id), base: body.baseRevision, settled: Set(try body.settled.map(RequestChecks.wellFormed)),
            keep: try body.keep.map(RequestChecks.wellFormed), copies: Set(try body.copies.map(RequestChecks.wellFormed)), in: ref)
        service.hub.publish(container: ref.key)
        return item
    }

    public func earlierVersions(of id: ItemID) async throws -> [EarlierVersion] {
        try await storage.metadata.earlierVersions(of: try RequestChecks.wellFormed(id), in: ref)
    }

    public func restore(_ id: ItemID, _ body: RestoreRequest) async throws -> ItemMetadata {
        let item = try await storage.metadata.restore(try RequestChecks.wellFormed(id), base: body.baseRevision, from: body.revision, in: ref)
        service.hub.publish(container: ref.key)
        return item
    }

    /// A live file and a reader of its content (the container grants the right to it).
    public func fileContent(_ id: ItemID) async throws -> (item: ItemMetadata, reader: any BlobReader) {
        let item = try await item(id)
        guard item.kind == .file, let digest = item.digest else { throw APIError(.notAFile, "item '\(item.id)' is a \(item.kind.rawValue), not a file") }
        return (item, try await service.openContent(digest))
    }

    // MARK: Change log

    public static let pageLimits = 1...10_000

    /// One page of the change log after `since`, as the JSON of a `ChangePage`.
    public func changes(since: ChangeCursor, limit: Int) async throws -> Data {
        guard Self.pageLimits.contains(limit) else {
            throw APIError(.invalidRequest, "limit must be a number of 1…10000, not '\(limit)'")
        }
        let page = try await storage.changes.encodedChanges(in: ref, since: since, limit: limit)
        return ChangePage.encoded(page.entries.map { ($0.cursor, $0.kind, $0.item) }, cursor: page.cursor, hasMore: page.hasMore)
    }

    /// The change log from `since` on, for a push stream; the cursor is checked now, while a
    /// refusal can still be an answer of its own.
    public func follow(since: ChangeCursor) async throws -> ChangeFollower {
        _ = try await storage.changes.changes(in: ref, since: since, limit: 1)
        return ChangeFollower(container: self, since: since)
    }
}

/// What a push stream sends: the changes after a cursor, then each new change once it commits,
/// and the version of the container's key-value store whenever it moved.
public struct ChangeFollower: Sendable {
    public let container: ContainerService
    public let since: ChangeCursor

    /// Changes read per page: one read per batch, bounded memory per stream.
    public static let batch = 500

    /// Subscribe before the first read: a commit between the read and the wait still wakes it.
    public func subscribe() -> ChangeHub.Subscription {
        container.service.hub.subscribe(container: container.ref.key)
    }

    /// The container's key-value version, for the stream's `kv` events.
    public func keyValueVersion() async throws -> Int64 {
        try await container.keyValueVersion()
    }

    /// Every change after `start`, page by page, handed to `send`; returns the cursor reached.
    public func send(after start: ChangeCursor, _ send: ([ItemChange]) async throws -> Void) async throws -> ChangeCursor {
        var cursor = start
        while true {
            let page = try await container.storage.changes.changes(in: container.ref, since: cursor, limit: Self.batch)
            if !page.changes.isEmpty { try await send(page.changes) }
            cursor = page.cursor
            if !page.hasMore { return cursor }
        }
    }
}
