import Foundation
import GRDB
import ItemModel

/// Bearer tokens, and the removal of a whole account.
extension SQLiteMetadataStore {
    public func addToken(_ token: StoredToken) async throws {
        try await write { db in
            try db.cachedStatement(sql: "INSERT INTO tokens (hash, account_key, created, device, used, expires) VALUES (?, ?, ?, ?, ?, ?)")
                .execute(arguments: [token.hash, token.account.key, token.created, token.device, token.used, token.expires])
        }
    }

    static let tokenColumns = "t.hash, t.device, t.created, t.used, t.expires, a.key, a.name"

    static func storedToken(_ row: Row) -> StoredToken {
        StoredToken(
            hash: row["hash"], account: AccountRef(key: row["key"], name: row["name"]), device: row["device"],
            created: row["created"], used: row["used"], expires: row["expires"])
    }

    public func token(hash: String) async throws -> StoredToken? {
        try readNow { db in
            try Row.fetchOne(
                try db.cachedStatement(sql: "SELECT \(Self.tokenColumns) FROM tokens t JOIN accounts a ON a.key = t.account_key WHERE t.hash = ?"),
                arguments: [hash]
            ).map(Self.storedToken)
        }
    }

    public func renewToken(hash: String, used: Timestamp, expires: Timestamp) async throws {
        try await write { db in
            try db.cachedStatement(sql: "UPDATE tokens SET used = ?, expires = ? WHERE hash = ?").execute(arguments: [used, expires, hash])
        }
    }

    public func tokens(ofAccount name: String) async throws -> [StoredToken] {
        try readNow { db in try Self.tokens(ofAccount: name, db) }
    }

    static func tokens(ofAccount name: String, _ db: Database) throws -> [StoredToken] {
        guard try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM accounts WHERE name = ?)", arguments: [name]) == true else {
            throw StorageError.accountNotFound(name)
        }
        return try Row.fetchAll(
            db, sql: "SELECT \(tokenColumns) FROM tokens t JOIN accounts a ON a.key = t.account_key WHERE a.name = ? ORDER BY t.created, t.hash",
            arguments: [name]
        ).map(storedToken)
    }

    public func revokeTokens(ofAccount name: String, ids: Set<String>?) async throws -> [StoredToken] {
        try await write { db in
            let revoked = try Self.tokens(ofAccount: name, db).filter { ids?.contains($0.id) ?? true }
            for token in revoked {
                try db.cachedStatement(sql: "DELETE FROM tokens WHERE hash = ?").execute(arguments: [token.hash])
            }
            return revoked
        }
    }

    public func revokeToken(hash: String) async throws -> Bool {
        try await write { db in
            try db.cachedStatement(sql: "DELETE FROM tokens WHERE hash = ?").execute(arguments: [hash])
            return db.changesCount > 0
        }
    }

    public func forgetTokens(expiredBefore cutoff: Timestamp) async throws -> Int {
        try await write { db in
            try db.execute(sql: "DELETE FROM tokens WHERE expires < ?", arguments: [cutoff])
            return db.changesCount
        }
    }

    // MARK: Removing an account

    public func removeAccount(name: String) async throws -> AccountRemoval {
        let queued = now()
        return try await write { db in
            guard let key = try Int64.fetchOne(db, sql: "SELECT key FROM accounts WHERE name = ?", arguments: [name]) else {
                throw StorageError.accountNotFound(name)
            }
            func count(_ sql: String) throws -> Int { try Int.fetchOne(db, sql: sql, arguments: [key]) ?? 0 }
            let inContainers = "container_key IN (SELECT key FROM containers WHERE account_key = ?)"
            var removal = AccountRemoval()
            removal.containers = try count("SELECT COUNT(*) FROM containers WHERE account_key = ?")
            removal.items = try count("SELECT COUNT(*) FROM items WHERE \(inContainers) AND deleted = 0 AND parent_id IS NOT NULL")
            removal.earlierVersions = try count("SELECT COUNT(*) FROM earlier_versions WHERE \(inContainers)")
            removal.shares = try count("SELECT COUNT(*) FROM shares WHERE \(inContainers)")
            removal.tokens = try count("SELECT COUNT(*) FROM tokens WHERE account_key = ?")
            // Every content an item of the account names is granted to it (an upload or a
            // renewal came first): its grants are all it can hold.
            let alone = try Row.fetchAll(db, sql: """
                SELECT digest, size FROM account_blobs WHERE account_key = ?1
                    AND digest NOT IN (SELECT digest FROM account_blobs WHERE account_key != ?1)
                """, arguments: [key])
            removal.contents = alone.count
            removal.contentBytes = alone.reduce(0) { $0 + ($1["size"] as Int64) }
            for row in alone {
                let digest: String = row["digest"]
                try db.cachedStatement(sql: "INSERT OR IGNORE INTO blob_deletions (digest, queued) VALUES (?, ?)").execute(arguments: [digest, queued])
                try db.cachedStatement(sql: "DELETE FROM inline_contents WHERE digest = ?").execute(arguments: [digest])
            }
            // The rest goes with the account (ON DELETE CASCADE).
            try db.execute(sql: "DELETE FROM accounts WHERE key = ?", arguments: [key])
            return removal
        }
    }

    public func pendingBlobDeletions(limit: Int) async throws -> [ContentDigest] {
        try readNow { db in
            try String.fetchAll(db, sql: "SELECT digest FROM blob_deletions ORDER BY queued, digest LIMIT ?", arguments: [limit])
                .compactMap { try? ContentDigest(hex: $0) }
        }
    }

    public func finishBlobDeletion(_ digest: ContentDigest) async throws {
        try await write { db in
            try db.cachedStatement(sql: "DELETE FROM blob_deletions WHERE digest = ?").execute(arguments: [digest.hex])
        }
    }
}
