import Foundation
import ItemModel
import PostgresNIO
import ServerStorage

/// The change log, and the one place that writes an item's new state with its entry.
///
/// The cursor scheme. Each container row holds a counter, `change_seq`. Every write that
/// changes items first locks its container's row (`lockContainer`, `FOR NO KEY UPDATE`), and
/// each change takes the counter's next value (`UPDATE … RETURNING`) as its cursor and as the
/// item's revision. The lock is held until COMMIT, so the next writer of the container takes
/// its value only after this one committed (or rolled back, and then its values were never
/// seen): cursors increase in commit order within a container. A reader that has seen cursor N
/// so never later finds a committed entry at or below N.
///
/// Why not a sequence (`bigserial`): `nextval` is handed out when it is called, not when its
/// transaction commits. Writer A takes 7, writer B takes 8 and commits first; a reader then
/// reads up to 8, and A's 7 appears behind its cursor and is never sent. SQLite's store has no
/// such gap because SQLite has one writer at a time; here the lock makes the writers of one
/// container take turns, and writers of different containers still run side by side.
///
/// Cursors are per container: a cursor from another container is not detected unless it is
/// ahead of this container's counter (as with SQLite's server-wide sequence, a client must send
/// only the cursors it got for the container).
extension PostgresMetadataStore {
    /// Locks the container's row for this transaction: every item or key-value write of one
    /// container takes turns here, and reads its base revision under the lock. Throws
    /// `containerNotFound` when the container went with its account meanwhile.
    static func lockContainer(_ container: ContainerRef, _ tx: Transaction) async throws {
        let locked = try await tx.run("SELECT 1 FROM containers WHERE key = \(container.key) FOR NO KEY UPDATE")
        guard locked == 1 else { throw StorageError.containerNotFound(container.id) }
    }

    /// The container's next cursor, inside the transaction that holds its lock.
    static func nextCursor(_ container: ContainerRef, _ tx: Transaction) async throws -> Int64 {
        let rows = try await tx.rows("UPDATE containers SET change_seq = change_seq + 1 WHERE key = \(container.key) RETURNING change_seq")
        guard let row = rows.first else { throw StorageError.containerNotFound(container.id) }
        return try row.decode(Int64.self)
    }

    /// A clash with a live sibling's name, found by the unique index `items_live_name`.
    struct NameTaken: Error {}

    /// Gives the item its new revision and writes it together with its change-log entry,
    /// inside the caller's transaction (which holds the container's lock). `isNew`: the row is
    /// inserted, and a live sibling of the same name makes it throw `NameTaken` (the database's
    /// unique index decides; the insert is then not made).
    static func commit(_ item: inout ItemMetadata, kind: ItemChange.Kind, in container: ContainerRef, _ tx: Transaction, isNew: Bool = false) async throws {
        let seq = try await nextCursor(container, tx)
        item.revision = Revision(String(seq))
        let xattrs = try PostgresRows.json(item.xattrs)
        let conflicts = item.conflicts.isEmpty ? nil : try PostgresRows.json(item.conflicts)
        let mode = Int64(item.mode)
        let digest = item.digest?.hex
        if isNew {
            let inserted = try await tx.run("""
                INSERT INTO items (container_key, id, parent_id, name, kind, revision, size, digest, mode, created, modified, xattrs, conflicts, deleted, target)
                VALUES (\(container.key), \(item.id.rawValue), \(item.parentID?.rawValue), \(item.name), \(item.kind.rawValue), \(seq), \(item.size),
                        \(digest), \(mode), \(item.created), \(item.modified), \(xattrs)::jsonb, \(conflicts)::jsonb, \(item.deleted), \(item.target))
                ON CONFLICT (container_key, parent_id, name) WHERE NOT deleted DO NOTHING
                RETURNING 1
                """)
            guard inserted == 1 else { throw NameTaken() }
        } else {
            try await tx.run("""
                UPDATE items SET parent_id = \(item.parentID?.rawValue), name = \(item.name), kind = \(item.kind.rawValue), revision = \(seq),
                    size = \(item.size), digest = \(digest), mode = \(mode), created = \(item.created), modified = \(item.modified),
                    xattrs = \(xattrs)::jsonb, conflicts = \(conflicts)::jsonb, deleted = \(item.deleted), target = \(item.target)
                WHERE container_key = \(container.key) AND id = \(item.id.rawValue)
                """)
        }
        // Compaction: the item's entry moves to the end of the log.
        let json = try PostgresRows.jsonData(item)
        try await tx.run("""
            INSERT INTO changes (container_key, seq, item_id, kind, item_json) VALUES (\(container.key), \(seq), \(item.id.rawValue), \(kind.rawValue), \(json))
            ON CONFLICT (container_key, item_id) DO UPDATE SET seq = excluded.seq, kind = excluded.kind, item_json = excluded.item_json
            """)
    }

    // MARK: ChangeLog

    public func encodedChanges(in container: ContainerRef, since: ChangeCursor, limit: Int) async throws -> EncodedChangePage {
        guard let after = since.position else { throw StorageError.invalidCursor(since.rawValue) }
        let limit = max(1, limit)
        // One statement, one snapshot: the container's counter and the entries after the cursor.
        let rows = try await rows("""
            SELECT c.change_seq, e.seq, e.kind, e.item_json
            FROM containers c LEFT JOIN LATERAL (
                SELECT seq, kind, item_json FROM changes WHERE container_key = c.key AND seq > \(after) ORDER BY seq LIMIT \(limit + 1)
            ) e ON true
            WHERE c.key = \(container.key)
            ORDER BY e.seq
            """)
        guard let first = rows.first else { throw StorageError.containerNotFound(container.id) }
        // A cursor this container never handed out (another server's, or from the future after
        // a restore) would silently skip changes: refuse it so the client starts over.
        if after > (try first.makeRandomAccess()["change_seq"].decode(Int64.self)) { throw StorageError.invalidCursor(since.rawValue) }
        var entries: [EncodedChangePage.Entry] = []
        var hasMore = false
        for row in rows {
            let r = row.makeRandomAccess()
            guard let seq = try r["seq"].decode(Int64?.self) else { break }
            guard entries.count < limit else {
                hasMore = true
                break
            }
            let kindText = try r["kind"].decode(String.self)
            guard let kind = ItemChange.Kind(rawValue: kindText) else { throw UnknownStoredValue(column: "changes.kind", value: kindText) }
            entries.append(.init(cursor: ChangeCursor(String(seq)), kind: kind, item: try r["item_json"].decode(Data.self)))
        }
        return EncodedChangePage(entries: entries, cursor: entries.last?.cursor ?? since, hasMore: hasMore)
    }

    public func latestCursor(in container: ContainerRef) async throws -> ChangeCursor {
        let rows = try await rows("SELECT change_seq FROM containers WHERE key = \(container.key)")
        guard let row = rows.first else { throw StorageError.containerNotFound(container.id) }
        return ChangeCursor(String(try row.decode(Int64.self)))
    }

    public func entryCount() async throws -> Int {
        let rows = try await rows("SELECT COUNT(*) FROM changes")
        return Int(try rows.first?.decode(Int64.self) ?? 0)
    }
}
