import Foundation
import GRDB
import ItemModel

/// Write access inside one transaction: everything done through one writer commits together.
public struct LocalWriter {
    let db: Database
    let insertTotals: InsertTotals
    public var reader: LocalReader { LocalReader(db: db) }

    /// Runs `body`, counting the rows it inserts in memory and adding them to the totals once
    /// at its end, instead of a trigger's update per row (see `InsertTotals`): for a writer
    /// that inserts many, such as a first sync's page.
    public func countingInserts<T>(_ body: () throws -> T) throws -> T {
        guard insertTotals.start() else { return try body() }
        let result: T
        do { result = try body() } catch {
            // The caller may still commit what was inserted before the error.
            try? insertTotals.finish(db)
            throw error
        }
        try insertTotals.finish(db)
        return result
    }

    /// With the name's query columns (`plain_name`, `name_key`; see `NameKey`), so that no
    /// trigger rewrites the new row.
    @discardableResult
    public func insert(_ item: LocalItem) throws -> LocalItem {
        var item = item
        try db.cachedStatement(sql: Self.insertStatements[1]).execute(arguments: Self.insertArguments(item))
        item.ino = db.lastInsertedRowID
        insertTotals.count(item)
        return item
    }

    /// Inserts `items`, many rows a statement: SQLite's work per statement (starting it,
    /// opening a cursor on every index, running the triggers' programs) is shared. Their row
    /// numbers are not answered: for items nothing refers to by row yet.
    public func insert(_ items: [LocalItem]) throws {
        var start = 0
        while start < items.count {
            let rows = min(Self.rowsPerInsert, items.count - start)
            var arguments = StatementArguments()
            for item in items[start..<start + rows] { arguments += Self.insertArguments(item) }
            try db.cachedStatement(sql: Self.insertStatements[rows]).execute(arguments: arguments)
            for item in items[start..<start + rows] { insertTotals.count(item) }
            start += rows
        }
    }

    /// 50 rows of 24 values, far below SQLite's limit on bound values: a row cost about half
    /// as much as alone.
    static let rowsPerInsert = 50

    /// The insert statement of n rows at index n, made once.
    static let insertStatements = (0...rowsPerInsert).map(insertStatement(rows:))

    static func insertStatement(rows: Int) -> String {
        let row = "(" + Array(repeating: "?", count: 24).joined(separator: ", ") + ")"
        return """
            INSERT INTO items (item_id, parent, name, kind, size, mode, uid, gid, created, modified, changed, xattrs,
                revision, server_digest, content, cached_bytes, pinned, last_access, download_error, upload_error, conflicts,
                target, plain_name, name_key)
            VALUES \(Array(repeating: row, count: rows).joined(separator: ", "))
            """
    }

    /// The row's values, with the name's query columns.
    static func insertArguments(_ item: LocalItem) -> StatementArguments {
        let key = NameKey.of(item.name)
        return item.columnValues + [key != nil, key]
    }

    /// Moves an item's last access forward (never back).
    public func noteAccess(_ ino: Int64, at time: Timestamp) throws {
        try db.cachedStatement(sql: "UPDATE items SET last_access = MAX(last_access, ?) WHERE ino = ?").execute(arguments: [time, ino])
    }

    public func update(_ item: LocalItem) throws {
        try db.cachedStatement(sql: """
            UPDATE items SET item_id = ?, parent = ?, name = ?, kind = ?, size = ?, mode = ?, uid = ?, gid = ?, created = ?,
                modified = ?, changed = ?, xattrs = ?, revision = ?, server_digest = ?, content = ?, cached_bytes = ?,
                pinned = ?, last_access = ?, download_error = ?, upload_error = ?, conflicts = ?, target = ? WHERE ino = ?
            """).execute(arguments: item.columnValues + [item.ino])
    }

    /// A folder's times, after its entries changed. Only these two columns: a whole-row
    /// `update` rewrites the row's entries in both name indexes too (each a page in the WAL)
    /// and encodes its xattrs, on every create and remove in the folder.
    public func setFolderTimes(_ ino: Int64, modified: Timestamp, changed: Timestamp) throws {
        try db.cachedStatement(sql: "UPDATE items SET modified = ?, changed = ? WHERE ino = ?").execute(arguments: [modified, changed, ino])
    }

    /// The columns a close of a written file changes (size, times, content state, upload
    /// error), and only those: see `setFolderTimes`.
    public func updateContentState(_ item: LocalItem) throws {
        try db.cachedStatement(sql: """
            UPDATE items SET size = ?, modified = ?, changed = ?, content = ?, cached_bytes = ?, upload_error = ? WHERE ino = ?
            """).execute(arguments: [item.size, item.modified, item.changed, item.content.rawValue, item.cachedBytes, item.uploadError, item.ino])
    }

    public func delete(_ ino: Int64) throws {
        try db.cachedStatement(sql: "DELETE FROM items WHERE ino = ?").execute(arguments: [ino])
        try db.cachedStatement(sql: "DELETE FROM xattr_changes WHERE ino = ?").execute(arguments: [ino])
        try db.cachedStatement(sql: "DELETE FROM resolutions WHERE ino = ?").execute(arguments: [ino])
    }

    /// Records that the synced attribute `name` of `ino` was set or removed on this device.
    public func noteXattrChange(_ ino: Int64, name: String) throws {
        try db.cachedStatement(sql: "INSERT OR IGNORE INTO xattr_changes (ino, name) VALUES (?, ?)").execute(arguments: [ino, name])
    }

    /// Forgets changed attribute names that the server now holds as this device does.
    public func settleXattrChanges(_ ino: Int64, _ names: some Sequence<String>) throws {
        for name in names {
            try db.cachedStatement(sql: "DELETE FROM xattr_changes WHERE ino = ? AND name = ?").execute(arguments: [ino, name])
        }
    }

    /// Queues an op unless the same op for the same item is already waiting (ops use the
    /// item's state when they are sent, so one is enough).
    public func enqueue(_ op: OutboxOp, ino: Int64, itemID: ItemID? = nil, revision: Revision? = nil) throws {
        if op != .delete {
            // The op is written into the SQL, one cached statement per op, not bound: with
            // `op = ?`, SQLite weighs the partial index on deletions (WHERE op = 'delete')
            // against each bound value and compiles the statement again whenever the op differs
            // from the last one, which was 8 % of a FUSE thread's time in `mkdir`.
            let waiting = try Int.fetchOne(
                try db.cachedStatement(sql: "SELECT COUNT(*) FROM outbox WHERE ino = ? AND op = '\(op.rawValue)' AND attempts = 0"),
                arguments: [ino]) ?? 0
            if waiting > 0 { return }
        }
        try db.cachedStatement(sql: "INSERT INTO outbox (ino, op, item_id, revision) VALUES (?, ?, ?, ?)").execute(
            arguments: [ino, op.rawValue, itemID?.rawValue, revision?.rawValue])
    }

    public func dequeue(_ seq: Int64) throws {
        try db.cachedStatement(sql: "DELETE FROM outbox WHERE seq = ?").execute(arguments: [seq])
    }

    /// Drops what is queued about the item `ino`, except deletions: a deletion is always of a
    /// server item the row no longer stands for (the row itself is gone, or a safe save gave it
    /// another identity), and it must still go, whatever happens to the row later.
    public func dropOps(for ino: Int64) throws {
        try db.cachedStatement(sql: "DELETE FROM outbox WHERE ino = ? AND op != 'delete'").execute(arguments: [ino])
    }

    /// Asks for the content of the files `inos` (see `requestedNeedingContent`).
    public func requestDownload(_ inos: [Int64]) throws {
        // Only rows still there: a file deleted since the caller read it is skipped (a foreign
        // key failure would fail the whole request).
        let statement = try db.cachedStatement(sql: "INSERT OR IGNORE INTO download_requests (ino) SELECT ino FROM items WHERE ino = ?")
        for ino in inos { try statement.execute(arguments: [ino]) }
    }

    /// The request for `ino`'s content is done with: it arrived, was evicted, or cannot come.
    public func dropDownloadRequest(_ ino: Int64) throws {
        try db.cachedStatement(sql: "DELETE FROM download_requests WHERE ino = ?").execute(arguments: [ino])
    }

    /// Recorded before an upload (a create or a new version) of the file `ino` with content
    /// `digest` is sent: if it lands and its answer is lost (a crash), the server's content is
    /// then known to be this device's. (The table is named for creates, its first use.)
    /// `itemID`: the server item the upload goes to.
    public func noteContentSent(_ ino: Int64, itemID: ItemID, digest: ContentDigest) throws {
        try db.cachedStatement(sql: "INSERT OR IGNORE INTO sent_creates (ino, digest, item_id) VALUES (?, ?, ?)")
            .execute(arguments: [ino, digest.hex, itemID.rawValue])
    }

    /// A create or upload of the item is answered: the contents and places sent before no
    /// longer matter.
    public func forgetSentContents(of ino: Int64) throws {
        try db.cachedStatement(sql: "DELETE FROM sent_creates WHERE ino = ?").execute(arguments: [ino])
        try db.cachedStatement(sql: "DELETE FROM first_create_places WHERE ino = ?").execute(arguments: [ino])
    }

    /// The row `ino` leaves the server item `itemID` before its create was answered (deleted
    /// here, or a safe save gave the row another identity): what it sent there is kept by item
    /// until that item's deletion is settled, so that the deletion removes only content this
    /// device made, never another device's edit of it (see `abandonedContentDigests`).
    public func abandonSentContents(of ino: Int64, itemID: ItemID) throws {
        try db.cachedStatement(sql: """
            INSERT OR IGNORE INTO abandoned_creates (item_id, digest) SELECT item_id, digest FROM sent_creates WHERE ino = ? AND item_id = ?
            """).execute(arguments: [ino, itemID.rawValue])
        try db.cachedStatement(sql: "DELETE FROM sent_creates WHERE ino = ? AND item_id = ?").execute(arguments: [ino, itemID.rawValue])
    }

    /// The deletion of the abandoned server item `id` is settled (see `abandonSentContents`).
    public func forgetAbandonedContents(of id: ItemID) throws {
        try db.cachedStatement(sql: "DELETE FROM abandoned_creates WHERE item_id = ?").execute(arguments: [id.rawValue])
    }

    /// A safe save's row took over the server item of `replaced`, whose upload may be on its
    /// way: what that upload sent is the new row's to know (and to forget with its answer).
    public func passSentContents(from replaced: Int64, to successor: Int64) throws {
        try db.cachedStatement(sql: "UPDATE OR IGNORE sent_creates SET ino = ? WHERE ino = ?").execute(arguments: [successor, replaced])
        try db.cachedStatement(sql: "DELETE FROM sent_creates WHERE ino = ?").execute(arguments: [replaced])
        try db.cachedStatement(sql: "DELETE FROM first_create_places WHERE ino = ?").execute(arguments: [replaced])
    }

    /// Recorded before a create of `ino` is sent: the folder and name it goes with, unless an
    /// earlier create's are kept already (see `firstCreatePlace`). Forgotten with the sent
    /// contents, once an answer is recorded.
    public func noteCreateSent(_ ino: Int64, parentID: ItemID, name: String) throws {
        try db.cachedStatement(sql: "INSERT OR IGNORE INTO first_create_places (ino, parent_id, name) VALUES (?, ?, ?)")
            .execute(arguments: [ino, parentID.rawValue, name])
    }

    /// Drops the queued uploads of the file `ino`: a write into it failed, and the version an
    /// earlier close queued is no longer what the file holds.
    public func dropUploads(of ino: Int64) throws {
        try db.cachedStatement(sql: "DELETE FROM outbox WHERE ino = ? AND op = 'content'").execute(arguments: [ino])
    }

    /// Marks an op as being sent: from now on a new change of the same kind gets its own op
    /// instead of being folded into this one (which carries the state read before the change).
    public func markStarted(_ seq: Int64) throws {
        try db.cachedStatement(sql: "UPDATE outbox SET attempts = attempts + 1 WHERE seq = ?").execute(arguments: [seq])
    }

    public func deferOp(_ seq: Int64, error: String, until: Timestamp) throws {
        try db.cachedStatement(sql: "UPDATE outbox SET last_error = ?, not_before = ? WHERE seq = ?").execute(
            arguments: [error, until, seq])
    }

    /// A queued deletion of `id` must carry the revision our own in-flight change just made.
    public func updatePendingDelete(of id: ItemID, revision: Revision) throws {
        try db.cachedStatement(sql: "UPDATE outbox SET revision = ? WHERE op = 'delete' AND item_id = ?").execute(arguments: [revision.rawValue, id.rawValue])
    }

    public func holdChange(_ id: ItemID, revision: Revision, json: Data) throws {
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO held_changes (item_id, revision, json) VALUES (?, ?, ?)").execute(
            arguments: [id.rawValue, revision.rawValue, json])
    }

    /// Records (or with nil, forgets) the resolution of the file's conflicts chosen here.
    public func setResolution(_ ino: Int64, _ resolution: ConflictResolution?) throws {
        if let resolution {
            try db.cachedStatement(sql: "INSERT OR REPLACE INTO resolutions (ino, json) VALUES (?, ?)").execute(
                arguments: [ino, try JSONEncoder().encode(resolution)])
        } else {
            try db.cachedStatement(sql: "DELETE FROM resolutions WHERE ino = ?").execute(arguments: [ino])
        }
    }

    public func dropHeldChange(_ id: ItemID) throws {
        try db.cachedStatement(sql: "DELETE FROM held_changes WHERE item_id = ?").execute(arguments: [id.rawValue])
    }

    public func addOrphan(_ id: ItemID, parent: ItemID, json: Data) throws {
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO orphans (item_id, parent_id, json) VALUES (?, ?, ?)").execute(
            arguments: [id.rawValue, parent.rawValue, json])
    }

    public func removeOrphan(_ id: ItemID) throws {
        try db.cachedStatement(sql: "DELETE FROM orphans WHERE item_id = ?").execute(arguments: [id.rawValue])
    }

    public func addTombstone(_ id: ItemID, revision: Revision) throws {
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO tombstones (item_id, revision) VALUES (?, ?)").execute(arguments: [id.rawValue, revision.rawValue])
    }

    public func removeTombstone(_ id: ItemID) throws {
        try db.cachedStatement(sql: "DELETE FROM tombstones WHERE item_id = ?").execute(arguments: [id.rawValue])
    }

    public func setMeta(_ key: String, _ value: String) throws {
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)").execute(arguments: [key, value])
    }
}
