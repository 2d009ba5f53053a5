import Foundation
import GRDB
import ItemModel
import SchemaEdit

extension LocalStore {
    static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("v1") { db in
            try db.execute(sql: """
                CREATE TABLE items (
                    ino INTEGER PRIMARY KEY AUTOINCREMENT,
                    item_id TEXT NOT NULL UNIQUE,
                    parent INTEGER REFERENCES items(ino),
                    name TEXT NOT NULL,
                    kind TEXT NOT NULL CHECK (kind IN ('file', 'folder')),
                    size INTEGER NOT NULL CHECK (size >= 0),
                    mode INTEGER NOT NULL,
                    uid INTEGER NOT NULL,
                    gid INTEGER NOT NULL,
                    created INTEGER NOT NULL,
                    modified INTEGER NOT NULL,
                    changed INTEGER NOT NULL,
                    xattrs BLOB NOT NULL,
                    revision TEXT,
                    server_digest TEXT,
                    content TEXT NOT NULL CHECK (content IN ('placeholder', 'partial', 'current', 'stale', 'dirty')),
                    cached_bytes INTEGER NOT NULL DEFAULT 0,
                    pinned INTEGER NOT NULL DEFAULT 0,
                    last_access INTEGER NOT NULL DEFAULT 0,
                    download_error TEXT,
                    upload_error TEXT,
                    CHECK ((parent IS NULL) = (ino = 1))
                );
                CREATE UNIQUE INDEX items_by_name ON items(parent, name);
                CREATE TABLE outbox (
                    seq INTEGER PRIMARY KEY AUTOINCREMENT,
                    ino INTEGER NOT NULL,
                    op TEXT NOT NULL,
                    item_id TEXT,
                    revision TEXT,
                    attempts INTEGER NOT NULL DEFAULT 0,
                    last_error TEXT,
                    not_before INTEGER NOT NULL DEFAULT 0
                );
                CREATE INDEX outbox_by_ino ON outbox(ino);
                -- Remote items whose parent has not arrived yet (the change log may list a child
                -- before a parent that changed later).
                CREATE TABLE orphans (
                    item_id TEXT PRIMARY KEY NOT NULL,
                    parent_id TEXT NOT NULL,
                    json BLOB NOT NULL
                );
                CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
                """)
            let now = Int64(Date().timeIntervalSince1970 * 1e9)
            try db.execute(
                sql: """
                    INSERT INTO items (ino, item_id, parent, name, kind, size, mode, uid, gid, created, modified, changed, xattrs, content)
                    VALUES (1, 'root', NULL, '', 'folder', 0, 493, 0, 0, ?, ?, ?, x'7b7d', 'current')
                    """,
                arguments: [now, now, now])
        }
        m.registerMigration("v2: tombstones") { db in
            // Items this device deleted on the server, until the deletion's own echo arrives:
            // an older state of them still on its way must not bring them back.
            try db.execute(sql: "CREATE TABLE tombstones (item_id TEXT PRIMARY KEY NOT NULL, revision TEXT NOT NULL)")
        }
        m.registerMigration("v3: indexes for per-change questions") { db in
            // Asked after every close (pins to download) and for every incoming change (a
            // deletion on its way): without these, each was a scan of every item or every
            // queued change. Partial indexes: only the few rows that answer yes are in them.
            try db.execute(sql: """
                CREATE INDEX items_pinned_needing_content ON items(ino)
                    WHERE kind = 'file' AND pinned = 1 AND content IN ('placeholder', 'partial', 'stale');
                CREATE INDEX outbox_deletes_by_item ON outbox(item_id) WHERE op = 'delete';
                """)
        }
        m.registerMigration("v4: attribute names changed here") { db in
            // The names of the synced attributes changed on this device and not yet on the
            // server. A change refused because the item changed on the server meanwhile then
            // merges name by name: these from here, every other name from the server.
            try db.execute(sql: "CREATE TABLE xattr_changes (ino INTEGER NOT NULL, name TEXT NOT NULL, PRIMARY KEY (ino, name)) WITHOUT ROWID")
        }
        m.registerMigration("v5: contents sent in creates") { db in
            // The digests this device sent in creates of a file whose answer it has not
            // recorded. When such a create landed and its answer was lost (a crash, a dropped
            // connection) and the file changed here since, the retry is refused (the id is
            // taken): the server's item is ours if it holds one of these.
            try db.execute(sql: "CREATE TABLE sent_creates (ino INTEGER NOT NULL, digest TEXT NOT NULL, PRIMARY KEY (ino, digest)) WITHOUT ROWID")
        }
        m.registerMigration("v6: download requests") { db in
            // Files `ubiq download` (startDownloadingUbiquitousItem) asked for and that are not
            // here yet: the background downloads them a few at a time, also after a restart.
            try db.execute(sql: "CREATE TABLE download_requests (ino INTEGER PRIMARY KEY REFERENCES items(ino) ON DELETE CASCADE)")
        }
        m.registerMigration("v7: place of the first create sent") { db in
            // The folder and name the first create of an item went with, until an answer is
            // recorded. When a create landed, its answer was lost and another device then
            // moved the item, the retry is refused (the server's item no longer matches it):
            // a server place other than this one was chosen elsewhere. Only the first: a retry
            // sent after a rename here may be the one refused, and never landed.
            try db.execute(sql: "CREATE TABLE first_create_places (ino INTEGER PRIMARY KEY, parent_id TEXT NOT NULL, name TEXT NOT NULL)")
            // Items whose create may have gone before this table existed: their first place is
            // unknown, which an empty name (never a real one) stands for, so that a retry does
            // not take itself for the first create.
            try db.execute(sql: "INSERT INTO first_create_places (ino, parent_id, name) SELECT ino, '', '' FROM items WHERE revision IS NULL AND ino != 1")
        }
        m.registerMigration("v8: server changes held for an answer") { db in
            // The newest server change of an item that arrived while this device's own change
            // of it was unanswered. The feed leaves such an item to the answer, but an answer
            // made before another device's change does not hold it, and the feed has moved
            // past it: applied once the answer is recorded, if it is newer.
            try db.execute(sql: "CREATE TABLE held_changes (item_id TEXT PRIMARY KEY NOT NULL, revision TEXT NOT NULL, json BLOB NOT NULL)")
        }
        m.registerMigration("v9: conflict versions") { db in
            // JSON of the server's unresolved conflict versions of the file; NULL when none.
            try db.execute(sql: "ALTER TABLE items ADD COLUMN conflicts BLOB")
        }
        m.registerMigration("v10: conflict resolutions on their way") { db in
            // A resolution chosen here (JSON of ConflictResolution) until the server has it.
            try db.execute(sql: "CREATE TABLE resolutions (ino INTEGER PRIMARY KEY, json BLOB NOT NULL)")
        }
        m.registerMigration("v11: contents sent, by server item") { db in
            // A safe save gives a file's server identity to another row while the replaced
            // row's upload is on its way: a refusal of the new row's upload must still know
            // that content as this device's own, so the digests are also kept by item.
            try db.execute(sql: "ALTER TABLE sent_creates ADD COLUMN item_id TEXT")
            try db.execute(sql: "UPDATE sent_creates SET item_id = (SELECT item_id FROM items WHERE items.ino = sent_creates.ino)")
            try db.execute(sql: "CREATE INDEX sent_creates_by_item ON sent_creates (item_id)")
        }
        m.registerMigration("v12: the versions folder") { db in
            // The read-only folder that shows conflict versions as files (see
            // `LocalItem.versionsFolderName`): a local-only row under the root, under a name no
            // item can have, so that no item of the container ever meets it.
            try db.execute(
                sql: """
                    INSERT INTO items (item_id, parent, name, kind, size, mode, uid, gid, created, modified, changed, xattrs, content)
                    SELECT ?, 1, ?, 'folder', 0, 365, uid, gid, created, created, created, x'7b7d', 'current' FROM items WHERE ino = 1
                    """,
                arguments: [ItemID.random().rawValue, LocalItem.versionsFolderName])
        }
        m.registerMigration("v13: plain names") { db in
            // 1 when the name is ASCII without a carriage return: then NFC, diacritic folding and
            // grapheme breaks change nothing in it, and SQLite's own GLOB and LIKE compare it as a
            // query does (see MetadataIndex's SQLCompiler). Kept by triggers, so that no writer
            // has to know; asking SQLite per row instead cost more than the comparison itself.
            let plain = "(length(CAST(NEW.name AS BLOB)) = length(NEW.name) AND instr(NEW.name, char(13)) = 0)"
            try db.execute(sql: """
                ALTER TABLE items ADD COLUMN plain_name INTEGER NOT NULL DEFAULT 0;
                UPDATE items SET plain_name = (length(CAST(name AS BLOB)) = length(name) AND instr(name, char(13)) = 0);
                CREATE TRIGGER items_plain_name_on_insert AFTER INSERT ON items BEGIN
                    UPDATE items SET plain_name = \(plain) WHERE ino = NEW.ino;
                END;
                CREATE TRIGGER items_plain_name_on_rename AFTER UPDATE OF name ON items WHEN OLD.name IS NOT NEW.name BEGIN
                    UPDATE items SET plain_name = \(plain) WHERE ino = NEW.ino;
                END;
                """)
        }
        m.registerMigration("v14: indexes for queries") { db in
            // `downloadingStatus == …` becomes a condition on content and kind (with the parent,
            // the versions folder's test needs no row); the excluded items start from the few
            // `.nosync` names, found without reading every name.
            try db.execute(sql: """
                CREATE INDEX items_by_content ON items(content, kind, parent);
                CREATE INDEX items_nosync ON items(ino) WHERE name GLOB '*.nosync';
                """)
        }
        m.registerMigration("v15: the key-value store's mirror") { db in
            // The server's store as last read (`value` NULL: removed there at `version`, kept so
            // that an older answer arriving late cannot bring the key back), and this device's
            // writes not yet on the server (`value` NULL: a removal). A key has one write at most:
            // a newer write replaces the older one, and takes a new `seq`, so that the answer to
            // the older one, arriving meanwhile, does not settle it.
            try db.execute(sql: """
                CREATE TABLE key_values (key TEXT PRIMARY KEY, version INTEGER NOT NULL, value BLOB);
                CREATE TABLE key_value_writes (seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, value BLOB);
                """)
        }
        m.registerMigration("v16: name keys") { db in
            // A plain name lowercased and reversed (`NameKey`), so that `name LIKE[c] '*.txt'`
            // reads a range of this index instead of every name. Kept by triggers with the
            // function each connection registers (`LocalStore`), so that no writer has to know.
            try db.execute(sql: """
                ALTER TABLE items ADD COLUMN name_key TEXT;
                UPDATE items SET name_key = \(NameKey.function)(name);
                CREATE TRIGGER items_name_key_on_insert AFTER INSERT ON items BEGIN
                    UPDATE items SET name_key = \(NameKey.function)(NEW.name) WHERE ino = NEW.ino;
                END;
                CREATE TRIGGER items_name_key_on_rename AFTER UPDATE OF name ON items WHEN OLD.name IS NOT NEW.name BEGIN
                    UPDATE items SET name_key = \(NameKey.function)(NEW.name) WHERE ino = NEW.ino;
                END;
                CREATE INDEX items_by_name_key ON items(plain_name, name_key);
                """)
        }
        m.registerMigration("v17: name columns given at insert") { db in
            // The mount's inserts give `plain_name` and `name_key` themselves: the two triggers
            // each rewrote every new row (and its index entries) once more, half of what an
            // insert cost on a first sync. One trigger stays, for an insert that gives neither.
            try db.execute(sql: """
                DROP TRIGGER items_plain_name_on_insert;
                DROP TRIGGER items_name_key_on_insert;
                CREATE TRIGGER items_name_columns_on_insert AFTER INSERT ON items WHEN NEW.plain_name = 0 AND NEW.name_key IS NULL BEGIN
                    UPDATE items SET plain_name = (length(CAST(NEW.name AS BLOB)) = length(NEW.name) AND instr(NEW.name, char(13)) = 0),
                        name_key = \(NameKey.function)(NEW.name) WHERE ino = NEW.ino;
                END;
                """)
        }
        m.registerMigration("v18: totals") { db in
            // The number of items and the bytes cached, kept by triggers: `ubiq status`, `df`
            // and `ubiq mount` waiting out a first sync (which asks 50 times a second) counted
            // every row each time, 30 ms at 100,000 items and a core's worth while it waited.
            try db.execute(sql: """
                CREATE TABLE totals (id INTEGER PRIMARY KEY CHECK (id = 1), items INTEGER NOT NULL, cached_bytes INTEGER NOT NULL);
                INSERT INTO totals VALUES (1, (SELECT COUNT(*) FROM items), (SELECT COALESCE(SUM(cached_bytes), 0) FROM items));
                CREATE TRIGGER totals_on_insert AFTER INSERT ON items BEGIN
                    UPDATE totals SET items = items + 1, cached_bytes = cached_bytes + NEW.cached_bytes WHERE id = 1;
                END;
                CREATE TRIGGER totals_on_delete AFTER DELETE ON items BEGIN
                    UPDATE totals SET items = items - 1, cached_bytes = cached_bytes - OLD.cached_bytes WHERE id = 1;
                END;
                CREATE TRIGGER totals_on_cached_bytes AFTER UPDATE OF cached_bytes ON items WHEN OLD.cached_bytes IS NOT NEW.cached_bytes BEGIN
                    UPDATE totals SET cached_bytes = cached_bytes + NEW.cached_bytes - OLD.cached_bytes WHERE id = 1;
                END;
                """)
        }
        m.registerMigration("v19: counts by state, covering name keys, folders") { db in
            // `downloadingStatus == 'notDownloaded'` counted every entry of `items_by_content`
            // (8 to 11 ms at 100,000 items before any other check): the rows of each kind and
            // content state, kept by triggers, answer it with the few excluded rows taken off
            // (`LocalReader.count(downloadingStatuses:)`). The name keys carry the parent, so
            // that a count of `name LIKE[c] '*.txt'` reads no row; the folders have their own
            // small index, so that giving results their paths reads no row either.
            try db.execute(sql: """
                CREATE TABLE status_totals (kind TEXT NOT NULL, content TEXT NOT NULL, items INTEGER NOT NULL, PRIMARY KEY (kind, content)) WITHOUT ROWID;
                WITH kinds(kind) AS (VALUES ('file'), ('folder')),
                     contents(content) AS (VALUES ('placeholder'), ('current'), ('stale'), ('dirty'))
                INSERT INTO status_totals SELECT kind, content, (SELECT COUNT(*) FROM items i WHERE i.kind = k.kind AND i.content = c.content)
                    FROM kinds AS k, contents AS c;
                CREATE TRIGGER status_totals_on_insert AFTER INSERT ON items BEGIN
                    UPDATE status_totals SET items = items + 1 WHERE kind = NEW.kind AND content = NEW.content;
                END;
                CREATE TRIGGER status_totals_on_delete AFTER DELETE ON items BEGIN
                    UPDATE status_totals SET items = items - 1 WHERE kind = OLD.kind AND content = OLD.content;
                END;
                CREATE TRIGGER status_totals_on_change AFTER UPDATE OF kind, content ON items
                WHEN OLD.kind IS NOT NEW.kind OR OLD.content IS NOT NEW.content BEGIN
                    UPDATE status_totals SET items = items - 1 WHERE kind = OLD.kind AND content = OLD.content;
                    UPDATE status_totals SET items = items + 1 WHERE kind = NEW.kind AND content = NEW.content;
                END;
                DROP INDEX items_by_name_key;
                CREATE INDEX items_by_name_key ON items(plain_name, name_key, parent);
                CREATE INDEX items_folders ON items(parent, name) WHERE kind = 'folder';
                """)
        }
        m.registerMigration("v20: symbolic links, FIFOs and sockets") { db in
            // A link's target, NULL for every other kind; a link's create is the folders' op,
            // renamed for both. FIFOs and sockets are local-only
            // (never sent, status `excluded`): their few rows have a partial index of their
            // own, so that the excluded items' table finds them without reading every row.
            try db.execute(sql: "ALTER TABLE items ADD COLUMN target TEXT")
            try SchemaEdit.widenCheck(
                of: "items", from: "CHECK (kind IN ('file', 'folder'))",
                to: "CHECK (kind IN ('file', 'folder', 'symlink', 'fifo', 'socket'))", db)
            try db.execute(sql: """
                WITH kinds(kind) AS (VALUES ('symlink'), ('fifo'), ('socket')),
                     contents(content) AS (VALUES ('placeholder'), ('current'), ('stale'), ('dirty'))
                INSERT INTO status_totals SELECT kind, content, 0 FROM kinds, contents;
                CREATE INDEX items_local_only ON items(ino) WHERE kind IN ('fifo', 'socket');
                UPDATE outbox SET op = 'create' WHERE op = 'createFolder';
                """)
        }
        m.registerMigration("v21: shares known here") { db in
            // The links of the container's shares as this mount last heard of them
            // (`KnownShare`), for `user.ubiq.shares`.
            try db.execute(sql: """
                CREATE TABLE known_shares (token TEXT PRIMARY KEY NOT NULL, item_id TEXT NOT NULL, url TEXT NOT NULL, expires INTEGER);
                CREATE INDEX known_shares_by_item ON known_shares(item_id);
                """)
        }
        m.registerMigration("v22: inserts counted by their writer") { db in
            // A writer inserting many rows counts them itself (`InsertTotals`); the insert
            // triggers count the rest.
            let condition = "WHEN \(InsertTotals.triggerCondition)()"
            try db.execute(sql: """
                DROP TRIGGER totals_on_insert;
                DROP TRIGGER status_totals_on_insert;
                CREATE TRIGGER totals_on_insert AFTER INSERT ON items \(condition) BEGIN
                    UPDATE totals SET items = items + 1, cached_bytes = cached_bytes + NEW.cached_bytes WHERE id = 1;
                END;
                CREATE TRIGGER status_totals_on_insert AFTER INSERT ON items \(condition) BEGIN
                    UPDATE status_totals SET items = items + 1 WHERE kind = NEW.kind AND content = NEW.content;
                END;
                """)
        }
        m.registerMigration("v23: contents of creates deleted before their answer") { db in
            // A row that leaves a server item whose create may be on its way (deleted here, or a
            // safe save gave it another identity) keeps what it sent there by item until that
            // item's deletion is settled (`LocalWriter.abandonSentContents`).
            try db.execute(sql: "CREATE TABLE abandoned_creates (item_id TEXT NOT NULL, digest TEXT NOT NULL, PRIMARY KEY (item_id, digest)) WITHOUT ROWID")
        }
        return m
    }
}

/// The key of a plain name (ASCII without a carriage return, `plain_name`): lowercased and
/// reversed, so that the names ending in a given suffix, of any case, are one range of keys
/// (those starting with the suffix reversed). Nil for any other name: those are compared one
/// by one, as Unicode asks.
public enum NameKey {
    static let function = "ubiq_name_key"

    public static func of(_ name: String) -> String? {
        let scalars = name.unicodeScalars
        guard scalars.allSatisfy({ $0.isASCII && $0 != "\r" }) else { return nil }
        return String(String.UnicodeScalarView(scalars.reversed().map { s in
            (0x41...0x5A).contains(s.value) ? Unicode.Scalar(s.value + 0x20)! : s
        }))
    }

    /// The range of keys of the names that end in `suffix` (plain, any case): keys from the
    /// suffix reversed and lowercased, up to the first string after every one that starts so.
    public static func range(endingIn suffix: String) -> (low: String, high: String)? {
        guard !suffix.isEmpty, let low = of(suffix), let last = low.unicodeScalars.last, last.value < 0x7F else { return nil }
        var high = String(low.unicodeScalars.dropLast())
        high.unicodeScalars.append(Unicode.Scalar(last.value + 1)!)
        return (low, high)
    }

    /// `ubiq_name_key(name)`, for the triggers that keep `name_key`.
    static let sqlFunction = DatabaseFunction(function, argumentCount: 1, pure: true) { values in
        String.fromDatabaseValue(values[0]).flatMap(of)
    }
}
