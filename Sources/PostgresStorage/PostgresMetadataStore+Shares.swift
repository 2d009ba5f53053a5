import Foundation
import ItemModel
import PostgresNIO
import ServerStorage

/// Shares: a read-only snapshot of a file or folder under a token, with its entries.
extension PostgresMetadataStore {
    public func addShare(_ share: Share, in container: ContainerRef) async throws {
        try await write { tx in
            try await tx.run("""
                INSERT INTO shares (token, container_key, item_id, name, kind, created, expires)
                VALUES (\(share.token), \(container.key), \(share.itemID.rawValue), \(share.name), \(share.kind.rawValue), \(share.created), \(share.expires))
                """)
            guard !share.entries.isEmpty else { return }
            // Every entry in one statement, its columns bound as arrays.
            try await tx.run("""
                INSERT INTO share_entries (token, path, digest, size, modified)
                SELECT \(share.token), path, digest, size, modified
                FROM unnest(\(share.entries.map(\.path)), \(share.entries.map(\.digest.hex)), \(share.entries.map(\.size)), \(share.entries.map(\.modified)))
                    AS e(path, digest, size, modified)
                """)
        }
    }

    public func share(token: String) async throws -> Share? {
        try await readSnapshot { tx in
            guard let row = try await tx.rows("SELECT \(unescaped: Self.shareColumns) FROM shares WHERE token = \(token)").first else { return nil }
            return try await Self.share(from: row, tx)
        }
    }

    public func shares(in container: ContainerRef) async throws -> [Share] {
        try await readSnapshot { tx in
            var shares: [Share] = []
            for row in try await tx.rows("SELECT \(unescaped: Self.shareColumns) FROM shares WHERE container_key = \(container.key) ORDER BY created DESC, token") {
                shares.append(try await Self.share(from: row, tx))
            }
            return shares
        }
    }

    public func removeShare(token: String, in container: ContainerRef) async throws -> Bool {
        try await write { tx in try await tx.run("DELETE FROM shares WHERE token = \(token) AND container_key = \(container.key) RETURNING 1") > 0 }
    }

    public func countDownload(token: String) async throws {
        _ = try await write { tx in try await tx.run("UPDATE shares SET downloads = downloads + 1 WHERE token = \(token)") }
    }

    static let shareColumns = "token, item_id, name, kind, created, expires, downloads"

    static func share(from row: PostgresRow, _ tx: Transaction) async throws -> Share {
        let (token, itemID, name, kindText, created, expires, downloads) = try row.decode((String, String, String, String, Int64, Int64?, Int64).self)
        guard let kind = ItemKind(rawValue: kindText) else { throw UnknownStoredValue(column: "shares.kind", value: kindText) }
        let entries = try await tx.rows("SELECT path, digest, size, modified FROM share_entries WHERE token = \(token) ORDER BY path").map { e in
            let (path, digest, size, modified) = try e.decode((String, String, Int64, Int64).self)
            return ShareEntry(path: path, digest: try ContentDigest(hex: digest), size: size, modified: modified)
        }
        return Share(token: token, itemID: ItemID(itemID), name: name, kind: kind, created: created, expires: expires, downloads: downloads, entries: entries)
    }
}
