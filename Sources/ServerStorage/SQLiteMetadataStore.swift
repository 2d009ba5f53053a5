import Foundation
import GRDB
import ItemModel
import SchemaEdit

/// The embedded default for accounts, metadata and the change log: one SQLite database (WAL).
///
/// Durability: `synchronous = FULL`, because a commit here is what the server acknowledges to a
/// client ("your upload is safe"); measured on this machine kind, `NORMAL` lost commits under
/// simulated power loss and `FULL` lost none.
///
/// Concurrency: GRDB serializes writes; every mutation reads its base revision and writes the
/// new state inside one write transaction, so of two concurrent uploads exactly one wins.
public final class SQLiteMetadataStore: AccountStore, MetadataStore, ChangeLog, KeyValueStore, ShareStore, Sendable {
    let writer: any DatabaseWriter
    let now: @Sendable () -> Timestamp

    /// Reads run on the calling thread. A query answered from the page cache takes
    /// microseconds, less than the two thread hops of GRDB's async read, which were a large
    /// part of a request's latency (a download's first byte waits for two such reads).
    /// Writes stay async: each waits for an fsync.
    func readNow<T>(_ body: (Database) throws -> T) throws -> T {
        try writer.read(body)
    }

    /// Every write goes through here: what SQLite itself refuses becomes a refusal of storage.
    /// A full disk is the client's to wait out (507), not a server fault (500). A foreign key
    /// that no longer holds means a row this request was authorised by went away meanwhile:
    /// rows are only ever deleted with their account (`ubiq-server account remove`, beside a
    /// running server that still trusts the token for a few seconds).
    func write<T: Sendable>(_ body: @Sendable @escaping (Database) throws -> T) async throws -> T {
        do {
            return try await writer.write(body)
        } catch let error as DatabaseError where error.resultCode == .SQLITE_FULL {
            throw StorageError.diskFull
        } catch let error as DatabaseError where error.extendedResultCode == .SQLITE_CONSTRAINT_FOREIGNKEY {
            throw StorageError.accountNotFound("")
        }
    }

    /// Opens (creating when missing) the database file at `path`.
    public convenience init(path: String, now: @escaping @Sendable () -> Timestamp = WallClock.now) throws {
        var config = Configuration()
        config.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = FULL")
        }
        // Another process (`ubiq-server account add` beside a running server) may hold the lock briefly.
        config.busyMode = .timeout(5)
        try self.init(writer: DatabasePool(path: path, configuration: config), now: now)
    }

    /// A private in-memory database, for tests.
    public static func inMemory(now: @escaping @Sendable () -> Timestamp = WallClock.now) throws -> SQLiteMetadataStore {
        try SQLiteMetadataStore(writer: DatabaseQueue(), now: now)
    }

    /// A copy of the database as it is now, in memory: a backup to restore a server from, for tests.
    public func backupInMemory() throws -> SQLiteMetadataStore {
        let copy = try DatabaseQueue()
        try writer.backup(to: copy)
        return try SQLiteMetadataStore(writer: copy, now: now)
    }

    init(writer: any DatabaseWriter, now: @escaping @Sendable () -> Timestamp) throws {
        self.writer = writer
        self.now = now
        // Two processes may open a new database at once (`ubiq-server account add` beside a
        // starting server): one migrates, the other's attempt fails on the tables it finds,
        // and its retry then sees the migrations as applied.
        var attempt = 0
        while true {
            do {
                try Self.migrator.migrate(writer)
                break
            } catch {
                attempt += 1
                if attempt >= 20 { throw error }
                usleep(50_000)
            }
        }
    }

    // Forward-only, append-only migrations.
    static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE accounts (
                    key INTEGER PRIMARY KEY AUTOINCREMENT,
                    name TEXT NOT NULL UNIQUE,
                    password_hash TEXT NOT NULL,
                    created INTEGER NOT NULL
                );
                CREATE TABLE tokens (
                    hash TEXT PRIMARY KEY NOT NULL,
                    account_key INTEGER NOT NULL REFERENCES accounts(key) ON DELETE CASCADE,
                    created INTEGER NOT NULL
                );
                CREATE TABLE containers (
                    key INTEGER PRIMARY KEY AUTOINCREMENT,
                    account_key INTEGER NOT NULL REFERENCES accounts(key) ON DELETE CASCADE,
                    name TEXT NOT NULL,
                    created INTEGER NOT NULL,
                    UNIQUE (account_key, name)
                );
                CREATE TABLE items (
                    container_key INTEGER NOT NULL REFERENCES containers(key) ON DELETE CASCADE,
                    id TEXT NOT NULL,
                    parent_id TEXT,
                    name TEXT NOT NULL,
                    kind TEXT NOT NULL CHECK (kind IN ('file', 'folder')),
                    revision INTEGER NOT NULL,
                    size INTEGER NOT NULL CHECK (size >= 0),
                    digest TEXT CHECK ((kind = 'file') = (digest IS NOT NULL)),
                    mode INTEGER NOT NULL,
                    created INTEGER NOT NULL,
                    modified INTEGER NOT NULL,
                    xattrs BLOB NOT NULL,
                    deleted INTEGER NOT NULL DEFAULT 0 CHECK (deleted IN (0, 1)),
                    PRIMARY KEY (container_key, id),
                    FOREIGN KEY (container_key, parent_id) REFERENCES items(container_key, id),
                    CHECK ((parent_id IS NULL) = (id = 'root'))
                );
                -- No two live items share a name in one folder.
                CREATE UNIQUE INDEX items_live_name ON items(container_key, parent_id, name) WHERE deleted = 0;
                CREATE INDEX items_by_parent ON items(container_key, parent_id);
                -- Compacted change log: one row per item, its latest change. AUTOINCREMENT so
                -- that a sequence number is never handed out twice, even after compaction.
                CREATE TABLE changes (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    container_key INTEGER NOT NULL REFERENCES containers(key) ON DELETE CASCADE,
                    item_id TEXT NOT NULL,
                    kind TEXT NOT NULL CHECK (kind IN ('upsert', 'delete')),
                    item_json BLOB NOT NULL
                );
                CREATE UNIQUE INDEX changes_by_item ON changes(container_key, item_id);
                CREATE INDEX changes_by_container ON changes(container_key, seq);
                CREATE TABLE account_blobs (
                    account_key INTEGER NOT NULL REFERENCES accounts(key) ON DELETE CASCADE,
                    digest TEXT NOT NULL,
                    size INTEGER NOT NULL CHECK (size >= 0),
                    PRIMARY KEY (account_key, digest)
                );
                """)
        }
        m.registerMigration("v2: inline contents") { db in
            // Small contents that came inline with a batch of creates, kept here so that the
            // batch's one commit makes them durable with the items (a file each cost two
            // fsyncs). Content-addressed like the content store; read when it has no file.
            try db.execute(sql: "CREATE TABLE inline_contents (digest TEXT PRIMARY KEY NOT NULL, bytes BLOB NOT NULL) WITHOUT ROWID")
        }
        m.registerMigration("v3: conflict versions") { db in
            // JSON of the file's unresolved conflict versions; NULL when there are none.
            try db.execute(sql: "ALTER TABLE items ADD COLUMN conflicts BLOB")
        }
        m.registerMigration("v4: earlier versions") { db in
            // The contents files had before another replaced them, until the retention ends.
            try db.execute(sql: """
                CREATE TABLE earlier_versions (
                    container_key INTEGER NOT NULL REFERENCES containers(key) ON DELETE CASCADE,
                    item_id TEXT NOT NULL,
                    revision INTEGER NOT NULL,
                    digest TEXT NOT NULL,
                    size INTEGER NOT NULL,
                    modified INTEGER NOT NULL,
                    replaced INTEGER NOT NULL,
                    PRIMARY KEY (container_key, item_id, revision)
                );
                CREATE INDEX earlier_versions_by_age ON earlier_versions(replaced);
                """)
        }
        m.registerMigration("v5: blob grant times") { db in
            // When each grant was last made or renewed: blobs nothing names are taken back only
            // once no account has asked for them for the retention (`forgetUnreferencedBlobs`).
            // Grants from before this migration count from now.
            try db.execute(sql: """
                ALTER TABLE account_blobs ADD COLUMN granted INTEGER NOT NULL DEFAULT 0;
                CREATE INDEX account_blobs_by_digest ON account_blobs(digest);
                """)
            try db.execute(sql: "UPDATE account_blobs SET granted = ?", arguments: [WallClock.now()])
        }
        m.registerMigration("v6: account identities") { db in
            // Each account's identity (`AccountIdentity`), made at random when it is added;
            // the accounts added before this version get theirs here, each its own.
            try db.execute(sql: "ALTER TABLE accounts ADD COLUMN identity TEXT")
            for key in try Int64.fetchAll(db, sql: "SELECT key FROM accounts") {
                try db.execute(sql: "UPDATE accounts SET identity = ? WHERE key = ?", arguments: [AccountIdentity.random(), key])
            }
            try db.execute(sql: "CREATE UNIQUE INDEX accounts_by_identity ON accounts(identity)")
        }
        m.registerMigration("v7: key-value stores") { db in
            // Each container's key-value store (`SQLiteMetadataStore+KeyValues`): its version
            // beside the container, and one row per key ever set, its latest state; a removed
            // key keeps its row as a tombstone (`removed`, the value emptied) so that a read
            // from an earlier version reports the removal. Keys are BLOBs of their UTF-8:
            // compared and ordered byte for byte, NUL included.
            try db.execute(sql: """
                ALTER TABLE containers ADD COLUMN kv_version INTEGER NOT NULL DEFAULT 0;
                CREATE TABLE key_values (
                    container_key INTEGER NOT NULL REFERENCES containers(key) ON DELETE CASCADE,
                    key BLOB NOT NULL,
                    version INTEGER NOT NULL,
                    value BLOB NOT NULL,
                    removed INTEGER NOT NULL DEFAULT 0 CHECK (removed IN (0, 1)),
                    PRIMARY KEY (container_key, key)
                ) WITHOUT ROWID;
                CREATE INDEX key_values_by_version ON key_values(container_key, version);
                """)
        }
        m.registerMigration("v8: the devices that saved contents") { db in
            // The device that saved a file's current content, and each earlier content's: what
            // `ubiq versions --all` shows. NULL when the writer named none, and for every content
            // saved before this version.
            try db.execute(sql: """
                ALTER TABLE items ADD COLUMN saved_by TEXT;
                ALTER TABLE earlier_versions ADD COLUMN device TEXT;
                """)
        }
        m.registerMigration("v9: symbolic links") { db in
            // A link's target, NULL for every other kind; and the kind check lets links in.
            try db.execute(sql: "ALTER TABLE items ADD COLUMN target TEXT")
            try SchemaEdit.widenCheck(
                of: "items", from: "CHECK (kind IN ('file', 'folder'))", to: "CHECK (kind IN ('file', 'folder', 'symlink'))", db)
        }
        m.registerMigration("v10: shares") { db in
            // Read-only snapshots published under a token (`SQLiteMetadataStore+Shares`): each
            // share's files with their contents as they were when shared. The contents they
            // name are kept (`forgetUnreferencedBlobs`) until the share goes.
            try db.execute(sql: """
                CREATE TABLE shares (
                    token TEXT PRIMARY KEY NOT NULL,
                    container_key INTEGER NOT NULL REFERENCES containers(key) ON DELETE CASCADE,
                    item_id TEXT NOT NULL,
                    name TEXT NOT NULL,
                    kind TEXT NOT NULL CHECK (kind IN ('file', 'folder')),
                    created INTEGER NOT NULL,
                    expires INTEGER,
                    downloads INTEGER NOT NULL DEFAULT 0
                ) WITHOUT ROWID;
                CREATE INDEX shares_by_container ON shares(container_key, created);
                CREATE TABLE share_entries (
                    token TEXT NOT NULL REFERENCES shares(token) ON DELETE CASCADE,
                    path TEXT NOT NULL,
                    digest TEXT NOT NULL,
                    size INTEGER NOT NULL CHECK (size >= 0),
                    modified INTEGER NOT NULL,
                    PRIMARY KEY (token, path)
                ) WITHOUT ROWID;
                CREATE INDEX share_entries_by_digest ON share_entries(digest);
                """)
        }
        m.registerMigration("v11: tokens that end") { db in
            // Tokens issued before get the default lifetime from now; the server's own policy
            // shortens it at their first use if it is shorter (`TokenPolicy.expiry`).
            let now = WallClock.now()
            try db.execute(sql: """
                ALTER TABLE tokens ADD COLUMN device TEXT;
                ALTER TABLE tokens ADD COLUMN used INTEGER NOT NULL DEFAULT 0;
                ALTER TABLE tokens ADD COLUMN expires INTEGER NOT NULL DEFAULT 0;
                UPDATE tokens SET used = ?, expires = ?;
                CREATE INDEX tokens_by_account ON tokens(account_key, created);
                -- Contents whose last account was removed: their files are deleted by whoever
                -- knows the blob store's writers (the running server, or the command when
                -- none runs).
                CREATE TABLE blob_deletions (digest TEXT PRIMARY KEY NOT NULL, queued INTEGER NOT NULL) WITHOUT ROWID;
                """, arguments: [now, now + 90 * 86_400 * 1_000_000_000])
        }
        return m
    }

    // MARK: AccountStore

    public func addAccount(name: String, passwordHash: String) async throws -> AccountRef {
        try AccountName.validate(name)
        let created = now()
        return try await write { db in
            if try Int64.fetchOne(try db.cachedStatement(sql: "SELECT key FROM accounts WHERE name = ?"), arguments: [name]) != nil {
                throw StorageError.accountExists(name)
            }
            try db.cachedStatement(sql: "INSERT INTO accounts (name, password_hash, created, identity) VALUES (?, ?, ?, ?)").execute(
                arguments: [name, passwordHash, created, AccountIdentity.random()])
            return AccountRef(key: db.lastInsertedRowID, name: name)
        }
    }

    public func accounts() async throws -> [AccountRef] {
        try readNow { db in
            try Row.fetchAll(try db.cachedStatement(sql: "SELECT key, name FROM accounts ORDER BY name")).map {
                AccountRef(key: $0["key"], name: $0["name"])
            }
        }
    }

    public func passwordHash(account name: String) async throws -> (AccountRef, String)? {
        try readNow { db in
            try Row.fetchOne(try db.cachedStatement(sql: "SELECT key, name, password_hash FROM accounts WHERE name = ?"), arguments: [name])
                .map { (AccountRef(key: $0["key"], name: $0["name"]), $0["password_hash"]) }
        }
    }

    public func identity(of account: AccountRef) async throws -> String {
        try readNow { db in
            guard let identity = try String.fetchOne(
                try db.cachedStatement(sql: "SELECT identity FROM accounts WHERE key = ?"), arguments: [account.key])
            else { throw StorageError.accountNotFound(account.name) }
            return identity
        }
    }

    // MARK: Containers

    public func containers(of account: AccountRef) async throws -> [ContainerRef] {
        try readNow { db in
            try Row.fetchAll(
                try db.cachedStatement(sql: "SELECT key, name, created FROM containers WHERE account_key = ? ORDER BY name"),
                arguments: [account.key]
            ).map { try Self.containerRef($0, account: account) }
        }
    }

    public func container(_ id: ContainerID, of account: AccountRef, create: Bool) async throws -> ContainerRef? {
        if create { return try await ensureContainer(id, of: account).container }
        return try readNow { db in try Self.lookUpContainer(id, of: account, db) }
    }

    public func ensureContainer(_ id: ContainerID, of account: AccountRef) async throws -> (container: ContainerRef, created: Bool) {
        if let found = try readNow({ db in try Self.lookUpContainer(id, of: account, db) }) { return (found, false) }
        let created = now()
        // Looked up again inside the write: of two requests that both missed it above, the
        // second to get the writer finds the first one's container and must not say "created".
        return try await write { db in
            if let found = try Self.lookUpContainer(id, of: account, db) { return (found, false) }
            guard try Int64.fetchOne(try db.cachedStatement(sql: "SELECT 1 FROM accounts WHERE key = ?"), arguments: [account.key]) != nil else {
                throw StorageError.accountNotFound(account.name)
            }
            try db.cachedStatement(sql: "INSERT INTO containers (account_key, name, created) VALUES (?, ?, ?)").execute(
                arguments: [account.key, id.rawValue, created])
            let ref = ContainerRef(key: db.lastInsertedRowID, account: account, id: id, created: created)
            var root = ItemMetadata(
                id: .root, parentID: nil, name: "", kind: .folder, revision: Revision("0"), size: 0, digest: nil,
                mode: ItemMetadata.defaultMode(for: .folder), created: created, modified: created)
            try Self.commit(&root, kind: .upsert, in: ref, db: db, isNew: true)
            return (ref, true)
        }
    }

    static func lookUpContainer(_ id: ContainerID, of account: AccountRef, _ db: Database) throws -> ContainerRef? {
        try Row.fetchOne(
            try db.cachedStatement(sql: "SELECT key, name, created FROM containers WHERE account_key = ? AND name = ?"),
            arguments: [account.key, id.rawValue]
        ).map { try containerRef($0, account: account) }
    }

    static func containerRef(_ row: Row, account: AccountRef) throws -> ContainerRef {
        ContainerRef(key: row["key"], account: account, id: try ContainerID(row["name"] as String), created: row["created"])
    }

    // MARK: Items

    public func item(_ id: ItemID, in container: ContainerRef) async throws -> ItemMetadata? {
        try readNow { db in try Self.liveItem(id, container, db) }
    }

    public func children(of folder: ItemID, in container: ContainerRef) async throws -> [ItemMetadata] {
        try readNow { db in
            let parent = try Self.requireLive(folder, container, db)
            guard parent.kind == .folder else { throw StorageError.notAFolder(folder) }
            return try Row.fetchAll(
                try db.cachedStatement(sql: "SELECT * FROM items WHERE container_key = ? AND parent_id = ? AND deleted = 0 ORDER BY name"),
                arguments: [container.key, folder.rawValue]
            ).map(Self.item(from:))
        }
    }

    public func createItem(_ new: NewItem, in container: ContainerRef) async throws -> ItemMetadata {
        try await write { db in try Self.insert(new, in: container, db: db) }
    }

    public func createItems(_ items: [NewItem], contents: [ContentDigest: Data], in container: ContainerRef) async throws -> [Result<ItemMetadata, StorageError>] {
        let granted = now()
        return try await write { db in
            for (digest, bytes) in contents {
                try db.cachedStatement(sql: "INSERT OR IGNORE INTO inline_contents (digest, bytes) VALUES (?, ?)").execute(arguments: [digest.hex, bytes])
                try Self.grant(digest, size: Int64(bytes.count), to: container.account, at: granted, db)
            }
            return try items.map { new -> Result<ItemMetadata, StorageError> in
                // A savepoint each: a refused create leaves no trace, the others still commit.
                var created: ItemMetadata?
                do {
                    try db.inSavepoint {
                        created = try Self.insert(new, in: container, db: db)
                        return .commit
                    }
                } catch let error as StorageError {
                    return .failure(error)
                }
                return .success(created!)
            }
        }
    }

    /// A new item's row and change-log entry, inside the caller's transaction.
    static func insert(_ new: NewItem, in container: ContainerRef, db: Database) throws -> ItemMetadata {
        try SyncedXattr.validateOrThrow(new.xattrs)
        try checkDevice(new.savedBy)
        let parent = try Self.requireLive(new.parentID, container, db)
        guard parent.kind == .folder else { throw StorageError.notAFolder(new.parentID) }
        try checkKind(new)
        if let existing = try Self.anyItem(new.id, container, db) {
            // A retried create (the answer to the first was lost) gets the same item back.
            if !existing.deleted, existing.parentID == new.parentID, existing.name == new.name.rawValue,
               existing.kind == new.kind, new.kind != .file || existing.digest == (new.digest ?? .empty), existing.target == new.target {
                return existing
            }
            throw StorageError.itemIDTaken(new.id)
        }
        if let clash = try Self.liveChild(named: new.name, of: new.parentID, container, db) {
            throw StorageError.nameExists(existing: clash)
        }
        let fileSize = try new.contentDigest.map { try Self.blobSize($0, account: container.account, declared: new.declaredSize, db: db) } ?? 0
        var item = new.metadata(fileSize: fileSize)
        try Self.commit(&item, kind: .upsert, in: container, db: db, isNew: true)
        if let savedBy = new.savedBy { try Self.setSavedBy(savedBy, of: item.id, in: container, db: db) }
        return item
    }

    /// Records the device that saved the file's current content, inside the caller's
    /// transaction, after the commit that made the content current.
    static func setSavedBy(_ device: String?, of id: ItemID, in container: ContainerRef, db: Database) throws {
        try db.cachedStatement(sql: "UPDATE items SET saved_by = ? WHERE container_key = ? AND id = ?").execute(
            arguments: [device, container.key, id.rawValue])
    }

    /// Refuses the kinds the server does not keep, and a link without a valid target.
    static func checkKind(_ new: NewItem) throws(StorageError) {
        guard new.kind.isSynced else { throw .unsyncedKind(new.kind) }
        guard new.kind == .symlink else { return }
        do { try SymlinkTarget.validate(new.target ?? "") } catch { throw .invalidTarget(error) }
    }

    /// Refuses a device name out of bounds; nil (none named) passes.
    static func checkDevice(_ device: String?) throws {
        if let device, !ConflictVersion.isValidDevice(device) { throw StorageError.invalidDevice(device) }
    }

    public func updateContent(
        _ id: ItemID, base: Revision, digest: ContentDigest, declaredSize: Int64?, modified: Timestamp?, savedBy: String?,
        in container: ContainerRef
    ) async throws -> ItemMetadata {
        let modified = modified ?? now()
        try Self.checkDevice(savedBy)
        return try await write { db in
            var item = try Self.requireFile(id, at: base, container, db)
            let size = try Self.blobSize(digest, account: container.account, declared: declaredSize, db: db)
            try self.replaceContent(of: &item, with: digest, size: size, modified: modified, savedBy: savedBy, in: container, db: db)
            return item
        }
    }

    /// The live file `id`, at revision `base`: what an update of its content or a restore starts from.
    static func requireFile(_ id: ItemID, at base: Revision, _ container: ContainerRef, _ db: Database) throws -> ItemMetadata {
        let item = try requireLive(id, container, db)
        guard item.kind == .file else { throw StorageError.notAFile(id) }
        guard item.revision == base else { throw StorageError.revisionConflict(current: item) }
        return item
    }

    /// Makes `digest` the file's content, for an update and a restore alike: the content it
    /// replaces kept as an earlier version, the change committed, the saving device recorded.
    func replaceContent(
        of item: inout ItemMetadata, with digest: ContentDigest, size: Int64, modified: Timestamp, savedBy: String?, in container: ContainerRef,
        db: Database
    ) throws {
        try keepEarlier(item, replacedBy: digest, in: container, db: db)
        item.size = size
        item.digest = digest
        item.modified = modified
        try Self.commit(&item, kind: .upsert, in: container, db: db)
        try Self.setSavedBy(savedBy, of: item.id, in: container, db: db)
    }

    /// Keeps the file's content as an earlier version before `digest` replaces it, inside the
    /// caller's transaction: nothing when the content stays.
    func keepEarlier(_ item: ItemMetadata, replacedBy digest: ContentDigest?, in container: ContainerRef, db: Database) throws {
        guard item.kind == .file, let old = item.digest, old != digest, let revision = Int64(item.revision.rawValue) else { return }
        // The device comes from the item's row, which still holds the replaced content's.
        try db.cachedStatement(sql: """
            INSERT OR REPLACE INTO earlier_versions (container_key, item_id, revision, digest, size, modified, replaced, device)
            SELECT container_key, id, ?, ?, ?, ?, ?, saved_by FROM items WHERE container_key = ? AND id = ?
            """).execute(arguments: [revision, old.hex, item.size, item.modified, now(), container.key, item.id.rawValue])
    }

    public func earlierVersions(of id: ItemID, in container: ContainerRef) async throws -> [EarlierVersion] {
        try readNow { db in
            _ = try Self.requireLive(id, container, db)
            return try Row.fetchAll(
                try db.cachedStatement(sql: """
                    SELECT revision, digest, size, modified, replaced, device FROM earlier_versions
                    WHERE container_key = ? AND item_id = ? ORDER BY replaced DESC, revision DESC
                    """),
                arguments: [container.key, id.rawValue]
            ).map { row in
                EarlierVersion(revision: Revision(String(row["revision"] as Int64)), digest: try ContentDigest(hex: row["digest"]),
                               size: row["size"], modified: row["modified"], replaced: row["replaced"], device: row["device"])
            }
        }
    }

    public func restore(_ id: ItemID, base: Revision, from revision: Revision, in container: ContainerRef) async throws -> ItemMetadata {
        try await write { db in
            var item = try Self.requireFile(id, at: base, container, db)
            guard let number = Int64(revision.rawValue), let row = try Row.fetchOne(
                try db.cachedStatement(sql: "SELECT digest, size, modified, device FROM earlier_versions WHERE container_key = ? AND item_id = ? AND revision = ?"),
                arguments: [container.key, id.rawValue, number])
            else { throw StorageError.earlierVersionNotFound(revision) }
            try self.replaceContent(
                of: &item, with: try ContentDigest(hex: row["digest"]), size: row["size"], modified: row["modified"], savedBy: row["device"],
                in: container, db: db)
            return item
        }
    }

    public func forgetEarlierVersions(replacedBefore cutoff: Timestamp) async throws -> Int {
        try await write { db in
            try db.cachedStatement(sql: "DELETE FROM earlier_versions WHERE replaced < ?").execute(arguments: [cutoff])
            return db.changesCount
        }
    }

    public func updateItem(_ id: ItemID, base: Revision, update: ItemUpdate, in container: ContainerRef) async throws -> ItemMetadata {
        try await write { db in
            var item = try Self.requireLive(id, container, db)
            guard id != .root else { throw StorageError.rootIsImmutable }
            guard item.revision == base else { throw StorageError.revisionConflict(current: item) }
            let newParent = update.parentID ?? item.parentID!
            let newName = update.name?.rawValue ?? item.name
            if newParent != item.parentID {
                let parent = try Self.requireLive(newParent, container, db)
                guard parent.kind == .folder else { throw StorageError.notAFolder(newParent) }
                // Walk up from the destination: meeting the item means a move into itself.
                var cursor: ItemID? = newParent
                while let c = cursor {
                    if c == id { throw StorageError.invalidMove(id) }
                    cursor = try String.fetchOne(
                        try db.cachedStatement(sql: "SELECT parent_id FROM items WHERE container_key = ? AND id = ?"),
                        arguments: [container.key, c.rawValue]
                    ).map(ItemID.init(_:))
                }
            }
            if newParent != item.parentID || newName != item.name,
               let clash = try Self.liveChild(named: try ItemName(newName), of: newParent, container, db), clash.id != id {
                throw StorageError.nameExists(existing: clash)
            }
            item.parentID = newParent
            item.name = newName
            if let mode = update.mode { item.mode = mode }
            if let modified = update.modified { item.modified = modified }
            try Self.commit(&item, kind: .upsert, in: container, db: db)
            return item
        }
    }

    public func deleteItem(_ id: ItemID, base: Revision?, recursive: Bool, in container: ContainerRef) async throws -> [ItemMetadata] {
        try await write { db in
            let item = try Self.requireLive(id, container, db)
            guard id != .root else { throw StorageError.rootIsImmutable }
            if let base, item.revision != base { throw StorageError.revisionConflict(current: item) }
            let doomed = try ItemMetadata.deletionOrder(of: item) { folder in
                let kids = try Row.fetchAll(
                    try db.cachedStatement(sql: "SELECT * FROM items WHERE container_key = ? AND parent_id = ? AND deleted = 0"),
                    arguments: [container.key, folder.id.rawValue]
                ).map(Self.item(from:))
                if !kids.isEmpty && !recursive { throw StorageError.folderNotEmpty(folder.id) }
                return kids
            }
            var tombstones: [ItemMetadata] = []
            for item in doomed {
                var victim = item.tombstone
                try Self.commit(&victim, kind: .delete, in: container, db: db)
                tombstones.append(victim)
            }
            return tombstones
        }
    }

    public func setXattrs(_ id: ItemID, base: Revision?, xattrs: [String: Data], in container: ContainerRef) async throws -> ItemMetadata {
        try SyncedXattr.validateOrThrow(xattrs)
        return try await write { db in
            var item = try Self.requireLive(id, container, db)
            if let base, item.revision != base { throw StorageError.revisionConflict(current: item) }
            item.xattrs = xattrs
            try Self.commit(&item, kind: .upsert, in: container, db: db)
            return item
        }
    }

    public func addConflictVersion(_ id: ItemID, _ version: ConflictVersion, in container: ContainerRef) async throws -> ItemMetadata {
        guard ConflictVersion.isValidDevice(version.device) else { throw StorageError.invalidDevice(version.device) }
        return try await write { db in
            var item = try Self.requireLive(id, container, db)
            guard item.kind == .file else { throw StorageError.notAFile(id) }
            if item.conflicts.contains(where: { $0.id == version.id }) { return item }
            var kept = version
            kept.size = try Self.blobSize(version.digest, account: container.account, declared: version.size, db: db)
            item.conflicts.append(kept)
            try Self.commit(&item, kind: .upsert, in: container, db: db)
            return item
        }
    }

    public func resolveConflicts(_ id: ItemID, base: Revision, settled: Set<ItemID>, keep: ItemID?, copies: Set<ItemID>, in container: ContainerRef) async throws -> ItemMetadata {
        try await write { db in
            var item = try Self.requireLive(id, container, db)
            guard item.kind == .file, let parentID = item.parentID else { throw StorageError.notAFile(id) }
            guard item.revision == base else { throw StorageError.revisionConflict(current: item) }
            let made: [ConflictCopy]
            let before = item
            do {
                made = try item.conflictCopies(of: copies) { name in try Self.liveChild(named: try ItemName(name), of: parentID, container, db) != nil }
                try item.resolveConflicts(settled: settled.union(copies), keep: keep)
                try self.keepEarlier(before, replacedBy: item.digest, in: container, db: db)
            } catch let error as UnknownConflictVersion {
                throw StorageError.versionNotFound(error.id)
            }
            for copy in made {
                _ = try Self.insert(NewItem(
                    id: copy.id, parentID: parentID, name: try ItemName(copy.name), kind: .file, digest: copy.version.digest,
                    declaredSize: copy.version.size, mode: item.mode, created: copy.version.modified, modified: copy.version.modified,
                    xattrs: [:], savedBy: copy.version.device), in: container, db: db)
            }
            try Self.commit(&item, kind: .upsert, in: container, db: db)
            if let keep, let kept = before.conflicts.first(where: { $0.id == keep }) {
                try Self.setSavedBy(kept.device, of: id, in: container, db: db)
            }
            return item
        }
    }

    // MARK: Blobs

    public func recordBlob(_ digest: ContentDigest, size: Int64, for account: AccountRef) async throws {
        let granted = now()
        try await write { db in try Self.grant(digest, size: size, to: account, at: granted, db) }
    }

    /// Gives `account` the use of a stored blob (again), inside the caller's transaction.
    static func grant(_ digest: ContentDigest, size: Int64, to account: AccountRef, at granted: Timestamp, _ db: Database) throws {
        try db.cachedStatement(sql: """
            INSERT INTO account_blobs (account_key, digest, size, granted) VALUES (?, ?, ?, ?)
            ON CONFLICT (account_key, digest) DO UPDATE SET granted = excluded.granted
            """).execute(arguments: [account.key, digest.hex, size, granted])
    }

    public func renewBlob(_ digest: ContentDigest, for account: AccountRef) async throws -> Int64? {
        if digest == .empty { return 0 }
        let granted = now()
        return try await write { db in
            try db.cachedStatement(sql: "UPDATE account_blobs SET granted = ? WHERE account_key = ? AND digest = ?")
                .execute(arguments: [granted, account.key, digest.hex])
            return try Self.grantedSize(digest, for: account, db)
        }
    }

    public func forgetUnreferencedBlobs(grantedBefore cutoff: Timestamp) async throws -> Int {
        try await write { db in
            // What names a blob: live items, their conflict versions, earlier versions, shares.
            try db.execute(sql: """
                CREATE TEMP TABLE IF NOT EXISTS forgotten_blobs (digest TEXT PRIMARY KEY NOT NULL) WITHOUT ROWID;
                DELETE FROM forgotten_blobs;
                INSERT INTO forgotten_blobs
                    SELECT digest FROM account_blobs GROUP BY digest HAVING MAX(granted) < ?
                    EXCEPT SELECT digest FROM items WHERE deleted = 0 AND digest IS NOT NULL
                    EXCEPT SELECT json_extract(v.value, '$.digest') FROM items, json_each(items.conflicts) AS v
                        WHERE items.deleted = 0 AND items.conflicts IS NOT NULL
                    EXCEPT SELECT digest FROM earlier_versions
                    EXCEPT SELECT digest FROM share_entries;
                DELETE FROM account_blobs WHERE digest IN (SELECT digest FROM forgotten_blobs);
                DELETE FROM inline_contents WHERE digest IN (SELECT digest FROM forgotten_blobs);
                """, arguments: [cutoff])
            return try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM forgotten_blobs") ?? 0
        }
    }

    public func isGranted(_ digest: ContentDigest) async throws -> Bool {
        try readNow { db in
            try Bool.fetchOne(try db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM account_blobs WHERE digest = ?)"), arguments: [digest.hex]) ?? false
        }
    }

    /// The size of a blob `account` may use; nil when it may not (or no such blob).
    static func grantedSize(_ digest: ContentDigest, for account: AccountRef, _ db: Database) throws -> Int64? {
        try Int64.fetchOne(
            try db.cachedStatement(sql: "SELECT size FROM account_blobs WHERE account_key = ? AND digest = ?"),
            arguments: [account.key, digest.hex])
    }

    public func inlineContent(_ digest: ContentDigest) async throws -> Data? {
        try readNow { db in
            try Data.fetchOne(try db.cachedStatement(sql: "SELECT bytes FROM inline_contents WHERE digest = ?"), arguments: [digest.hex])
        }
    }

    public func blobSize(_ digest: ContentDigest, for account: AccountRef) async throws -> Int64? {
        if digest == .empty { return 0 }
        return try readNow { db in try Self.grantedSize(digest, for: account, db) }
    }

    // MARK: ChangeLog

    public func encodedChanges(in container: ContainerRef, since: ChangeCursor, limit: Int) async throws -> EncodedChangePage {
        guard let after = since.position else { throw StorageError.invalidCursor(since.rawValue) }
        let limit = max(1, limit)
        return try readNow { db in
            // A cursor this server never handed out (another server's, or from the future after
            // a restore) would silently skip changes: refuse it so the client starts over.
            let highest = try Int64.fetchOne(try db.cachedStatement(sql: "SELECT seq FROM sqlite_sequence WHERE name = 'changes'")) ?? 0
            if after > highest { throw StorageError.invalidCursor(since.rawValue) }
            let rows = try Row.fetchCursor(
                try db.cachedStatement(sql: "SELECT seq, kind, item_json FROM changes WHERE container_key = ? AND seq > ? ORDER BY seq LIMIT ?"),
                arguments: [container.key, after, limit + 1])
            var entries: [EncodedChangePage.Entry] = []
            var hasMore = false
            while let row = try rows.next() {
                guard entries.count < limit else {
                    hasMore = true
                    break
                }
                let seq: Int64 = row[0]
                let kind: String = row[1]
                guard let parsed = ItemChange.Kind(rawValue: kind) else { throw DatabaseError(message: "change \(seq) has kind '\(kind)'") }
                entries.append(.init(cursor: ChangeCursor(String(seq)), kind: parsed, item: row[2]))
            }
            return EncodedChangePage(entries: entries, cursor: entries.last?.cursor ?? since, hasMore: hasMore)
        }
    }

    public func entryCount() async throws -> Int {
        try readNow { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM changes") ?? 0 }
    }

    public func grantedContentBytes() async throws -> Int64 {
        try readNow { db in
            try Int64.fetchOne(db, sql: "SELECT COALESCE(SUM(size), 0) FROM (SELECT MAX(size) AS size FROM account_blobs GROUP BY digest)") ?? 0
        }
    }

    public func latestCursor(in container: ContainerRef) async throws -> ChangeCursor {
        try readNow { db in
            let seq = try Int64.fetchOne(try db.cachedStatement(sql: "SELECT MAX(seq) FROM changes WHERE container_key = ?"), arguments: [container.key])
            return ChangeCursor(String(seq ?? 0))
        }
    }

    // MARK: Helpers (all run inside a transaction)

    /// Gives the item its new revision and writes it together with its change-log entry.
    static func commit(_ item: inout ItemMetadata, kind: ItemChange.Kind, in container: ContainerRef, db: Database, isNew: Bool = false) throws {
        try db.cachedStatement(sql: "DELETE FROM changes WHERE container_key = ? AND item_id = ?").execute(arguments: [container.key, item.id.rawValue])
        try db.cachedStatement(sql: "INSERT INTO changes (container_key, item_id, kind, item_json) VALUES (?, ?, ?, x'')").execute(
            arguments: [container.key, item.id.rawValue, kind.rawValue])
        let seq = db.lastInsertedRowID
        item.revision = Revision(String(seq))
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        try db.cachedStatement(sql: "UPDATE changes SET item_json = ? WHERE seq = ?").execute(arguments: [try encoder.encode(item), seq])
        let xattrs = try encoder.encode(item.xattrs)
        let conflicts = item.conflicts.isEmpty ? nil : try encoder.encode(item.conflicts)
        let args: StatementArguments = [
            item.parentID?.rawValue, item.name, item.kind.rawValue, seq, item.size, item.digest?.hex,
            Int64(item.mode), item.created, item.modified, xattrs, conflicts, item.deleted ? 1 : 0, item.target, container.key, item.id.rawValue,
        ]
        if isNew {
            try db.cachedStatement(sql: """
                INSERT INTO items (parent_id, name, kind, revision, size, digest, mode, created, modified, xattrs, conflicts, deleted, target, container_key, id)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                """).execute(arguments: args)
        } else {
            try db.cachedStatement(sql: """
                UPDATE items SET parent_id = ?, name = ?, kind = ?, revision = ?, size = ?, digest = ?, mode = ?,
                created = ?, modified = ?, xattrs = ?, conflicts = ?, deleted = ?, target = ? WHERE container_key = ? AND id = ?
                """).execute(arguments: args)
        }
    }

    static func anyItem(_ id: ItemID, _ container: ContainerRef, _ db: Database) throws -> ItemMetadata? {
        try Row.fetchOne(try db.cachedStatement(sql: "SELECT * FROM items WHERE container_key = ? AND id = ?"), arguments: [container.key, id.rawValue])
            .map(item(from:))
    }

    static func liveItem(_ id: ItemID, _ container: ContainerRef, _ db: Database) throws -> ItemMetadata? {
        guard let item = try anyItem(id, container, db), !item.deleted else { return nil }
        return item
    }

    static func requireLive(_ id: ItemID, _ container: ContainerRef, _ db: Database) throws -> ItemMetadata {
        guard let item = try liveItem(id, container, db) else { throw StorageError.itemNotFound(id) }
        return item
    }

    static func liveChild(named name: ItemName, of parent: ItemID, _ container: ContainerRef, _ db: Database) throws -> ItemMetadata? {
        try Row.fetchOne(
            try db.cachedStatement(sql: "SELECT * FROM items WHERE container_key = ? AND parent_id = ? AND name = ? AND deleted = 0"),
            arguments: [container.key, parent.rawValue, name.rawValue]
        ).map(item(from:))
    }

    static func blobSize(_ digest: ContentDigest, account: AccountRef, declared: Int64?, db: Database) throws -> Int64 {
        let size: Int64
        if digest == .empty {
            size = 0
        } else {
            guard let s = try grantedSize(digest, for: account, db) else { throw StorageError.blobNotFound(digest) }
            size = s
        }
        if let declared, declared != size { throw StorageError.sizeMismatch(declared: declared, actual: size) }
        return size
    }

    static func item(from row: Row) throws -> ItemMetadata {
        let xattrs = try JSONDecoder().decode([String: Data].self, from: row["xattrs"] as Data)
        let conflicts = try (row["conflicts"] as Data?).map { try JSONDecoder().decode([ConflictVersion].self, from: $0) } ?? []
        let digest: String? = row["digest"]
        let parent: String? = row["parent_id"]
        let revision: Int64 = row["revision"]
        let mode: Int64 = row["mode"]
        return ItemMetadata(
            id: ItemID(row["id"] as String), parentID: parent.map(ItemID.init(_:)), name: row["name"],
            kind: ItemKind(rawValue: row["kind"])!, revision: Revision(String(revision)), size: row["size"],
            digest: try digest.map { try ContentDigest(hex: $0) }, mode: UInt32(truncatingIfNeeded: mode),
            created: row["created"], modified: row["modified"], xattrs: xattrs, deleted: (row["deleted"] as Int64) != 0,
            conflicts: conflicts, target: row["target"])
    }
}

extension SyncedXattr {
    static func validateOrThrow(_ xattrs: [String: Data]) throws(StorageError) {
        do { try validate(xattrs) } catch { throw .invalidXattr(error) }
    }
}

/// Account names: what a user types at a login prompt, safe in logs and paths.
public enum AccountName {
    public static func validate(_ name: String) throws(StorageError) {
        let ok = (1...64).contains(name.utf8.count) && name.utf8.allSatisfy { b in
            (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
                || b == UInt8(ascii: ".") || b == UInt8(ascii: "_") || b == UInt8(ascii: "-") || b == UInt8(ascii: "@")
        }
        guard ok else { throw .invalidAccountName(name) }
    }
}
