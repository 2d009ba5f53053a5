import Foundation
import ItemModel
import PostgresNIO
import ServerStorage

/// Rows to values and values to columns, in one place for every file of the store.
enum PostgresRows {
    /// The columns `item(from:)` reads, for a `SELECT` of `items`.
    static let itemColumns = """
        id, parent_id, name, kind, revision, size, digest, mode, created, modified, xattrs::text AS xattrs, conflicts::text AS conflicts, deleted, target
        """

    static func item(from row: PostgresRow) throws -> ItemMetadata {
        let r = row.makeRandomAccess()
        let xattrs = try JSONDecoder().decode([String: Data].self, from: Data(try r["xattrs"].decode(String.self).utf8))
        let conflicts = try r["conflicts"].decode(String?.self).map { try JSONDecoder().decode([ConflictVersion].self, from: Data($0.utf8)) } ?? []
        let kindText = try r["kind"].decode(String.self)
        guard let kind = ItemKind(rawValue: kindText) else { throw UnknownStoredValue(column: "items.kind", value: kindText) }
        return ItemMetadata(
            id: ItemID(try r["id"].decode(String.self)), parentID: try r["parent_id"].decode(String?.self).map(ItemID.init(_:)),
            name: try r["name"].decode(String.self), kind: kind, revision: Revision(String(try r["revision"].decode(Int64.self))),
            size: try r["size"].decode(Int64.self), digest: try r["digest"].decode(String?.self).map { try ContentDigest(hex: $0) },
            mode: UInt32(truncatingIfNeeded: try r["mode"].decode(Int64.self)), created: try r["created"].decode(Int64.self),
            modified: try r["modified"].decode(Int64.self), xattrs: xattrs, deleted: try r["deleted"].decode(Bool.self),
            conflicts: conflicts, target: try r["target"].decode(String?.self))
    }

    /// The JSON of a value, as the columns of type jsonb and the change log keep it: sorted
    /// keys, so that one state is always the same bytes.
    static func json(_ value: some Encodable) throws -> String {
        String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    static func jsonData(_ value: some Encodable) throws -> Data {
        try encoder.encode(value)
    }

    private static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return encoder
    }
}

/// A stored value this version does not know (a row a newer version wrote, or a damaged one).
struct UnknownStoredValue: Error, CustomStringConvertible {
    let column: String
    let value: String
    var description: String { "\(column) holds '\(value)', which this version does not know" }
}

/// A revision as this store writes it (the decimal of a change's `seq`); nil for any other text,
/// which then matches no stored revision.
extension Revision {
    var sequenceNumber: Int64? { Int64(rawValue) }
}
