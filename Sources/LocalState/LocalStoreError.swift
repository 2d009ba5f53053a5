/// How the mount's database fails in ways its callers tell apart. Anything else it throws is
/// a fault of the database itself (its file unreadable, a constraint broken).
public enum LocalStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The volume (or the quota) is full: the transaction rolled back and nothing changed.
    case diskFull
    /// A stored value this version does not know. Named, never guessed: an unknown outbox
    /// operation read as an upload would send the wrong change.
    case undecodable(table: String, key: Int64, column: String, value: String)

    public var description: String {
        switch self {
        case .diskFull: "the disk holding the mount's database is full"
        case .undecodable(let table, let key, let column, let value): "\(table) row \(key): \(column) holds '\(value)', which this version does not know"
        }
    }
}
