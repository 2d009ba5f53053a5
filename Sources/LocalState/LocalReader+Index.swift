import Foundation
import GRDB
import ItemModel

/// What the metadata index reads. It compiles a query to an SQL condition over `items AS i`;
/// the rest are the per-item facts that status keys need, each read once per query rather
/// than once per row.
extension LocalReader {
    /// Items below a folder whose name ends in `.nosync`, or below the versions folder, those
    /// folders themselves, and the FIFOs and sockets: as `isExcluded` finds walking up, for
    /// every row at once.
    /// (The versions folder can only be at the top: no other name holds a slash.) Each start
    /// is its own term, so that the `.nosync` names come from their partial index (v14), named:
    /// left to choose, SQLite read every name instead.
    public static let excludedTable = """
        excluded(ino) AS (
            SELECT ino FROM items INDEXED BY items_nosync WHERE name GLOB '*.nosync'
            UNION SELECT ino FROM items WHERE parent = \(LocalItem.rootIno) AND name = '\(LocalItem.versionsFolderName)'
            UNION SELECT ino FROM items INDEXED BY items_local_only WHERE kind IN ('fifo', 'socket')
            UNION SELECT c.ino FROM items c JOIN excluded e ON c.parent = e.ino)
        """

    /// The versions folder and what it holds (files only: nothing else can be made there),
    /// as a condition on `items AS i`: never a query's result, they have no path in the
    /// container. The subquery runs once per statement.
    public static let outsideVersions = """
        i.ino IS NOT (SELECT ino FROM items WHERE parent = \(LocalItem.rootIno) AND name = '\(LocalItem.versionsFolderName)') \
        AND i.parent IS NOT (SELECT ino FROM items WHERE parent = \(LocalItem.rootIno) AND name = '\(LocalItem.versionsFolderName)')
        """

    /// What is below the `Documents` folder at the top (iCloud's documents scope).
    public static let documentsTable = """
        documents(ino) AS (
            SELECT c.ino FROM items c JOIN items d ON c.parent = d.ino WHERE d.parent = \(LocalItem.rootIno) AND d.name = 'Documents'
            UNION SELECT c.ino FROM items c JOIN documents s ON c.parent = s.ino)
        """

    /// Makes `functions` callable from SQL on this connection: a compiled query calls back into
    /// Swift for what SQL cannot say (Unicode folding, content types, transfers in memory).
    public func register(_ functions: [DatabaseFunction]) {
        for function in functions { db.add(function: function) }
    }

    /// The rows a `SELECT i.* FROM items AS i …` statement selects. Not a cached statement:
    /// every query text would stay in the cache for the connection's life.
    public func items(selectedBy sql: String, arguments: StatementArguments) throws -> [LocalItem] {
        try ItemCursor.all(try db.makeStatement(sql: sql), arguments: arguments)
    }

    /// The number a `SELECT COUNT(*) …` statement answers.
    public func count(selectedBy sql: String, arguments: StatementArguments) throws -> Int {
        try Int.fetchOne(try db.makeStatement(sql: sql), arguments: arguments) ?? 0
    }

    /// How many items have one of `statuses` as their `downloadingStatus` (never the root, nor
    /// the versions folder and what it holds): the counts kept per kind and content state
    /// (`status_totals`), less the root and the excluded items among them, plus the excluded
    /// items when `excluded` is asked for. Reads the few excluded rows, not every entry.
    public func count(downloadingStatuses statuses: Set<String>) throws -> Int {
        let pairs = ItemKind.allCases.flatMap { kind in
            ContentState.allCases.filter { statuses.contains(ItemStatus.downloadingStatus(kind: kind, content: $0, excluded: false)) }
                .map { "('\(kind.rawValue)', '\($0.rawValue)')" }
        }
        let states = pairs.isEmpty ? "0" : "(kind, content) IN (VALUES \(pairs.joined(separator: ", ")))"
        var sql = """
            WITH RECURSIVE \(Self.excludedTable)
            SELECT (SELECT COALESCE(SUM(items), 0) FROM status_totals WHERE \(states))
                - (SELECT COUNT(*) FROM items WHERE (ino = \(LocalItem.rootIno) OR ino IN (SELECT ino FROM excluded)) AND \(states))
            """
        if statuses.contains("excluded") {
            sql += "\n    + (SELECT COUNT(*) FROM items AS i WHERE i.ino IN (SELECT ino FROM excluded) AND \(Self.outsideVersions))"
        }
        return try Int.fetchOne(try db.makeStatement(sql: sql)) ?? 0
    }

    /// Every folder's parent and name: enough to give any row its path.
    public func folderNames() throws -> [Int64: (parent: Int64?, name: String)] {
        var out: [Int64: (parent: Int64?, name: String)] = [:]
        let rows = try Row.fetchCursor(try db.cachedStatement(sql: "SELECT ino, parent, name FROM items WHERE kind = 'folder'"))
        while let row = try rows.next() { out[row[0]] = (row[1], row[2]) }
        return out
    }

    /// How many changes of each item wait in the outbox (usually few rows).
    public func pendingCounts() throws -> [Int64: Int] {
        var out: [Int64: Int] = [:]
        let rows = try Row.fetchCursor(try db.cachedStatement(sql: "SELECT ino, COUNT(*) FROM outbox GROUP BY ino"))
        while let row = try rows.next() { out[row[0]] = row[1] }
        return out
    }

    /// The conflict versions each resolution chosen here and not yet sent drops.
    public func settledHere() throws -> [Int64: Set<ItemID>] {
        var out: [Int64: Set<ItemID>] = [:]
        let rows = try Row.fetchCursor(try db.cachedStatement(sql: "SELECT ino FROM resolutions"))
        while let row = try rows.next() {
            let ino: Int64 = row[0]
            out[ino] = try resolution(of: ino)?.settled
        }
        return out
    }
}
