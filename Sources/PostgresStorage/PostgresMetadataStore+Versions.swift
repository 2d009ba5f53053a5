import Foundation
import ItemModel
import PostgresNIO
import ServerStorage

/// Conflict versions and earlier versions of files.
extension PostgresMetadataStore {
    public func addConflictVersion(_ id: ItemID, _ version: ConflictVersion, in container: ContainerRef) async throws -> ItemMetadata {
        guard ConflictVersion.isValidDevice(version.device) else { throw StorageError.invalidDevice(version.device) }
        return try await write { tx in
            try await Self.lockContainer(container, tx)
            var item = try await Self.requireLive(id, container, tx)
            guard item.kind == .file else { throw StorageError.notAFile(id) }
            if item.conflicts.contains(where: { $0.id == version.id }) { return item }
            var kept = version
            kept.size = try await Self.blobSize(version.digest, account: container.account, declared: version.size, tx)
            item.conflicts.append(kept)
            try await Self.commit(&item, kind: .upsert, in: container, tx)
            return item
        }
    }

    public func resolveConflicts(
        _ id: ItemID, base: Revision, settled: Set<ItemID>, keep: ItemID?, copies: Set<ItemID>, in container: ContainerRef
    ) async throws -> ItemMetadata {
        let replaced = now()
        return try await write { tx in
            try await Self.lockContainer(container, tx)
            var item = try await Self.requireLive(id, container, tx)
            guard item.kind == .file, let parentID = item.parentID else { throw StorageError.notAFile(id) }
            guard item.revision == base else { throw StorageError.revisionConflict(current: item) }
            let before = item
            // The names a copy may take are checked against the folder's live names, read once
            // (`conflictCopies` asks synchronously).
            let taken = Set(try await tx.rows("""
                SELECT name FROM items WHERE container_key = \(container.key) AND parent_id = \(parentID.rawValue) AND NOT deleted
                """).map { try $0.decode(String.self) })
            let made: [ConflictCopy]
            do {
                made = try item.conflictCopies(of: copies) { name in taken.contains(name) }
                try item.resolveConflicts(settled: settled.union(copies), keep: keep)
            } catch let error as UnknownConflictVersion {
                throw StorageError.versionNotFound(error.id)
            }
            try await Self.keepEarlier(before, replacedBy: item.digest, at: replaced, in: container, tx)
            for copy in made {
                _ = try await Self.insert(NewItem(
                    id: copy.id, parentID: parentID, name: try ItemName(copy.name), kind: .file, digest: copy.version.digest,
                    declaredSize: copy.version.size, mode: item.mode, created: copy.version.modified, modified: copy.version.modified,
                    xattrs: [:], savedBy: copy.version.device), in: container, tx)
            }
            try await Self.commit(&item, kind: .upsert, in: container, tx)
            if let keep, let kept = before.conflicts.first(where: { $0.id == keep }) {
                try await Self.setSavedBy(kept.device, of: id, in: container, tx)
            }
            return item
        }
    }

    /// Keeps the file's content as an earlier version before `digest` replaces it, inside the
    /// caller's transaction: nothing when the content stays.
    static func keepEarlier(_ item: ItemMetadata, replacedBy digest: ContentDigest?, at replaced: Timestamp, in container: ContainerRef, _ tx: Transaction) async throws {
        guard item.kind == .file, let old = item.digest, old != digest, let revision = item.revision.sequenceNumber else { return }
        // The device comes from the item's row, which still holds the replaced content's.
        try await tx.run("""
            INSERT INTO earlier_versions (container_key, item_id, revision, digest, size, modified, replaced, device)
            SELECT container_key, id, \(revision), \(old.hex), \(item.size), \(item.modified), \(replaced), saved_by
            FROM items WHERE container_key = \(container.key) AND id = \(item.id.rawValue)
            ON CONFLICT (container_key, item_id, revision) DO UPDATE SET
                digest = excluded.digest, size = excluded.size, modified = excluded.modified, replaced = excluded.replaced, device = excluded.device
            """)
    }

    public func earlierVersions(of id: ItemID, in container: ContainerRef) async throws -> [EarlierVersion] {
        // The item's liveness and its versions in one statement.
        let rows = try await rows("""
            SELECT e.revision, e.digest, e.size, e.modified, e.replaced, e.device
            FROM items i LEFT JOIN earlier_versions e ON e.container_key = i.container_key AND e.item_id = i.id
            WHERE i.container_key = \(container.key) AND i.id = \(id.rawValue) AND NOT i.deleted
            ORDER BY e.replaced DESC, e.revision DESC
            """)
        guard !rows.isEmpty else { throw StorageError.itemNotFound(id) }
        return try rows.compactMap { row in
            let (revision, digest, size, modified, replaced, device) = try row.decode((Int64?, String?, Int64?, Int64?, Int64?, String?).self)
            guard let revision, let digest, let size, let modified, let replaced else { return nil }
            return EarlierVersion(
                revision: Revision(String(revision)), digest: try ContentDigest(hex: digest), size: size, modified: modified, replaced: replaced, device: device)
        }
    }

    public func restore(_ id: ItemID, base: Revision, from revision: Revision, in container: ContainerRef) async throws -> ItemMetadata {
        let replaced = now()
        return try await write { tx in
            try await Self.lockContainer(container, tx)
            var item = try await Self.requireFile(id, at: base, container, tx)
            guard let number = revision.sequenceNumber, let row = try await tx.rows("""
                SELECT digest, size, modified, device FROM earlier_versions
                WHERE container_key = \(container.key) AND item_id = \(id.rawValue) AND revision = \(number)
                """).first
            else { throw StorageError.earlierVersionNotFound(revision) }
            let (digestText, size, modified, device) = try row.decode((String, Int64, Int64, String?).self)
            try await Self.replaceContent(
                of: &item, with: try ContentDigest(hex: digestText), size: size, modified: modified, savedBy: device, replacedAt: replaced,
                in: container, tx)
            return item
        }
    }

    public func forgetEarlierVersions(replacedBefore cutoff: Timestamp) async throws -> Int {
        try await write { tx in try await tx.run("DELETE FROM earlier_versions WHERE replaced < \(cutoff) RETURNING 1") }
    }
}
