import Foundation
import GRDB
import ItemModel

/// The mount's database: every item's metadata (so listings work offline and at once after a
/// restart), the outbox of changes for the server, the change-log cursor.
///
/// One `DatabasePool` (WAL): reads run concurrently with the single writer.
///
/// `synchronous = NORMAL`: a commit is in the WAL file when it returns, so it survives a crash
/// or `kill -9` of the daemon (the promise "your closed file will reach the server"); only a
/// power loss or kernel crash can take back the last commits, exactly as it can take back the
/// unsynced content of the cache files they describe. A commit per created or closed file
/// costs ~20 µs this way against 0.2–3 ms with an fsync each, which decided how fast `cp -r`
/// of small files runs. An application's `fsync(2)` asks for more: `makeDurable` gives it.
///
/// `wal_autocheckpoint = 10000` pages (40 MiB of WAL), not SQLite's 1000: the checkpoint runs
/// in the committing thread, which is a FUSE thread, and ends with two fsyncs. A `cp -r` of
/// small files made one every 14 files; now it is a tenth as many, and the rows every commit
/// touches (the folder, the index pages) are copied back once per checkpoint, not ten times.
public final class LocalStore: Sendable {
    let pool: any DatabaseWriter
    /// The database file; nil in memory.
    let path: String?

    public init(path: String) throws {
        self.path = path
        var config = Configuration()
        config.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            try db.execute(sql: "PRAGMA wal_autocheckpoint = 10000")
            // Once checkpointed and reset, the WAL file is cut back to 8 MiB, not left at its peak.
            try db.execute(sql: "PRAGMA journal_size_limit = 8388608")
        }
        config.busyMode = .timeout(5)
        pool = try DatabasePool(path: path, configuration: config)
        try Self.migrator.migrate(pool)
    }

    /// An in-memory database, for unit tests of the layers above.
    public init(inMemory: Void = ()) throws {
        path = nil
        pool = try DatabaseQueue()
        try Self.migrator.migrate(pool)
    }

    static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE items (
                    ino INTEGER PRIMARY KEY AUTOINCREMENT,
                    item_id TEXT NOT NULL UNIQUE,
                    parent INTEGER REFERENCES items(ino),
                    name TEXT NOT NULL,
                    kind TEXT NOT NULL CHECK (kind IN ('file', 'folder')),
                    size INTEGER NOT NULL CHECK (size >= 0),
                    mode INTEGER NOT NULL,
                    uid INTEGER NOT NULL,
                    gid INTEGER NOT NULL,
                    created INTEGER NOT NULL,
                    modified INTEGER NOT NULL,
                    changed INTEGER NOT NULL,
                    xattrs BLOB NOT NULL,
                    revision TEXT,
                    server_digest TEXT,
                    content TEXT NOT NULL CHECK (content IN ('placeholder', 'partial', 'current', 'stale', 'dirty')),
                    cached_bytes INTEGER NOT NULL DEFAULT 0,
                    pinned INTEGER NOT NULL DEFAULT 0,
                    last_access INTEGER NOT NULL DEFAULT 0,
                    download_error TEXT,
                    upload_error TEXT,
                    CHECK ((parent IS NULL) = (ino = 1))
                );
                CREATE UNIQUE INDEX items_by_name ON items(parent, name);
                CREATE TABLE outbox (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    ino INTEGER NOT NULL,
                    op TEXT NOT NULL,
                    item_id TEXT,
                    revision TEXT,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    last_error TEXT,
                    not_before INTEGER NOT NULL DEFAULT 0
                );
                CREATE INDEX outbox_by_ino ON outbox(ino);
                -- Remote items whose parent has not arrived yet (the change log may list a child
                -- before a parent that changed later).
                CREATE TABLE orphans (
                    item_id TEXT PRIMARY KEY NOT NULL,
                    parent_id TEXT NOT NULL,
                    json BLOB NOT NULL
                );
                CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
                """)
            let now = Int64(Date().timeIntervalSince1970 * 1e9)
            try db.execute(
                sql: """
                    INSERT INTO items (ino, item_id, parent, name, kind, size, mode, uid, gid, created, modified, changed, xattrs, content)
                    VALUES (1, 'root', NULL, '', 'folder', 0, 493, 0, 0, ?, ?, ?, x'7b7d', 'current')
                    """,
                arguments: [now, now, now])
        }
        m.registerMigration("v2: tombstones") { db in
            // Items this device deleted on the server, until the deletion's own echo arrives:
            // an older state of them still on its way must not bring them back.
            try db.execute(sql: "CREATE TABLE tombstones (item_id TEXT PRIMARY KEY NOT NULL, revision TEXT NOT NULL)")
        }
        m.registerMigration("v3: indexes for per-change questions") { db in
            // Asked after every close (pins to download) and for every incoming change (a
            // deletion on its way): without these, each was a scan of every item or every
            // queued change. Partial indexes: only the few rows that answer yes are in them.
            try db.execute(sql: """
                CREATE INDEX items_pinned_needing_content ON items(ino)
                    WHERE kind = 'file' AND pinned = 1 AND content IN ('placeholder', 'partial', 'stale');
                CREATE INDEX outbox_deletes_by_item ON outbox(item_id) WHERE op = 'delete';
                """)
        }
        m.registerMigration("v4: attribute names changed here") { db in
            // The names of the synced attributes changed on this device and not yet on the
            // server. A change refused because the item changed on the server meanwhile then
            // merges name by name: these from here, every other name from the server.
            try db.execute(sql: "CREATE TABLE xattr_changes (ino INTEGER NOT NULL, name TEXT NOT NULL, PRIMARY KEY (ino, name)) WITHOUT ROWID")
        }
        m.registerMigration("v5: contents sent in creates") { db in
            // The digests this device sent in creates of a file whose answer it has not
            // recorded. When such a create landed and its answer was lost (a crash, a dropped
            // connection) and the file changed here since, the retry is refused (the id is
            // taken): the server's item is ours if it holds one of these.
            try db.execute(sql: "CREATE TABLE sent_creates (ino INTEGER NOT NULL, digest TEXT NOT NULL, PRIMARY KEY (ino, digest)) WITHOUT ROWID")
        }
        m.registerMigration("v6: download requests") { db in
            // Files `ubiq download` (startDownloadingUbiquitousItem) asked for and that are not
            // here yet: the background downloads them a few at a time, also after a restart.
            try db.execute(sql: "CREATE TABLE download_requests (ino INTEGER PRIMARY KEY REFERENCES items(ino) ON DELETE CASCADE)")
        }
        m.registerMigration("v7: place of the first create sent") { db in
            // The folder and name the first create of an item went with, until an answer is
            // recorded. When a create landed, its answer was lost and another device then
            // moved the item, the retry is refused (the server's item no longer matches it):
            // a server place other than this one was chosen elsewhere. Only the first: a retry
            // sent after a rename here may be the one refused, and never landed.
            try db.execute(sql: "CREATE TABLE first_create_places (ino INTEGER PRIMARY KEY, parent_id TEXT NOT NULL, name TEXT NOT NULL)")
            // Items whose create may have gone before this table existed: their first place is
            // unknown, which an empty name (never a real one) stands for, so that a retry does
            // not take itself for the first create.
            try db.execute(sql: "INSERT INTO first_create_places (ino, parent_id, name) SELECT ino, '', '' FROM items WHERE revision IS NULL AND ino != 1")
        }
        m.registerMigration("v8: server changes held for an answer") { db in
            // The newest server change of an item that arrived while this device's own change
            // of it was unanswered. The feed leaves such an item to the answer, but an answer
            // made before another device's change does not hold it, and the feed has moved
            // past it: applied once the answer is recorded, if it is newer.
            try db.execute(sql: "CREATE TABLE held_changes (item_id TEXT PRIMARY KEY NOT NULL, revision TEXT NOT NULL, json BLOB NOT NULL)")
        }
        return m
    }

    /// Copies what the WAL file holds into the database file and empties the WAL file. For a
    /// clean stop: the daemon exits without closing the database, so SQLite's own checkpoint
    /// at close never ran, and the index lived in its WAL file (15 MB seen, up to the 40 MiB
    /// autocheckpoint), which the next start reads whole to rebuild the WAL's index. Waits
    /// for readers (a request still served) up to the busy timeout.
    public func checkpoint() throws {
        guard path != nil else { return }
        // Only the emptied WAL matters here, not the frame counts the checkpoint answers.
        _ = try pool.writeWithoutTransaction { try $0.checkpoint(.truncate) }
    }

    /// Makes every commit so far survive a power loss. Every commit is in the WAL file (or,
    /// after a checkpoint, in the database file): fsync both. A checkpoint would not do: it
    /// skips its sync when a reader keeps it from copying any frame.
    public func makeDurable() throws {
        guard let path else { return }
        for file in [path + "-wal", path] {
            let fd = open(file, O_RDONLY | O_CLOEXEC)
            if fd < 0 && errno == ENOENT { continue }
            guard fd >= 0 else { throw CocoaError(.fileReadUnknown) }
            defer { close(fd) }
            guard fsync(fd) == 0 else { throw CocoaError(.fileWriteUnknown) }
        }
    }

    public func read<T>(_ body: (LocalReader) throws -> T) throws -> T {
        try pool.read { db in try body(LocalReader(db: db)) }
    }

    public func write<T>(_ body: (LocalWriter) throws -> T) throws -> T {
        try Self.namingFullDisk { try pool.write { db in try body(LocalWriter(db: db)) } }
    }

    public func asyncRead<T: Sendable>(_ body: @escaping @Sendable (LocalReader) throws -> T) async throws -> T {
        try await pool.read { db in try body(LocalReader(db: db)) }
    }

    public func asyncWrite<T: Sendable>(_ body: @escaping @Sendable (LocalWriter) throws -> T) async throws -> T {
        do {
            return try await pool.write { db in try body(LocalWriter(db: db)) }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_FULL {
            throw LocalStoreError.diskFull
        }
    }

    /// A full volume as the one error callers tell apart from every other database failure.
    static func namingFullDisk<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as DatabaseError where error.resultCode == .SQLITE_FULL {
            throw LocalStoreError.diskFull
        }
    }
}

/// A walk up from an item did not reach the root: its folders loop. The engine never makes
/// one (it holds a change that would); thrown so that a loop it failed to prevent fails the
/// transaction instead of walking for ever inside it, holding the database.
public struct TreeCycleError: Error, CustomStringConvertible {
    public let ino: Int64
    /// A path of at most `PATH_MAX` (4096) bytes has fewer levels than this.
    static let deepest = 4096
    public var description: String { "the folders above item \(ino) form a loop" }
}

/// Read access inside one transaction.
public struct LocalReader {
    let db: Database

    /// Items from a `SELECT *` over `items`. A cached statement and a cursor: each row is decoded
    /// in place, never copied (listing a folder is one of these).
    func items(_ sql: String, _ arguments: StatementArguments = []) throws -> [LocalItem] {
        let statement = try db.cachedStatement(sql: sql)
        let rows = try Row.fetchCursor(statement, arguments: arguments)
        var out: [LocalItem] = []
        while let row = try rows.next() { out.append(try LocalItem(row: row)) }
        return out
    }

    public func item(_ ino: Int64) throws -> LocalItem? {
        try items("SELECT * FROM items WHERE ino = ?", [ino]).first
    }

    public func item(id: ItemID) throws -> LocalItem? {
        try items("SELECT * FROM items WHERE item_id = ?", [id.rawValue]).first
    }

    public func child(of parent: Int64, named name: String) throws -> LocalItem? {
        try items("SELECT * FROM items WHERE parent = ? AND name = ?", [parent, name]).first
    }

    /// One query per folder: listings never cost a round trip per entry.
    public func children(of parent: Int64) throws -> [LocalItem] {
        try items("SELECT * FROM items WHERE parent = ? ORDER BY name", [parent])
    }

    public func childCount(of parent: Int64) throws -> Int {
        try Int.fetchOne(try db.cachedStatement(sql: "SELECT COUNT(*) FROM items WHERE parent = ?"), arguments: [parent]) ?? 0
    }

    /// The item's path from the root, `/Documents/a.txt`.
    public func path(of ino: Int64) throws -> String? {
        var names: [String] = []
        guard try walkUp(from: ino, { names.append($0.name); return false }) != .missing else { return nil }
        return "/" + names.reversed().joined(separator: "/")
    }

    public func isExcluded(_ ino: Int64) throws -> Bool {
        try walkUp(from: ino) { $0.name.hasSuffix(".nosync") } == .stopped
    }

    enum WalkEnd { case top, stopped, missing }

    /// Hands `visit` each item from `ino` up to the root (not included), until it returns
    /// true. The one walk up the tree, and so the one place its bound is kept.
    func walkUp(from ino: Int64, _ visit: (LocalItem) throws -> Bool) throws -> WalkEnd {
        var cursor: Int64? = ino
        var steps = 0
        while let c = cursor, c != LocalItem.rootIno {
            guard let item = try item(c) else { return .missing }
            if try visit(item) { return .stopped }
            steps += 1
            if steps > TreeCycleError.deepest { throw TreeCycleError(ino: ino) }
            cursor = item.parent
        }
        return .top
    }

    public func descendants(of ino: Int64) throws -> [LocalItem] {
        try items("""
            WITH RECURSIVE sub(ino) AS (SELECT ino FROM items WHERE parent = ? UNION ALL
                SELECT i.ino FROM items i JOIN sub ON i.parent = sub.ino)
            SELECT items.* FROM items JOIN sub ON items.ino = sub.ino
            """, [ino])
    }

    public func pendingOps(for ino: Int64) throws -> Int {
        try Int.fetchOne(try db.cachedStatement(sql: "SELECT COUNT(*) FROM outbox WHERE ino = ?"), arguments: [ino]) ?? 0
    }

    /// The names of the synced attributes of `ino` changed here and not yet on the server.
    public func xattrChanges(of ino: Int64) throws -> Set<String> {
        Set(try String.fetchAll(try db.cachedStatement(sql: "SELECT name FROM xattr_changes WHERE ino = ?"), arguments: [ino]))
    }

    /// The kinds of change queued for the item `ino` (by the outbox's `ino` index, however long
    /// the queue is).
    public func queuedOps(for ino: Int64) throws -> Set<OutboxOp> {
        Set(try String.fetchAll(try db.cachedStatement(sql: "SELECT DISTINCT op FROM outbox WHERE ino = ?"), arguments: [ino])
            .compactMap(OutboxOp.init(rawValue:)))
    }

    public func outbox(limit: Int = 100) throws -> [OutboxEntry] {
        try Row.fetchAll(try db.cachedStatement(sql: "SELECT * FROM outbox ORDER BY seq LIMIT ?"), arguments: [limit]).map(OutboxEntry.init(row:))
    }

    /// True while a local deletion of the server item `id` waits in the outbox.
    public func hasPendingDelete(of id: ItemID) throws -> Bool { try queuedDelete(of: id) != nil }

    /// True while the request that creates the item `ino` on the server may be in flight: its
    /// create (a folder's, or a new file's first content) was started and is still queued.
    public func hasStartedCreate(_ ino: Int64) throws -> Bool {
        // A create sent and not answered also counts when its outbox entry is gone (a write
        // failure or a truncate dropped the queued upload): the server may hold the item.
        (try Int.fetchOne(
            try db.cachedStatement(sql: """
                SELECT (SELECT COUNT(*) FROM outbox WHERE ino = ?1 AND op IN ('createFolder', 'content') AND attempts > 0)
                     + (SELECT COUNT(*) FROM sent_creates WHERE ino = ?1)
                """),
            arguments: [ino]) ?? 0) > 0
    }

    public func tombstone(of id: ItemID) throws -> Revision? {
        try String.fetchOne(try db.cachedStatement(sql: "SELECT revision FROM tombstones WHERE item_id = ?"), arguments: [id.rawValue]).map(Revision.init(_:))
    }

    public func outboxCount() throws -> Int {
        try Int.fetchOne(try db.cachedStatement(sql: "SELECT COUNT(*) FROM outbox")) ?? 0
    }

    /// The oldest queued `op` of `ino`, of those due by `dueBy` when given (indexed: a queue of
    /// any length is not read through).
    public func queuedEntry(_ op: OutboxOp, of ino: Int64, dueBy: Timestamp = .max) throws -> OutboxEntry? {
        try Row.fetchOne(try db.cachedStatement(sql: "SELECT * FROM outbox WHERE ino = ? AND op = '\(op.rawValue)' AND not_before <= ? ORDER BY seq LIMIT 1"),
                         arguments: [ino, dueBy]).map(OutboxEntry.init(row:))
    }

    /// The queued deletion of the server item `id`, if any.
    public func queuedDelete(of id: ItemID) throws -> OutboxEntry? {
        try Row.fetchOne(try db.cachedStatement(sql: "SELECT * FROM outbox WHERE op = 'delete' AND item_id = ? ORDER BY seq LIMIT 1"), arguments: [id.rawValue])
            .map(OutboxEntry.init(row:))
    }

    public func outboxEntry(_ seq: Int64) throws -> OutboxEntry? {
        try Row.fetchOne(try db.cachedStatement(sql: "SELECT * FROM outbox WHERE seq = ?"), arguments: [seq]).map(OutboxEntry.init(row:))
    }

    public func cachedBytesTotal() throws -> Int64 {
        try Int64.fetchOne(try db.cachedStatement(sql: "SELECT COALESCE(SUM(cached_bytes), 0) FROM items")) ?? 0
    }

    /// Clean, unpinned files with content, least recently used first: what the cache limit may evict.
    public func evictionCandidates(limit: Int) throws -> [LocalItem] {
        try items("""
            SELECT * FROM items WHERE kind = 'file' AND pinned = 0 AND content IN ('current', 'stale')
            AND cached_bytes > 0 AND ino NOT IN (SELECT ino FROM outbox) ORDER BY last_access LIMIT ?
            """, [limit])
    }

    /// Files with local changes and nothing queued: written but not closed when the daemon died.
    public func dirtyWithoutOps() throws -> [LocalItem] {
        try items("SELECT * FROM items WHERE content = 'dirty' AND ino NOT IN (SELECT ino FROM outbox)")
    }

    /// Files with local changes and a queued upload: at startup, each is checked for writes
    /// after the close that queued it.
    public func dirtyWithUploads() throws -> [LocalItem] {
        try items("SELECT * FROM items WHERE content = 'dirty' AND ino IN (SELECT ino FROM outbox WHERE op = 'content')")
    }

    /// The digests sent in uploads of the file `ino` not yet answered (see `noteContentSent`).
    public func sentContentDigests(of ino: Int64) throws -> Set<ContentDigest> {
        Set(try String.fetchAll(try db.cachedStatement(sql: "SELECT digest FROM sent_creates WHERE ino = ?"), arguments: [ino])
            .compactMap { try? ContentDigest(hex: $0) })
    }

    /// The place (folder, name) the first create of `ino` not yet answered went with (`noteCreateSent`).
    public func firstCreatePlace(of ino: Int64) throws -> SentPlace? {
        guard let row = try Row.fetchOne(try db.cachedStatement(sql: "SELECT parent_id, name FROM first_create_places WHERE ino = ?"), arguments: [ino])
        else { return nil }
        return SentPlace(parentID: ItemID(row[0] as String), name: row[1])
    }

    /// `ContentState.needsDownload` in SQL. Written as the partial index of pinned files
    /// (migration v3) has it, so that the query of pinned files uses that index; no row holds
    /// 'partial', which the first schema allowed and no version wrote.
    static let needingContent = "content IN ('placeholder', 'partial', 'stale')"

    /// Files asked for with `requestDownload` that still need their content, in the order of
    /// the index (the oldest items first), at most `limit`.
    public func requestedNeedingContent(limit: Int) throws -> [LocalItem] {
        try items("""
            SELECT items.* FROM download_requests JOIN items ON items.ino = download_requests.ino
            WHERE kind = 'file' AND \(Self.needingContent)
            ORDER BY download_requests.ino LIMIT ?
            """, [limit])
    }

    /// True when `ino` is `folder` or anywhere below it.
    public func isWithin(_ ino: Int64, _ folder: Int64) throws -> Bool {
        try ino == folder || walkUp(from: ino) { $0.parent == folder } == .stopped
    }

    public func isDownloadRequested(_ ino: Int64) throws -> Bool {
        try Bool.fetchOne(try db.cachedStatement(sql: "SELECT 1 FROM download_requests WHERE ino = ?"), arguments: [ino]) ?? false
    }

    public func pinnedNeedingContent() throws -> [LocalItem] {
        try items("SELECT * FROM items WHERE kind = 'file' AND pinned = 1 AND \(Self.needingContent)")
    }

    public func itemCount() throws -> Int {
        try Int.fetchOne(try db.cachedStatement(sql: "SELECT COUNT(*) FROM items")) ?? 0
    }

    /// The server change held for `id` until its own change's answer (see migration v8).
    public func heldChange(of id: ItemID) throws -> (revision: Revision, json: Data)? {
        try Row.fetchOne(try db.cachedStatement(sql: "SELECT revision, json FROM held_changes WHERE item_id = ?"), arguments: [id.rawValue])
            .map { (Revision($0["revision"]), $0["json"]) }
    }

    public func itemsWithHeldChanges() throws -> [ItemID] {
        try String.fetchAll(try db.cachedStatement(sql: "SELECT item_id FROM held_changes")).map { ItemID($0) }
    }

    public func orphans(of parent: ItemID) throws -> [Data] {
        try Data.fetchAll(try db.cachedStatement(sql: "SELECT json FROM orphans WHERE parent_id = ?"), arguments: [parent.rawValue])
    }

    public func meta(_ key: String) throws -> String? {
        try String.fetchOne(try db.cachedStatement(sql: "SELECT value FROM meta WHERE key = ?"), arguments: [key])
    }
}

/// Write access inside one transaction: everything done through one writer commits together.
public struct LocalWriter {
    let db: Database
    public var reader: LocalReader { LocalReader(db: db) }

    @discardableResult
    public func insert(_ item: LocalItem) throws -> LocalItem {
        var item = item
        try db.cachedStatement(sql: """
            INSERT INTO items (item_id, parent, name, kind, size, mode, uid, gid, created, modified, changed, xattrs,
                revision, server_digest, content, cached_bytes, pinned, last_access, download_error, upload_error)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """).execute(arguments: item.columnValues)
        item.ino = db.lastInsertedRowID
        return item
    }

    /// Moves an item's last access forward (never back).
    public func noteAccess(_ ino: Int64, at time: Timestamp) throws {
        try db.cachedStatement(sql: "UPDATE items SET last_access = MAX(last_access, ?) WHERE ino = ?").execute(arguments: [time, ino])
    }

    public func update(_ item: LocalItem) throws {
        try db.cachedStatement(sql: """
            UPDATE items SET item_id = ?, parent = ?, name = ?, kind = ?, size = ?, mode = ?, uid = ?, gid = ?, created = ?,
                modified = ?, changed = ?, xattrs = ?, revision = ?, server_digest = ?, content = ?, cached_bytes = ?,
                pinned = ?, last_access = ?, download_error = ?, upload_error = ? WHERE ino = ?
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
    public func noteContentSent(_ ino: Int64, digest: ContentDigest) throws {
        try db.cachedStatement(sql: "INSERT OR IGNORE INTO sent_creates (ino, digest) VALUES (?, ?)").execute(arguments: [ino, digest.hex])
    }

    /// A create or upload of the item is answered: the contents and places sent before no
    /// longer matter.
    public func forgetSentContents(of ino: Int64) throws {
        try db.cachedStatement(sql: "DELETE FROM sent_creates WHERE ino = ?").execute(arguments: [ino])
        try db.cachedStatement(sql: "DELETE FROM first_create_places WHERE ino = ?").execute(arguments: [ino])
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

extension LocalItem {
    /// Decodes a row of `SELECT *` (or `items.*`) by position: columns in table order, which
    /// migrations only ever append to. Position, not name: GRDB's lookup by name lowercases
    /// every name and was most of the cost of listing a folder.
    init(row: Row) throws {
        let ino: Int64 = row[0]
        func undecodable(_ column: String, _ value: String) -> LocalStoreError {
            .undecodable(table: "items", key: ino, column: column, value: value)
        }
        let xattrBlob: Data = row[12]
        // Most items have no attributes: skip the decoder for the empty object.
        let xattrs: [String: Data]
        if xattrBlob.count <= 2 {
            xattrs = [:]
        } else {
            do { xattrs = try JSONDecoder().decode([String: Data].self, from: xattrBlob) } catch {
                throw undecodable("xattrs", String(decoding: xattrBlob.prefix(80), as: UTF8.self))
            }
        }
        let revision: String? = row[13]
        let digest: String? = row[14]
        let mode: Int64 = row[6], uid: Int64 = row[7], gid: Int64 = row[8]
        let kindText: String = row[4], contentText: String = row[15]
        guard let kind = ItemKind(rawValue: kindText) else { throw undecodable("kind", kindText) }
        guard let content = ContentState(rawValue: contentText) else { throw undecodable("content", contentText) }
        self.init(
            ino: ino, itemID: ItemID(row[1] as String), parent: row[2], name: row[3],
            kind: kind, size: row[5], mode: UInt32(truncatingIfNeeded: mode),
            uid: UInt32(truncatingIfNeeded: uid), gid: UInt32(truncatingIfNeeded: gid), created: row[9],
            modified: row[10], changed: row[11], xattrs: xattrs, revision: revision.map(Revision.init(_:)),
            serverDigest: try digest.map { try ContentDigest(hex: $0) }, content: content,
            cachedBytes: row[16], pinned: (row[17] as Int64) != 0, lastAccess: row[18],
            downloadError: row[19], uploadError: row[20])
    }

    var columnValues: StatementArguments {
        let xattrJSON = (try? JSONEncoder().encode(xattrs)) ?? Data("{}".utf8)
        return [
            itemID.rawValue, parent, name, kind.rawValue, size, Int64(mode), Int64(uid), Int64(gid), created, modified, changed,
            xattrJSON, revision?.rawValue, serverDigest?.hex, content.rawValue, cachedBytes, pinned ? 1 : 0, lastAccess,
            downloadError, uploadError,
        ]
    }
}

extension OutboxEntry {
    init(row: Row) throws {
        let itemID: String? = row["item_id"], revision: String? = row["revision"], opText: String = row["op"]
        guard let op = OutboxOp(rawValue: opText) else { throw LocalStoreError.undecodable(table: "outbox", key: row["seq"], column: "op", value: opText) }
        self.init(
            seq: row["seq"], ino: row["ino"], op: op,
            itemID: itemID.map(ItemID.init(_:)), revision: revision.map(Revision.init(_:)),
            attempts: row["attempts"], lastError: row["last_error"], notBefore: row["not_before"])
    }
}

/// Where a create put an item: its folder's server id and its name.
public struct SentPlace: Hashable, Sendable {
    public let parentID: ItemID
    public let name: String

    public init(parentID: ItemID, name: String) {
        self.parentID = parentID
        self.name = name
    }
}
