import GRDB

/// The rows of a `SELECT *` (or `items.*`) over `items`, decoded by position straight from the
/// statement. GRDB's `Row.fetchCursor` first builds a dictionary of the statement's lowercased
/// column names, for lookups by name that this decoding never makes: twenty-five strings and a
/// dictionary for every query, a hit or a miss, which was a large part of each lookup of one
/// item (a first sync makes several per item it adds).
final class ItemCursor: DatabaseCursor {
    typealias Element = LocalItem
    let _statement: Statement
    var _isDone = false

    init(_ statement: Statement, arguments: StatementArguments) throws {
        _statement = statement
        // Resets the statement and binds the arguments, as GRDB's own cursors start.
        try statement.setArguments(arguments)
    }

    func _element(sqliteStatement: SQLiteStatement) throws -> LocalItem {
        try LocalItem(columns: StatementColumns(statement: sqliteStatement))
    }

    /// Every row: a query read to its end leaves its statement done, holding nothing.
    static func all(_ statement: Statement, arguments: StatementArguments) throws -> [LocalItem] {
        let cursor = try ItemCursor(statement, arguments: arguments)
        var out: [LocalItem] = []
        while let item = try cursor.next() { out.append(item) }
        return out
    }
}

/// The values of a statement's current row by column position (`LocalItem.init(columns:)`).
struct StatementColumns {
    let statement: SQLiteStatement

    func value<T: DatabaseValueConvertible & StatementColumnConvertible>(_ index: Int) throws -> T {
        guard let value = T(sqliteStatement: statement, index: CInt(index)) else {
            throw LocalStoreError.undecodable(
                table: "items", key: Int64(sqliteStatement: statement, index: 0) ?? 0, column: "column \(index)",
                value: "\(DatabaseValue(sqliteStatement: statement, index: CInt(index)))")
        }
        return value
    }

    func optional<T: DatabaseValueConvertible & StatementColumnConvertible>(_ index: Int) throws -> T? {
        DatabaseValue(sqliteStatement: statement, index: CInt(index)).isNull ? nil : try value(index)
    }
}
