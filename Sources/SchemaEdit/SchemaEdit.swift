import GRDB

/// Changes to a table's declaration that SQLite cannot make with ALTER TABLE.
public enum SchemaEdit {
    public struct NotFound: Error, CustomStringConvertible {
        public let table: String
        public let text: String
        public var description: String { "the declaration of table '\(table)' does not hold \(text)" }
    }

    /// Replaces a CHECK constraint in a table's declaration by a looser one, in place, inside
    /// the migration's transaction. SQLite documents this edit of its schema table for changes
    /// that leave every stored row valid and the file format as it is (removing or loosening
    /// a constraint is one): rebuilding the table instead would mean recreating every index
    /// and trigger on it. Throws when `old` is not in the declaration, so that an edit never
    /// silently does nothing.
    public static func widenCheck(of table: String, from old: String, to new: String, _ db: Database) throws {
        guard let sql = try String.fetchOne(db, sql: "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?", arguments: [table]),
              sql.contains(old) else { throw NotFound(table: table, text: old) }
        let version = try Int.fetchOne(db, sql: "PRAGMA schema_version") ?? 0
        try db.execute(sql: "PRAGMA writable_schema = ON")
        try db.execute(sql: "UPDATE sqlite_schema SET sql = ? WHERE type = 'table' AND name = ?",
                       arguments: [sql.replacingOccurrences(of: old, with: new), table])
        try db.execute(sql: "PRAGMA schema_version = \(version + 1)")
        try db.execute(sql: "PRAGMA writable_schema = OFF")
    }
}
