import Foundation
import ItemModel
import PostgresNIO
import ServerStorage

/// Accounts, their identities and bearer tokens, and the removal of a whole account.
extension PostgresMetadataStore {
    public func addAccount(name: String, passwordHash: String) async throws -> AccountRef {
        try AccountName.validate(name)
        let created = now()
        do {
            return try await write { tx in
                let rows = try await tx.rows("""
                    INSERT INTO accounts (name, password_hash, created, identity) VALUES (\(name), \(passwordHash), \(created), \(AccountIdentity.random()))
                    RETURNING key
                    """)
                return AccountRef(key: try rows[0].decode(Int64.self), name: name)
            }
        } catch where Self.uniqueViolation(of: error) == "accounts_name_unique" {
            // Two adds of one name at once: the unique constraint lets one through.
            throw StorageError.accountExists(name)
        }
    }

    public func accounts() async throws -> [AccountRef] {
        try await rows("SELECT key, name FROM accounts ORDER BY name").map {
            let (key, name) = try $0.decode((Int64, String).self)
            return AccountRef(key: key, name: name)
        }
    }

    public func passwordHash(account name: String) async throws -> (AccountRef, String)? {
        try await rows("SELECT key, name, password_hash FROM accounts WHERE name = \(name)").first.map {
            let (key, name, hash) = try $0.decode((Int64, String, String).self)
            return (AccountRef(key: key, name: name), hash)
        }
    }

    public func identity(of account: AccountRef) async throws -> String {
        guard let identity = try await rows("SELECT identity FROM accounts WHERE key = \(account.key)").first?.decode(String.self) else {
            throw StorageError.accountNotFound(account.name)
        }
        return identity
    }

    // MARK: Tokens

    public func addToken(_ token: StoredToken) async throws {
        try await write { tx in
            try await tx.run("""
                INSERT INTO tokens (hash, account_key, created, device, used, expires)
                VALUES (\(token.hash), \(token.account.key), \(token.created), \(token.device), \(token.used), \(token.expires))
                """)
        }
    }

    static let tokenColumns = "t.hash, t.device, t.created, t.used, t.expires, a.key, a.name"

    static func storedToken(_ row: PostgresRow) throws -> StoredToken {
        let (hash, device, created, used, expires, key, name) = try row.decode((String, String?, Int64, Int64, Int64, Int64, String).self)
        return StoredToken(hash: hash, account: AccountRef(key: key, name: name), device: device, created: created, used: used, expires: expires)
    }

    public func token(hash: String) async throws -> StoredToken? {
        try await rows("SELECT \(unescaped: Self.tokenColumns) FROM tokens t JOIN accounts a ON a.key = t.account_key WHERE t.hash = \(hash)")
            .first.map(Self.storedToken)
    }

    public func renewToken(hash: String, used: Timestamp, expires: Timestamp) async throws {
        try await write { tx in try await tx.run("UPDATE tokens SET used = \(used), expires = \(expires) WHERE hash = \(hash)") }
    }

    public func tokens(ofAccount name: String) async throws -> [StoredToken] {
        // No account is a refusal; an account without tokens, the empty list.
        guard try await !rows("SELECT 1 FROM accounts WHERE name = \(name)").isEmpty else { throw StorageError.accountNotFound(name) }
        return try await rows("""
            SELECT \(unescaped: Self.tokenColumns) FROM tokens t JOIN accounts a ON a.key = t.account_key
            WHERE a.name = \(name) ORDER BY t.created, t.hash
            """).map(Self.storedToken)
    }

    public func revokeTokens(ofAccount name: String, ids: Set<String>?) async throws -> [StoredToken] {
        try await write { tx in
            guard try await tx.run("SELECT 1 FROM accounts WHERE name = \(name) FOR KEY SHARE") == 1 else { throw StorageError.accountNotFound(name) }
            let all = try await tx.rows("""
                SELECT \(unescaped: Self.tokenColumns) FROM tokens t JOIN accounts a ON a.key = t.account_key
                WHERE a.name = \(name) ORDER BY t.created, t.hash
                """).map(Self.storedToken)
            let revoked = all.filter { ids?.contains($0.id) ?? true }
            if !revoked.isEmpty {
                try await tx.run("DELETE FROM tokens WHERE hash = ANY(\(revoked.map(\.hash)))")
            }
            return revoked
        }
    }

    public func revokeToken(hash: String) async throws -> Bool {
        try await write { tx in try await tx.run("DELETE FROM tokens WHERE hash = \(hash) RETURNING 1") > 0 }
    }

    public func forgetTokens(expiredBefore cutoff: Timestamp) async throws -> Int {
        try await write { tx in try await tx.run("DELETE FROM tokens WHERE expires < \(cutoff) RETURNING 1") }
    }

    // MARK: Removing an account

    public func removeAccount(name: String) async throws -> AccountRemoval {
        let queued = now()
        return try await write { tx in
            // The account's row first: writes of its containers that started before wait for
            // nothing here, but the cascade below waits for their commits (row locks), and any
            // later write of them finds its container gone.
            guard let key = try await tx.rows("SELECT key FROM accounts WHERE name = \(name) FOR UPDATE").first?.decode(Int64.self) else {
                throw StorageError.accountNotFound(name)
            }
            let counts = try await tx.rows("""
                SELECT
                    (SELECT COUNT(*) FROM containers WHERE account_key = \(key)),
                    (SELECT COUNT(*) FROM items WHERE container_key IN (SELECT key FROM containers WHERE account_key = \(key))
                        AND NOT deleted AND parent_id IS NOT NULL),
                    (SELECT COUNT(*) FROM earlier_versions WHERE container_key IN (SELECT key FROM containers WHERE account_key = \(key))),
                    (SELECT COUNT(*) FROM shares WHERE container_key IN (SELECT key FROM containers WHERE account_key = \(key))),
                    (SELECT COUNT(*) FROM tokens WHERE account_key = \(key))
                """)[0].decode((Int64, Int64, Int64, Int64, Int64).self)
            var removal = AccountRemoval()
            removal.containers = Int(counts.0)
            removal.items = Int(counts.1)
            removal.earlierVersions = Int(counts.2)
            removal.shares = Int(counts.3)
            removal.tokens = Int(counts.4)
            // Every content an item of the account names is granted to it (an upload or a
            // renewal came first): its grants are all it can hold. Those no other account
            // holds are queued for deletion, with the inline copies dropped.
            let alone = try await tx.rows("""
                WITH alone AS (
                    SELECT digest, size FROM account_blobs WHERE account_key = \(key)
                        AND digest NOT IN (SELECT digest FROM account_blobs WHERE account_key <> \(key))
                ), queued AS (
                    INSERT INTO blob_deletions (digest, queued) SELECT digest, \(queued) FROM alone ON CONFLICT (digest) DO NOTHING
                ), inline AS (
                    DELETE FROM inline_contents WHERE digest IN (SELECT digest FROM alone)
                )
                SELECT size FROM alone
                """).map { try $0.decode(Int64.self) }
            removal.contents = alone.count
            removal.contentBytes = alone.reduce(0, +)
            // The rest goes with the account (ON DELETE CASCADE).
            try await tx.run("DELETE FROM accounts WHERE key = \(key)")
            return removal
        }
    }
}
