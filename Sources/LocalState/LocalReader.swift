import Foundation
import GRDB
import ItemModel

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
        try ItemCursor.all(try db.cachedStatement(sql: sql), arguments: arguments)
    }

    public func item(_ ino: Int64) throws -> LocalItem? {
        try items("SELECT * FROM items WHERE ino = ?", [ino]).first
    }

    public func item(id: ItemID) throws -> LocalItem? {
        try items("SELECT * FROM items WHERE item_id = ?", [id.rawValue]).first
    }

    /// Where a folder is in the index, and whether what comes into it is pinned: all an item
    /// arriving in it needs of it, without decoding its row.
    public func folderPlace(id: ItemID) throws -> (ino: Int64, pinned: Bool)? {
        try Row.fetchOne(try db.cachedStatement(sql: "SELECT ino, pinned FROM items WHERE item_id = ?"), arguments: [id.rawValue])
            .map { (ino: $0[0], pinned: $0[1]) }
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

    /// Local-only: below a `.nosync` name or the versions folder, or of a kind never synced.
    public func isExcluded(_ ino: Int64) throws -> Bool {
        try walkUp(from: ino) { $0.name.hasSuffix(".nosync") || $0.name == LocalItem.versionsFolderName || $0.isLocalKind } == .stopped
    }

    /// The versions folder's row (migration v12).
    public func versionsFolder() throws -> LocalItem? {
        try child(of: LocalItem.rootIno, named: LocalItem.versionsFolderName)
    }

    /// Every row: what a query looks through.
    public func allItems() throws -> [LocalItem] {
        try items("SELECT * FROM items", [])
    }

    /// Files with conflict versions on the server.
    public func itemsWithConflicts() throws -> [LocalItem] {
        try items("SELECT * FROM items WHERE conflicts IS NOT NULL")
    }

    enum WalkEnd { case top, stopped, missing }

    /// One step of a walk up: an item's folder and name, all a walk needs.
    struct Step {
        let parent: Int64?
        let name: String
        /// A FIFO or a socket (`ItemKind.isSynced`).
        let isLocalKind: Bool
    }

    /// Hands `visit` each item from `ino` up to the root (not included), until it returns
    /// true. The one walk up the tree, and so the one place its bound is kept. Each step reads
    /// three columns, not the row: paths are made for every item a sync brings, and decoding
    /// whole rows (attributes, conflict versions) made the walk most of a first sync's time.
    func walkUp(from ino: Int64, _ visit: (Step) throws -> Bool) throws -> WalkEnd {
        let statement = try db.cachedStatement(sql: "SELECT parent, name, kind IN ('fifo', 'socket') FROM items WHERE ino = ?")
        var cursor: Int64? = ino
        var steps = 0
        while let c = cursor, c != LocalItem.rootIno {
            guard let row = try Row.fetchOne(statement, arguments: [c]) else { return .missing }
            let step = Step(parent: row[0], name: row[1], isLocalKind: row[2])
            if try visit(step) { return .stopped }
            steps += 1
            if steps > TreeCycleError.deepest { throw TreeCycleError(ino: ino) }
            cursor = step.parent
        }
        return .top
    }

    /// From the folders' own index (v19): a folder's link count.
    public func subfolderCount(of ino: Int64) throws -> Int {
        try Int.fetchOne(try db.cachedStatement(sql: "SELECT COUNT(*) FROM items INDEXED BY items_folders WHERE parent = ? AND kind = 'folder'"), arguments: [ino]) ?? 0
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
                SELECT (SELECT COUNT(*) FROM outbox WHERE ino = ?1 AND op IN ('create', 'content') AND attempts > 0)
                     + (SELECT COUNT(*) FROM sent_creates WHERE ino = ?1)
                """),
            arguments: [ino]) ?? 0) > 0
    }

    public func hasTombstones() throws -> Bool {
        try Bool.fetchOne(try db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM tombstones)")) ?? false
    }

    public func hasQueuedDeletes() throws -> Bool {
        try Bool.fetchOne(try db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM outbox WHERE op = 'delete')")) ?? false
    }

    public func hasOrphans() throws -> Bool {
        try Bool.fetchOne(try db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM orphans)")) ?? false
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

    /// Whether an `op` of another item than `ino` is queued before entry `seq`.
    public func hasQueued(_ op: OutboxOp, before seq: Int64, otherThan ino: Int64) throws -> Bool {
        try Bool.fetchOne(try db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM outbox WHERE op = '\(op.rawValue)' AND seq < ? AND ino != ?)"),
                          arguments: [seq, ino]) ?? false
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
        try Int64.fetchOne(try db.cachedStatement(sql: "SELECT cached_bytes FROM totals")) ?? 0
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

    /// The digests sent in uploads to the server item `id` not yet answered (see
    /// `noteContentSent`), from whichever row sent them: a safe save's row also knows those of
    /// the row it replaced.
    public func sentContentDigests(of id: ItemID) throws -> Set<ContentDigest> {
        Set(try String.fetchAll(try db.cachedStatement(sql: "SELECT digest FROM sent_creates WHERE item_id = ?"), arguments: [id.rawValue])
            .compactMap { try? ContentDigest(hex: $0) })
    }

    /// The contents sent to the server item `id` by a row that left it before the answer
    /// (`LocalWriter.abandonSentContents`).
    public func abandonedContentDigests(of id: ItemID) throws -> Set<ContentDigest> {
        Set(try String.fetchAll(try db.cachedStatement(sql: "SELECT digest FROM abandoned_creates WHERE item_id = ?"), arguments: [id.rawValue])
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
        try Int.fetchOne(try db.cachedStatement(sql: "SELECT items FROM totals")) ?? 0
    }

    /// The server change held for `id` until its own change's answer (see migration v8).
    public func heldChange(of id: ItemID) throws -> (revision: Revision, json: Data)? {
        try Row.fetchOne(try db.cachedStatement(sql: "SELECT revision, json FROM held_changes WHERE item_id = ?"), arguments: [id.rawValue])
            .map { (Revision($0["revision"]), $0["json"]) }
    }

    /// The resolution of the file's conflicts chosen here and not yet on the server.
    public func resolution(of ino: Int64) throws -> ConflictResolution? {
        guard let json = try Data.fetchOne(try db.cachedStatement(sql: "SELECT json FROM resolutions WHERE ino = ?"), arguments: [ino]) else {
            return nil
        }
        do { return try JSONDecoder().decode(ConflictResolution.self, from: json) } catch {
            throw LocalStoreError.undecodable(table: "resolutions", key: ino, column: "json", value: String(decoding: json.prefix(80), as: UTF8.self))
        }
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
