import Foundation
import ItemModel
import PostgresNIO
import ServerStorage

/// Every row out (`exportAll`, one snapshot) and a whole dump in (`importAll`, one transaction
/// into an empty database): what `ubiq-server migrate` copies and then compares.
extension PostgresMetadataStore: MetadataExporting, MetadataImporting {
    public func exportAll() async throws -> MetadataDump {
        try await readSnapshot { tx in
            var d = MetadataDump()
            for row in try await tx.rows("SELECT key, name, password_hash, created, identity FROM accounts") {
                let (key, name, hash, created, identity) = try row.decode((Int64, String, String, Int64, String).self)
                d.accounts.append(.init(key: key, name: name, passwordHash: hash, created: created, identity: identity))
            }
            for row in try await tx.rows("SELECT hash, account_key, created, device, used, expires FROM tokens") {
                let (hash, account, created, device, used, expires) = try row.decode((String, Int64, Int64, String?, Int64, Int64).self)
                d.tokens.append(.init(hash: hash, accountKey: account, created: created, device: device, used: used, expires: expires))
            }
            for row in try await tx.rows("SELECT key, account_key, name, created, change_seq, kv_version FROM containers") {
                let (key, account, name, created, cursor, version) = try row.decode((Int64, Int64, String, Int64, Int64, Int64).self)
                d.containers.append(.init(key: key, accountKey: account, name: name, created: created, changeCursor: cursor, keyValueVersion: version))
            }
            for row in try await tx.rows("SELECT container_key, saved_by, \(unescaped: PostgresRows.itemColumns) FROM items") {
                let r = row.makeRandomAccess()
                d.items.append(.init(containerKey: try r["container_key"].decode(Int64.self), item: try PostgresRows.item(from: row), savedBy: try r["saved_by"].decode(String?.self)))
            }
            for row in try await tx.rows("SELECT container_key, seq, item_id, kind, item_json FROM changes") {
                let (container, seq, id, kind, json) = try row.decode((Int64, Int64, String, String, ByteBuffer).self)
                d.changes.append(.init(containerKey: container, seq: seq, itemID: id, kind: kind, itemJSON: Data(buffer: json)))
            }
            for row in try await tx.rows("SELECT account_key, digest, size, granted FROM account_blobs") {
                let (account, digest, size, granted) = try row.decode((Int64, String, Int64, Int64).self)
                d.grants.append(.init(accountKey: account, digest: digest, size: size, granted: granted))
            }
            for row in try await tx.rows("SELECT digest, bytes FROM inline_contents") {
                let (digest, bytes) = try row.decode((String, ByteBuffer).self)
                d.inlineContents.append(.init(digest: digest, bytes: Data(buffer: bytes)))
            }
            for row in try await tx.rows("SELECT container_key, item_id, revision, digest, size, modified, replaced, device FROM earlier_versions") {
                let (container, id, revision, digest, size, modified, replaced, device) =
                    try row.decode((Int64, String, Int64, String, Int64, Int64, Int64, String?).self)
                d.earlierVersions.append(
                    .init(containerKey: container, itemID: id, revision: revision, digest: digest, size: size, modified: modified, replaced: replaced, device: device))
            }
            for row in try await tx.rows("SELECT container_key, key, version, value, removed FROM key_values") {
                let (container, key, version, value, removed) = try row.decode((Int64, ByteBuffer, Int64, ByteBuffer, Bool).self)
                d.keyValues.append(.init(containerKey: container, key: Data(buffer: key), version: version, value: Data(buffer: value), removed: removed))
            }
            for row in try await tx.rows("SELECT token, container_key, item_id, name, kind, created, expires, downloads FROM shares") {
                let (token, container, id, name, kind, created, expires, downloads) =
                    try row.decode((String, Int64, String, String, String, Int64, Int64?, Int64).self)
                d.shares.append(
                    .init(token: token, containerKey: container, itemID: id, name: name, kind: kind, created: created, expires: expires, downloads: downloads))
            }
            for row in try await tx.rows("SELECT token, path, digest, size, modified FROM share_entries") {
                let (token, path, digest, size, modified) = try row.decode((String, String, String, Int64, Int64).self)
                d.shareEntries.append(.init(token: token, path: path, digest: digest, size: size, modified: modified))
            }
            for row in try await tx.rows("SELECT digest, queued FROM blob_deletions") {
                let (digest, queued) = try row.decode((String, Int64).self)
                d.pendingDeletions.append(.init(digest: digest, queued: queued))
            }
            return d.sorted()
        }
    }

    /// A database that holds anything already is refused: the copy would mix with it.
    public func importAll(_ dump: MetadataDump) async throws {
        let items = try Self.parentsFirst(dump.items)
        try await write { tx in
            let held = try await tx.rows("SELECT (SELECT COUNT(*) FROM accounts) + (SELECT COUNT(*) FROM blob_deletions)")[0].decode(Int64.self)
            guard held == 0 else { throw ImportRefused("the PostgreSQL database already holds accounts or contents: copy into an empty one") }
            for a in dump.accounts {
                try await tx.run("""
                    INSERT INTO accounts (key, name, password_hash, created, identity) OVERRIDING SYSTEM VALUE
                    VALUES (\(a.key), \(a.name), \(a.passwordHash), \(a.created), \(a.identity))
                    """)
            }
            for t in dump.tokens {
                try await tx.run("""
                    INSERT INTO tokens (hash, account_key, created, device, used, expires)
                    VALUES (\(t.hash), \(t.accountKey), \(t.created), \(t.device), \(t.used), \(t.expires))
                    """)
            }
            for c in dump.containers {
                try await tx.run("""
                    INSERT INTO containers (key, account_key, name, created, change_seq, kv_version) OVERRIDING SYSTEM VALUE
                    VALUES (\(c.key), \(c.accountKey), \(c.name), \(c.created), \(c.changeCursor), \(c.keyValueVersion))
                    """)
            }
            // Identities go on after the highest key copied.
            for table in ["accounts", "containers"] {
                try await tx.run("""
                    SELECT setval(pg_get_serial_sequence('\(unescaped: table)', 'key'), k) FROM (SELECT MAX(key) AS k FROM \(unescaped: table)) m WHERE k IS NOT NULL
                    """)
            }
            // The two long tables go a thousand rows a statement (a round trip per row was most
            // of a migration's metadata time). Foreign keys are checked at each statement's end,
            // and the items come parents first, so each batch finds its folders.
            var itemRows: [[String: Any]] = []
            itemRows.reserveCapacity(items.count)
            for entry in items {
                let item = entry.item
                guard let revision = item.revision.sequenceNumber else { throw ImportRefused("item \(item.id.rawValue) has the revision '\(item.revision.rawValue)', not a number") }
                itemRows.append([
                    "container_key": entry.containerKey, "id": item.id.rawValue, "parent_id": item.parentID?.rawValue ?? NSNull(), "name": item.name,
                    "kind": item.kind.rawValue, "revision": revision, "size": item.size, "digest": item.digest?.hex ?? NSNull(), "mode": Int64(item.mode),
                    "created": item.created, "modified": item.modified, "xattrs": try PostgresRows.json(item.xattrs),
                    "conflicts": item.conflicts.isEmpty ? NSNull() : try PostgresRows.json(item.conflicts), "deleted": item.deleted,
                    "saved_by": entry.savedBy ?? NSNull(), "target": item.target ?? NSNull(),
                ])
            }
            try await Self.insertInBatches(itemRows, tx) { rows in
                """
                INSERT INTO items (container_key, id, parent_id, name, kind, revision, size, digest, mode, created, modified, xattrs, conflicts, deleted, saved_by, target)
                SELECT container_key, id, parent_id, name, kind, revision, size, digest, mode, created, modified, xattrs::jsonb, conflicts::jsonb, deleted, saved_by, target
                FROM jsonb_to_recordset(\(rows)::jsonb) AS r(container_key bigint, id text, parent_id text, name text, kind text, revision bigint, size bigint,
                    digest text, mode bigint, created bigint, modified bigint, xattrs text, conflicts text, deleted boolean, saved_by text, target text)
                """
            }
            let changeRows: [[String: Any]] = dump.changes.map {
                ["container_key": $0.containerKey, "seq": $0.seq, "item_id": $0.itemID, "kind": $0.kind, "item_json": $0.itemJSON.base64EncodedString()]
            }
            try await Self.insertInBatches(changeRows, tx) { rows in
                """
                INSERT INTO changes (container_key, seq, item_id, kind, item_json)
                SELECT container_key, seq, item_id, kind, decode(item_json, 'base64')
                FROM jsonb_to_recordset(\(rows)::jsonb) AS r(container_key bigint, seq bigint, item_id text, kind text, item_json text)
                """
            }
            for g in dump.grants {
                try await tx.run("INSERT INTO account_blobs (account_key, digest, size, granted) VALUES (\(g.accountKey), \(g.digest), \(g.size), \(g.granted))")
            }
            for i in dump.inlineContents {
                try await tx.run("INSERT INTO inline_contents (digest, bytes) VALUES (\(i.digest), \(i.bytes))")
            }
            for v in dump.earlierVersions {
                try await tx.run("""
                    INSERT INTO earlier_versions (container_key, item_id, revision, digest, size, modified, replaced, device)
                    VALUES (\(v.containerKey), \(v.itemID), \(v.revision), \(v.digest), \(v.size), \(v.modified), \(v.replaced), \(v.device))
                    """)
            }
            for k in dump.keyValues {
                try await tx.run("""
                    INSERT INTO key_values (container_key, key, version, value, removed) VALUES (\(k.containerKey), \(k.key), \(k.version), \(k.value), \(k.removed))
                    """)
            }
            for s in dump.shares {
                try await tx.run("""
                    INSERT INTO shares (token, container_key, item_id, name, kind, created, expires, downloads)
                    VALUES (\(s.token), \(s.containerKey), \(s.itemID), \(s.name), \(s.kind), \(s.created), \(s.expires), \(s.downloads))
                    """)
            }
            for e in dump.shareEntries {
                try await tx.run("""
                    INSERT INTO share_entries (token, path, digest, size, modified) VALUES (\(e.token), \(e.path), \(e.digest), \(e.size), \(e.modified))
                    """)
            }
            for p in dump.pendingDeletions {
                try await tx.run("INSERT INTO blob_deletions (digest, queued) VALUES (\(p.digest), \(p.queued))")
            }
        }
    }

    static let batchSize = 1_000

    /// `rows` (column name to value, nil as `NSNull`) a batch at a time, each batch handed to
    /// `statement` as one JSON array for `jsonb_to_recordset`.
    static func insertInBatches(_ rows: [[String: Any]], _ tx: Transaction, _ statement: (String) -> PostgresQuery) async throws {
        for start in stride(from: 0, to: rows.count, by: batchSize) {
            let batch = Array(rows[start..<min(rows.count, start + batchSize)])
            try await tx.run(statement(String(decoding: try JSONSerialization.data(withJSONObject: batch), as: UTF8.self)))
        }
    }

    /// The items with each folder before what it holds (the parent is a foreign key, checked
    /// at each insert). Throws for an item whose folder is not among them.
    static func parentsFirst(_ items: [MetadataDump.Item]) throws -> [MetadataDump.Item] {
        var children: [Int64: [String: [MetadataDump.Item]]] = [:]
        var ordered: [MetadataDump.Item] = []
        ordered.reserveCapacity(items.count)
        for entry in items {
            if let parent = entry.item.parentID {
                children[entry.containerKey, default: [:]][parent.rawValue, default: []].append(entry)
            } else {
                ordered.append(entry)
            }
        }
        var next = 0
        while next < ordered.count {
            let entry = ordered[next]
            next += 1
            ordered += children[entry.containerKey]?[entry.item.id.rawValue] ?? []
        }
        guard ordered.count == items.count else {
            throw ImportRefused("\(items.count - ordered.count) items lie in folders the store does not hold")
        }
        return ordered
    }
}
