import Foundation
import GRDB
import ItemModel

/// What the metadata index reads. It compiles a query to an SQL condition over `items AS i`;
/// the rest are the per-item facts that status keys need, each read once per query rather
/// than once per row.
extension LocalReader {
    /// Items below a folder whose name ends in `.nosync`, or below the versions folder, and
    /// those folders themselves: as `isExcluded` finds walking up, for every row at once.
    public static let excludedTable = """
        excluded(ino) AS (
            SELECT ino FROM items WHERE name GLOB '*.nosync' OR name = '\(LocalItem.versionsFolderName)'
            UNION SELECT c.ino FROM items c JOIN excluded e ON c.parent = e.ino)
        """

    /// Makes `functions` callable from SQL on this connection: a compiled query calls back into
    /// Swift for what SQL cannot say (Unicode folding, content types, transfers in memory).
    public func register(_ functions: [DatabaseFunction]) {
        for function in functions { db.add(function: function) }
    }

    /// The rows (the root aside) for which `condition`, an SQL condition over `items AS i`,
    /// holds. `withExcluded` puts the `excluded` table in reach of the condition. Not a cached
    /// statement: every query text would stay in the cache for the connection's life.
    public func items(where condition: String, arguments: StatementArguments, withExcluded: Bool) throws -> [LocalItem] {
        let statement = try db.makeStatement(sql: Self.statement(where: condition, withExcluded: withExcluded))
        let rows = try Row.fetchCursor(statement, arguments: arguments)
        var out: [LocalItem] = []
        while let row = try rows.next() { out.append(try LocalItem(row: row)) }
        return out
    }

    public static func statement(where condition: String, withExcluded: Bool) -> String {
        let with = withExcluded ? "WITH RECURSIVE \(excludedTable)\n" : ""
        return "\(with)SELECT i.* FROM items AS i WHERE i.ino != \(LocalItem.rootIno) AND (\(condition))"
    }

    /// Every folder's parent and name: enough to give any row its path.
    public func folderNames() throws -> [Int64: (parent: Int64?, name: String)] {
        var out: [Int64: (parent: Int64?, name: String)] = [:]
        let rows = try Row.fetchCursor(try db.cachedStatement(sql: "SELECT ino, parent, name FROM items WHERE kind = 'folder'"))
        while let row = try rows.next() { out[row[0]] = (row[1], row[2]) }
        return out
    }

    public func excludedItems() throws -> Set<Int64> {
        Set(try Int64.fetchAll(try db.cachedStatement(sql: "WITH RECURSIVE \(Self.excludedTable) SELECT ino FROM excluded")))
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
