import Foundation
import GRDB
import ItemModel

extension LocalItem {
    /// Decodes a row of `SELECT *` (or `items.*`) by position: columns in table order, which
    /// migrations only ever append to. Position, not name: GRDB's lookup by name lowercases
    /// every name and was most of the cost of listing a folder.
    init(columns row: StatementColumns) throws {
        let ino: Int64 = try row.value(0)
        func undecodable(_ column: String, _ value: String) -> LocalStoreError {
            .undecodable(table: "items", key: ino, column: column, value: value)
        }
        let xattrBlob: Data = try row.value(12)
        // Most items have no attributes: skip the decoder for the empty object.
        let xattrs: [String: Data]
        if xattrBlob.count <= 2 {
            xattrs = [:]
        } else {
            do { xattrs = try JSONDecoder().decode([String: Data].self, from: xattrBlob) } catch {
                throw undecodable("xattrs", String(decoding: xattrBlob.prefix(80), as: UTF8.self))
            }
        }
        let revision: String? = try row.optional(13)
        let digest: String? = try row.optional(14)
        let mode: Int64 = try row.value(6), uid: Int64 = try row.value(7), gid: Int64 = try row.value(8)
        let kindText: String = try row.value(4), contentText: String = try row.value(15)
        guard let kind = ItemKind(rawValue: kindText) else { throw undecodable("kind", kindText) }
        guard let content = ContentState(rawValue: contentText) else { throw undecodable("content", contentText) }
        var conflicts: [ConflictVersion] = []
        if let conflictBlob: Data = try row.optional(21) {
            do { conflicts = try JSONDecoder().decode([ConflictVersion].self, from: conflictBlob) } catch {
                throw undecodable("conflicts", String(decoding: conflictBlob.prefix(80), as: UTF8.self))
            }
        }
        self.init(
            ino: ino, itemID: ItemID(try row.value(1) as String), parent: try row.optional(2), name: try row.value(3),
            kind: kind, size: try row.value(5), mode: UInt32(truncatingIfNeeded: mode),
            uid: UInt32(truncatingIfNeeded: uid), gid: UInt32(truncatingIfNeeded: gid), created: try row.value(9),
            modified: try row.value(10), changed: try row.value(11), xattrs: xattrs, revision: revision.map(Revision.init(_:)),
            serverDigest: try digest.map { try ContentDigest(hex: $0) }, content: content,
            cachedBytes: try row.value(16), pinned: (try row.value(17) as Int64) != 0, lastAccess: try row.value(18),
            downloadError: try row.optional(19), uploadError: try row.optional(20), conflicts: conflicts, target: try row.optional(24))
    }

    var columnValues: StatementArguments {
        // Most items have no attributes: their JSON needs no encoder.
        let xattrJSON = xattrs.isEmpty ? Data("{}".utf8) : (try? JSONEncoder().encode(xattrs)) ?? Data("{}".utf8)
        let conflictJSON = conflicts.isEmpty ? nil : try? JSONEncoder().encode(conflicts)
        return [
            itemID.rawValue, parent, name, kind.rawValue, size, Int64(mode), Int64(uid), Int64(gid), created, modified, changed,
            xattrJSON, revision?.rawValue, serverDigest?.hex, content.rawValue, cachedBytes, pinned ? 1 : 0, lastAccess,
            downloadError, uploadError, conflictJSON, target,
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
