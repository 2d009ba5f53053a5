import Foundation
import GRDB
import ItemModel

extension SQLiteMetadataStore {
    public func addShare(_ share: Share, in container: ContainerRef) async throws {
        try await write { db in
            try db.execute(
                sql: "INSERT INTO shares (token, container_key, item_id, name, kind, created, expires) VALUES (?, ?, ?, ?, ?, ?, ?)",
                arguments: [share.token, container.key, share.itemID.rawValue, share.name, share.kind.rawValue, share.created, share.expires])
            let insert = try db.cachedStatement(sql: "INSERT INTO share_entries (token, path, digest, size, modified) VALUES (?, ?, ?, ?, ?)")
            for e in share.entries {
                try insert.execute(arguments: [share.token, e.path, e.digest.hex, e.size, e.modified])
            }
        }
    }

    public func share(token: String) async throws -> Share? {
        try readNow { db in
            try Row.fetchOne(db, sql: "SELECT * FROM shares WHERE token = ?", arguments: [token]).map { try Self.share(from: $0, db) }
        }
    }

    public func shares(in container: ContainerRef) async throws -> [Share] {
        try readNow { db in
            try Row.fetchAll(db, sql: "SELECT * FROM shares WHERE container_key = ? ORDER BY created DESC, token", arguments: [container.key])
                .map { try Self.share(from: $0, db) }
        }
    }

    public func removeShare(token: String, in container: ContainerRef) async throws -> Bool {
        try await write { db in
            try db.execute(sql: "DELETE FROM shares WHERE token = ? AND container_key = ?", arguments: [token, container.key])
            return db.changesCount > 0
        }
    }

    public func countDownload(token: String) async throws {
        try await write { db in
            try db.execute(sql: "UPDATE shares SET downloads = downloads + 1 WHERE token = ?", arguments: [token])
        }
    }

    static func share(from row: Row, _ db: Database) throws -> Share {
        let token: String = row["token"]
        let entries = try Row.fetchAll(db, sql: "SELECT path, digest, size, modified FROM share_entries WHERE token = ? ORDER BY path", arguments: [token])
            .map { e in ShareEntry(path: e["path"], digest: try ContentDigest(hex: e["digest"]), size: e["size"], modified: e["modified"]) }
        let kindText: String = row["kind"]
        return Share(
            token: token, itemID: ItemID(row["item_id"] as String), name: row["name"], kind: ItemKind(rawValue: kindText) ?? .file,
            created: row["created"], expires: row["expires"], downloads: row["downloads"], entries: entries)
    }
}
