import Foundation
import Logging
import PostgresNIO

/// The schema, as numbered, forward-only migrations recorded in `schema_migrations`.
///
/// They run at every start in one transaction that first takes a transaction-level advisory
/// lock: of two servers starting at once on one database, the second waits for the first's
/// commit and then finds every migration applied. (Without the lock both would see an empty
/// table and both try to create the schema; `CREATE TABLE IF NOT EXISTS` itself is not safe
/// against a concurrent twin.) DDL is transactional in PostgreSQL, so a migration that fails
/// leaves nothing behind and the version table says exactly what the schema is.
///
/// A migration once released is never edited: a change is a new migration appended here.
enum PostgresSchema {
    struct Migration {
        let version: Int
        let name: String
        let sql: [String]
    }

    /// The lock's key: any constant this database's other users do not take.
    static let advisoryLockKey: Int64 = 0x7562_6971_7363_6865 // "ubiqsche"

    static let migrations: [Migration] = [
        Migration(version: 1, name: "accounts, containers, items, the change log, blobs, key-value stores, shares", sql: [
            // Names and keys compare and sort as bytes, as in SQLite's store: COLLATE "C".
            """
            CREATE TABLE accounts (
                key bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                name text COLLATE "C" NOT NULL CONSTRAINT accounts_name_unique UNIQUE,
                password_hash text NOT NULL,
                created bigint NOT NULL,
                identity text NOT NULL CONSTRAINT accounts_identity_unique UNIQUE CHECK (identity ~ '^[0-9a-f]{64}$')
            )
            """,
            """
            CREATE TABLE tokens (
                hash text PRIMARY KEY,
                account_key bigint NOT NULL REFERENCES accounts(key) ON DELETE CASCADE,
                created bigint NOT NULL,
                device text,
                used bigint NOT NULL,
                expires bigint NOT NULL
            )
            """,
            "CREATE INDEX tokens_by_account ON tokens(account_key, created)",
            "CREATE INDEX tokens_by_expiry ON tokens(expires)",
            // Contents whose last account was removed, until whoever knows the blob store's
            // writers deletes their files.
            "CREATE TABLE blob_deletions (digest text PRIMARY KEY CHECK (digest ~ '^[0-9a-f]{64}$'), queued bigint NOT NULL)",
            // change_seq: the container's change-log counter, the cursor of its latest change
            // (see PostgresMetadataStore+ChangeLog). kv_version: its key-value store's version.
            """
            CREATE TABLE containers (
                key bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                account_key bigint NOT NULL REFERENCES accounts(key) ON DELETE CASCADE,
                name text COLLATE "C" NOT NULL,
                created bigint NOT NULL,
                change_seq bigint NOT NULL DEFAULT 0 CHECK (change_seq >= 0),
                kv_version bigint NOT NULL DEFAULT 0 CHECK (kv_version >= 0),
                CONSTRAINT containers_name_unique UNIQUE (account_key, name)
            )
            """,
            // xattrs and conflicts are the JSON the items carry; a tombstone keeps its row.
            """
            CREATE TABLE items (
                container_key bigint NOT NULL REFERENCES containers(key) ON DELETE CASCADE,
                id text COLLATE "C" NOT NULL,
                parent_id text COLLATE "C",
                name text COLLATE "C" NOT NULL,
                kind text NOT NULL CHECK (kind IN ('file', 'folder', 'symlink')),
                revision bigint NOT NULL CHECK (revision > 0),
                size bigint NOT NULL CHECK (size >= 0),
                digest text CHECK ((kind = 'file') = (digest IS NOT NULL)) CHECK (digest ~ '^[0-9a-f]{64}$'),
                mode bigint NOT NULL CHECK (mode BETWEEN 0 AND 4294967295),
                created bigint NOT NULL,
                modified bigint NOT NULL,
                xattrs jsonb NOT NULL CHECK (jsonb_typeof(xattrs) = 'object'),
                conflicts jsonb CHECK (jsonb_typeof(conflicts) = 'array'),
                deleted boolean NOT NULL DEFAULT false,
                saved_by text,
                target text CHECK ((kind = 'symlink') = (target IS NOT NULL)),
                PRIMARY KEY (container_key, id),
                FOREIGN KEY (container_key, parent_id) REFERENCES items(container_key, id),
                CHECK ((parent_id IS NULL) = (id = 'root'))
            )
            """,
            // No two live items share a name in one folder: the database enforces it.
            "CREATE UNIQUE INDEX items_live_name ON items(container_key, parent_id, name) WHERE NOT deleted",
            "CREATE INDEX items_by_parent ON items(container_key, parent_id)",
            "CREATE INDEX items_by_digest ON items(digest) WHERE NOT deleted AND digest IS NOT NULL",
            // The compacted change log: one row per item, its latest change, at the cursor
            // (`seq`) the container's counter gave it.
            """
            CREATE TABLE changes (
                container_key bigint NOT NULL REFERENCES containers(key) ON DELETE CASCADE,
                seq bigint NOT NULL CHECK (seq > 0),
                item_id text COLLATE "C" NOT NULL,
                kind text NOT NULL CHECK (kind IN ('upsert', 'delete')),
                item_json bytea NOT NULL,
                PRIMARY KEY (container_key, seq),
                CONSTRAINT changes_one_per_item UNIQUE (container_key, item_id),
                FOREIGN KEY (container_key, item_id) REFERENCES items(container_key, id)
            )
            """,
            """
            CREATE TABLE account_blobs (
                account_key bigint NOT NULL REFERENCES accounts(key) ON DELETE CASCADE,
                digest text NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),
                size bigint NOT NULL CHECK (size >= 0),
                granted bigint NOT NULL,
                PRIMARY KEY (account_key, digest)
            )
            """,
            "CREATE INDEX account_blobs_by_digest ON account_blobs(digest)",
            "CREATE TABLE inline_contents (digest text PRIMARY KEY CHECK (digest ~ '^[0-9a-f]{64}$'), bytes bytea NOT NULL)",
            """
            CREATE TABLE earlier_versions (
                container_key bigint NOT NULL,
                item_id text COLLATE "C" NOT NULL,
                revision bigint NOT NULL,
                digest text NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),
                size bigint NOT NULL CHECK (size >= 0),
                modified bigint NOT NULL,
                replaced bigint NOT NULL,
                device text,
                PRIMARY KEY (container_key, item_id, revision),
                FOREIGN KEY (container_key, item_id) REFERENCES items(container_key, id) ON DELETE CASCADE
            )
            """,
            "CREATE INDEX earlier_versions_by_age ON earlier_versions(replaced)",
            "CREATE INDEX earlier_versions_by_digest ON earlier_versions(digest)",
            // Keys are their UTF-8 bytes: compared and ordered byte for byte, NUL included.
            """
            CREATE TABLE key_values (
                container_key bigint NOT NULL REFERENCES containers(key) ON DELETE CASCADE,
                key bytea NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 64),
                version bigint NOT NULL CHECK (version > 0),
                value bytea NOT NULL,
                removed boolean NOT NULL DEFAULT false CHECK (NOT removed OR octet_length(value) = 0),
                PRIMARY KEY (container_key, key)
            )
            """,
            "CREATE INDEX key_values_by_version ON key_values(container_key, version)",
            """
            CREATE TABLE shares (
                token text PRIMARY KEY,
                container_key bigint NOT NULL REFERENCES containers(key) ON DELETE CASCADE,
                item_id text COLLATE "C" NOT NULL,
                name text NOT NULL,
                kind text NOT NULL CHECK (kind IN ('file', 'folder')),
                created bigint NOT NULL,
                expires bigint,
                downloads bigint NOT NULL DEFAULT 0 CHECK (downloads >= 0)
            )
            """,
            "CREATE INDEX shares_by_container ON shares(container_key, created)",
            """
            CREATE TABLE share_entries (
                token text NOT NULL REFERENCES shares(token) ON DELETE CASCADE,
                path text COLLATE "C" NOT NULL,
                digest text NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),
                size bigint NOT NULL CHECK (size >= 0),
                modified bigint NOT NULL,
                PRIMARY KEY (token, path)
            )
            """,
            "CREATE INDEX share_entries_by_digest ON share_entries(digest)",
        ]),
    ]

    /// The newest version this build knows.
    static var latestVersion: Int { migrations.last?.version ?? 0 }

    /// Applies the migrations the database lacks, in one transaction under the advisory lock;
    /// returns the versions applied (none when the schema was up to date).
    @discardableResult
    static func migrate(_ connection: PostgresConnection, logger: Logger) async throws -> [Int] {
        try await connection.query("BEGIN", logger: logger)
        do {
            try await connection.query("SELECT pg_advisory_xact_lock(\(advisoryLockKey))", logger: logger)
            try await connection.query("""
                CREATE TABLE IF NOT EXISTS schema_migrations (
                    version integer PRIMARY KEY,
                    name text NOT NULL,
                    applied bigint NOT NULL
                )
                """, logger: logger)
            var applied = Set<Int>()
            for try await version in try await connection.query("SELECT version FROM schema_migrations", logger: logger).decode(Int.self) {
                applied.insert(version)
            }
            // A database a newer build migrated: this build does not know its schema.
            if let newest = applied.max(), newest > latestVersion {
                throw SchemaTooNew(found: newest, known: latestVersion)
            }
            var done: [Int] = []
            for migration in migrations where !applied.contains(migration.version) {
                for statement in migration.sql {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query(
                    "INSERT INTO schema_migrations (version, name, applied) VALUES (\(migration.version), \(migration.name), \(Int64(Date().timeIntervalSince1970 * 1e9)))",
                    logger: logger)
                done.append(migration.version)
            }
            try await connection.query("COMMIT", logger: logger)
            return done
        } catch {
            _ = try? await connection.query("ROLLBACK", logger: logger)
            throw error
        }
    }

    struct SchemaTooNew: Error, CustomStringConvertible {
        let found: Int
        let known: Int
        var description: String { "the database's schema is at version \(found); this ubiq-server knows up to \(known)" }
    }
}
