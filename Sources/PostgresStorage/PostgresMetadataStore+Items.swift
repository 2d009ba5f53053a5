import Foundation
import ItemModel
import PostgresNIO
import ServerStorage

/// Containers and items: every mutation locks its container, checks its base revision and
/// commits the item with its change-log entry in one transaction.
extension PostgresMetadataStore {
    // MARK: Containers

    public func containers(of account: AccountRef) async throws -> [ContainerRef] {
        try await rows("SELECT key, name, created FROM containers WHERE account_key = \(account.key) ORDER BY name")
            .map { try Self.containerRef($0, account: account) }
    }

    public func container(_ id: ContainerID, of account: AccountRef, create: Bool) async throws -> ContainerRef? {
        if create { return try await ensureContainer(id, of: account).container }
        return try await rows(Self.containerQuery(id, of: account)).first.map { try Self.containerRef($0, account: account) }
    }

    public func ensureContainer(_ id: ContainerID, of account: AccountRef) async throws -> (container: ContainerRef, created: Bool) {
        if let found = try await rows(Self.containerQuery(id, of: account)).first { return (try Self.containerRef(found, account: account), false) }
        let created = now()
        return try await write { tx in
            // Of concurrent calls, one inserts; the others' inserts wait for its commit and do
            // nothing (the unique constraint decides), and they then read its container.
            let made = try await tx.rows("""
                INSERT INTO containers (account_key, name, created) VALUES (\(account.key), \(id.rawValue), \(created))
                ON CONFLICT ON CONSTRAINT containers_name_unique DO NOTHING
                RETURNING key
                """)
            guard let key = try made.first?.decode(Int64.self) else {
                guard let found = try await tx.rows(Self.containerQuery(id, of: account)).first else { throw StorageError.accountNotFound(account.name) }
                return (try Self.containerRef(found, account: account), false)
            }
            let ref = ContainerRef(key: key, account: account, id: id, created: created)
            var root = ItemMetadata(
                id: .root, parentID: nil, name: "", kind: .folder, revision: Revision("0"), size: 0, digest: nil,
                mode: ItemMetadata.defaultMode(for: .folder), created: created, modified: created)
            // The new row is this transaction's own: no other writer can reach it before the commit.
            try await Self.commit(&root, kind: .upsert, in: ref, tx, isNew: true)
            return (ref, true)
        }
    }

    static func containerQuery(_ id: ContainerID, of account: AccountRef) -> PostgresQuery {
        "SELECT key, name, created FROM containers WHERE account_key = \(account.key) AND name = \(id.rawValue)"
    }

    static func containerRef(_ row: PostgresRow, account: AccountRef) throws -> ContainerRef {
        let (key, name, created) = try row.decode((Int64, String, Int64).self)
        return ContainerRef(key: key, account: account, id: try ContainerID(name), created: created)
    }

    // MARK: Reading items

    public func item(_ id: ItemID, in container: ContainerRef) async throws -> ItemMetadata? {
        try await rows("SELECT \(unescaped: PostgresRows.itemColumns) FROM items WHERE container_key = \(container.key) AND id = \(id.rawValue) AND NOT deleted")
            .first.map(PostgresRows.item(from:))
    }

    public func children(of folder: ItemID, in container: ContainerRef) async throws -> [ItemMetadata] {
        // The folder and its children in one statement, so that they are of one snapshot.
        let rows = try await rows("""
            SELECT 0 AS place, \(unescaped: PostgresRows.itemColumns) FROM items
                WHERE container_key = \(container.key) AND id = \(folder.rawValue) AND NOT deleted
            UNION ALL
            SELECT 1 AS place, \(unescaped: PostgresRows.itemColumns) FROM items
                WHERE container_key = \(container.key) AND parent_id = \(folder.rawValue) AND NOT deleted
            ORDER BY place, name
            """)
        guard let first = rows.first, try first.get("place", as: Int32.self) == 0 else { throw StorageError.itemNotFound(folder) }
        guard try PostgresRows.item(from: first).kind == .folder else { throw StorageError.notAFolder(folder) }
        return try rows.dropFirst().map(PostgresRows.item(from:))
    }

    static func anyItem(_ id: ItemID, _ container: ContainerRef, _ tx: Transaction) async throws -> ItemMetadata? {
        try await tx.rows("SELECT \(unescaped: PostgresRows.itemColumns) FROM items WHERE container_key = \(container.key) AND id = \(id.rawValue)")
            .first.map(PostgresRows.item(from:))
    }

    static func liveItem(_ id: ItemID, _ container: ContainerRef, _ tx: Transaction) async throws -> ItemMetadata? {
        guard let item = try await anyItem(id, container, tx), !item.deleted else { return nil }
        return item
    }

    static func requireLive(_ id: ItemID, _ container: ContainerRef, _ tx: Transaction) async throws -> ItemMetadata {
        guard let item = try await liveItem(id, container, tx) else { throw StorageError.itemNotFound(id) }
        return item
    }

    static func liveChild(named name: String, of parent: ItemID, _ container: ContainerRef, _ tx: Transaction) async throws -> ItemMetadata? {
        try await tx.rows("""
            SELECT \(unescaped: PostgresRows.itemColumns) FROM items
            WHERE container_key = \(container.key) AND parent_id = \(parent.rawValue) AND name = \(name) AND NOT deleted
            """).first.map(PostgresRows.item(from:))
    }

    // MARK: Creating items

    public func createItem(_ new: NewItem, in container: ContainerRef) async throws -> ItemMetadata {
        try await write { tx in
            try await Self.lockContainer(container, tx)
            return try await Self.insert(new, in: container, tx)
        }
    }

    public func createItems(_ items: [NewItem], contents: [ContentDigest: Data], in container: ContainerRef) async throws -> [Result<ItemMetadata, StorageError>] {
        let granted = now()
        return try await write { tx in
            try await Self.lockContainer(container, tx)
            for (digest, bytes) in contents {
                try await tx.run("INSERT INTO inline_contents (digest, bytes) VALUES (\(digest.hex), \(bytes)) ON CONFLICT (digest) DO NOTHING")
                try await Self.grant(digest, size: Int64(bytes.count), to: container.account, at: granted, tx)
            }
            var results: [Result<ItemMetadata, StorageError>] = []
            for new in items {
                // A savepoint each: a refused create leaves no trace, the others still commit.
                do {
                    results.append(.success(try await tx.savepoint { try await Self.insert(new, in: container, tx) }))
                } catch let error as StorageError {
                    results.append(.failure(error))
                }
            }
            return results
        }
    }

    /// A new item's row and change-log entry, inside the caller's transaction, which holds the
    /// container's lock.
    static func insert(_ new: NewItem, in container: ContainerRef, _ tx: Transaction) async throws -> ItemMetadata {
        try validate(new.xattrs)
        try checkDevice(new.savedBy)
        let parent = try await requireLive(new.parentID, container, tx)
        guard parent.kind == .folder else { throw StorageError.notAFolder(new.parentID) }
        try checkKind(new)
        if let existing = try await anyItem(new.id, container, tx) {
            // A retried create (the answer to the first was lost) gets the same item back.
            if !existing.deleted, existing.parentID == new.parentID, existing.name == new.name.rawValue,
               existing.kind == new.kind, new.kind != .file || existing.digest == (new.digest ?? .empty), existing.target == new.target {
                return existing
            }
            throw StorageError.itemIDTaken(new.id)
        }
        var fileSize: Int64 = 0
        if let content = new.contentDigest { fileSize = try await blobSize(content, account: container.account, declared: new.declaredSize, tx) }
        var item = new.metadata(fileSize: fileSize)
        do {
            try await commit(&item, kind: .upsert, in: container, tx, isNew: true)
        } catch is NameTaken {
            guard let clash = try await liveChild(named: new.name.rawValue, of: new.parentID, container, tx) else { throw NameTaken() }
            throw StorageError.nameExists(existing: clash)
        } catch where uniqueViolation(of: error) == "items_pkey" {
            // Unreachable while writers take the container's lock (the id was looked up above);
            // the primary key is the database's word on it all the same.
            throw StorageError.itemIDTaken(new.id)
        }
        if let savedBy = new.savedBy { try await setSavedBy(savedBy, of: item.id, in: container, tx) }
        return item
    }

    /// Records the device that saved the file's current content, after the commit that made it current.
    static func setSavedBy(_ device: String?, of id: ItemID, in container: ContainerRef, _ tx: Transaction) async throws {
        try await tx.run("UPDATE items SET saved_by = \(device) WHERE container_key = \(container.key) AND id = \(id.rawValue)")
    }

    static func validate(_ xattrs: [String: Data]) throws(StorageError) {
        do { try SyncedXattr.validate(xattrs) } catch { throw .invalidXattr(error) }
    }

    /// Refuses the kinds the server does not keep, and a link without a valid target.
    static func checkKind(_ new: NewItem) throws(StorageError) {
        guard new.kind.isSynced else { throw .unsyncedKind(new.kind) }
        guard new.kind == .symlink else { return }
        do { try SymlinkTarget.validate(new.target ?? "") } catch { throw .invalidTarget(error) }
    }

    /// Refuses a device name out of bounds; nil (none named) passes.
    static func checkDevice(_ device: String?) throws(StorageError) {
        if let device, !ConflictVersion.isValidDevice(device) { throw .invalidDevice(device) }
    }

    // MARK: Changing items

    public func updateContent(
        _ id: ItemID, base: Revision, digest: ContentDigest, declaredSize: Int64?, modified: Timestamp?, savedBy: String?,
        in container: ContainerRef
    ) async throws -> ItemMetadata {
        let modified = modified ?? now()
        try Self.checkDevice(savedBy)
        let replaced = now()
        return try await write { tx in
            try await Self.lockContainer(container, tx)
            var item = try await Self.requireFile(id, at: base, container, tx)
            let size = try await Self.blobSize(digest, account: container.account, declared: declaredSize, tx)
            try await Self.replaceContent(
                of: &item, with: digest, size: size, modified: modified, savedBy: savedBy, replacedAt: replaced, in: container, tx)
            return item
        }
    }

    /// The live file `id`, at revision `base`: what an update of its content or a restore starts from.
    static func requireFile(_ id: ItemID, at base: Revision, _ container: ContainerRef, _ tx: Transaction) async throws -> ItemMetadata {
        let item = try await requireLive(id, container, tx)
        guard item.kind == .file else { throw StorageError.notAFile(id) }
        guard item.revision == base else { throw StorageError.revisionConflict(current: item) }
        return item
    }

    /// Makes `digest` the file's content, for an update and a restore alike: the content it
    /// replaces kept as an earlier version, the change committed, the saving device recorded.
    static func replaceContent(
        of item: inout ItemMetadata, with digest: ContentDigest, size: Int64, modified: Timestamp, savedBy: String?, replacedAt replaced: Timestamp,
        in container: ContainerRef, _ tx: Transaction
    ) async throws {
        try await keepEarlier(item, replacedBy: digest, at: replaced, in: container, tx)
        item.size = size
        item.digest = digest
        item.modified = modified
        try await commit(&item, kind: .upsert, in: container, tx)
        try await setSavedBy(savedBy, of: item.id, in: container, tx)
    }

    public func updateItem(_ id: ItemID, base: Revision, update: ItemUpdate, in container: ContainerRef) async throws -> ItemMetadata {
        do {
            return try await write { tx in
                try await Self.lockContainer(container, tx)
                var item = try await Self.requireLive(id, container, tx)
                guard id != .root else { throw StorageError.rootIsImmutable }
                guard item.revision == base else { throw StorageError.revisionConflict(current: item) }
                let newParent = update.parentID ?? item.parentID!
                let newName = update.name?.rawValue ?? item.name
                if newParent != item.parentID {
                    let parent = try await Self.requireLive(newParent, container, tx)
                    guard parent.kind == .folder else { throw StorageError.notAFolder(newParent) }
                    // The destination's folders up to the root: meeting the item means a move into itself.
                    let above = try await tx.rows("""
                        WITH RECURSIVE up(id, parent_id) AS (
                            SELECT id, parent_id FROM items WHERE container_key = \(container.key) AND id = \(newParent.rawValue)
                            UNION
                            SELECT i.id, i.parent_id FROM items i JOIN up ON i.container_key = \(container.key) AND i.id = up.parent_id
                        )
                        SELECT 1 FROM up WHERE id = \(id.rawValue)
                        """)
                    if !above.isEmpty { throw StorageError.invalidMove(id) }
                }
                if newParent != item.parentID || newName != item.name,
                   let clash = try await Self.liveChild(named: newName, of: newParent, container, tx), clash.id != id {
                    throw StorageError.nameExists(existing: clash)
                }
                item.parentID = newParent
                item.name = newName
                if let mode = update.mode { item.mode = mode }
                if let modified = update.modified { item.modified = modified }
                try await Self.commit(&item, kind: .upsert, in: container, tx)
                return item
            }
        } catch where Self.uniqueViolation(of: error) == "items_live_name" {
            // The name was checked under the container's lock; should a writer that skipped the
            // lock have taken it meanwhile, the unique index refuses, and this is the clash.
            let newParent = update.parentID.map(\.rawValue)
            guard let newName = update.name?.rawValue, let clash = try await rows("""
                SELECT \(unescaped: PostgresRows.itemColumns) FROM items
                WHERE container_key = \(container.key) AND NOT deleted AND name = \(newName)
                  AND parent_id = COALESCE(\(newParent), (SELECT parent_id FROM items WHERE container_key = \(container.key) AND id = \(id.rawValue)))
                """).first.map(PostgresRows.item(from:))
            else { throw error }
            throw StorageError.nameExists(existing: clash)
        }
    }

    public func deleteItem(_ id: ItemID, base: Revision?, recursive: Bool, in container: ContainerRef) async throws -> [ItemMetadata] {
        try await write { tx in
            try await Self.lockContainer(container, tx)
            let item = try await Self.requireLive(id, container, tx)
            guard id != .root else { throw StorageError.rootIsImmutable }
            if let base, item.revision != base { throw StorageError.revisionConflict(current: item) }
            // The live subtree in one statement, then the order of its tombstones in memory.
            let below = try await tx.rows("""
                WITH RECURSIVE down(id) AS (
                    SELECT id FROM items WHERE container_key = \(container.key) AND parent_id = \(id.rawValue) AND NOT deleted
                    UNION
                    SELECT i.id FROM items i JOIN down ON i.container_key = \(container.key) AND i.parent_id = down.id AND NOT i.deleted
                )
                SELECT \(unescaped: PostgresRows.itemColumns) FROM items
                WHERE container_key = \(container.key) AND id IN (SELECT id FROM down) ORDER BY name
                """).map(PostgresRows.item(from:))
            let kids = Dictionary(grouping: below) { $0.parentID! }
            let doomed = try ItemMetadata.deletionOrder(of: item) { folder in
                let children = kids[folder.id] ?? []
                if !children.isEmpty && !recursive { throw StorageError.folderNotEmpty(folder.id) }
                return children
            }
            var tombstones: [ItemMetadata] = []
            for item in doomed {
                var victim = item.tombstone
                try await Self.commit(&victim, kind: .delete, in: container, tx)
                tombstones.append(victim)
            }
            return tombstones
        }
    }

    public func setXattrs(_ id: ItemID, base: Revision?, xattrs: [String: Data], in container: ContainerRef) async throws -> ItemMetadata {
        try Self.validate(xattrs)
        return try await write { tx in
            try await Self.lockContainer(container, tx)
            var item = try await Self.requireLive(id, container, tx)
            if let base, item.revision != base { throw StorageError.revisionConflict(current: item) }
            item.xattrs = xattrs
            try await Self.commit(&item, kind: .upsert, in: container, tx)
            return item
        }
    }
}
