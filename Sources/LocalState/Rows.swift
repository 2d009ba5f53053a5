import Foundation
import GRDB
import ItemModel

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
        var conflicts: [ConflictVersion] = []
        if let conflictBlob = row[21] as Data? {
            do { conflicts = try JSONDecoder().decode([ConflictVersion].self, from: conflictBlob) } catch {
                throw undecodable("conflicts", String(decoding: conflictBlob.prefix(80), as: UTF8.self))
            }
        }
        self.init(
            ino: ino, itemID: ItemID(row[1] as String), parent: row[2], name: row[3],
            kind: kind, size: row[5], mode: UInt32(truncatingIfNeeded: mode),
            uid: UInt32(truncatingIfNeeded: uid), gid: UInt32(truncatingIfNeeded: gid), created: row[9],
            modified: row[10], changed: row[11], xattrs: xattrs, revision: revision.map(Revision.init(_:)),
            serverDigest: try digest.map { try ContentDigest(hex: $0) }, content: content,
            cachedBytes: row[16], pinned: (row[17] as Int64) != 0, lastAccess: row[18],
            downloadError: row[19], uploadError: row[20], conflicts: conflicts, target: row[24])
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
