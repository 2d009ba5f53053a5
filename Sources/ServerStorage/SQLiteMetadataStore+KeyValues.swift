import Foundation
import GRDB
import ItemModel

/// The key-value stores, in the metadata database (migration `v7: key-value stores`): the
/// limits are checked, the key written and the store's version moved up in one write
/// transaction, so a refused write leaves nothing and writers, serialized by GRDB, take the
/// versions in the order they commit.
extension SQLiteMetadataStore {
    public func setValue(_ value: Data, for key: String, in container: ContainerRef) async throws -> Int64 {
        do { try KeyValueLimits.checkKey(key) } catch { throw StorageError.keyValueLimit(error) }
        guard value.count <= KeyValueLimits.maxValueBytes else { throw StorageError.keyValueLimit(.valueSize(value.count)) }
        let keyBytes = Data(key.utf8)
        return try await write { db in
            let live = try Row.fetchOne(
                try db.cachedStatement(sql: """
                    SELECT COUNT(*) AS keys, COALESCE(SUM(length(key) + length(value)), 0) AS bytes
                    FROM key_values WHERE container_key = ? AND removed = 0
                    """),
                arguments: [container.key])!
            // The bytes this key holds now, which the new value replaces.
            let replaced = try Int.fetchOne(
                try db.cachedStatement(sql: "SELECT length(key) + length(value) FROM key_values WHERE container_key = ? AND key = ? AND removed = 0"),
                arguments: [container.key, keyBytes])
            do throws(KeyValueRefusal) {
                try KeyValueLimits.checkWrite(
                    key: key, valueBytes: value.count, replacedBytes: replaced, liveKeys: live["keys"], liveBytes: live["bytes"])
            } catch { throw StorageError.keyValueLimit(error) }
            let version = try Self.nextKeyValueVersion(container, db)
            // COALESCE: an empty value binds as NULL (a zero-length buffer has no address).
            try db.cachedStatement(sql: """
                INSERT OR REPLACE INTO key_values (container_key, key, version, value, removed) VALUES (?, ?, ?, COALESCE(?, x''), 0)
                """).execute(arguments: [container.key, keyBytes, version, value])
            return version
        }
    }

    public func removeValue(for key: String, in container: ContainerRef) async throws -> Int64 {
        do { try KeyValueLimits.checkKey(key) } catch { throw StorageError.keyValueLimit(error) }
        let keyBytes = Data(key.utf8)
        return try await write { db in
            let present = try Int.fetchOne(
                try db.cachedStatement(sql: "SELECT 1 FROM key_values WHERE container_key = ? AND key = ? AND removed = 0"),
                arguments: [container.key, keyBytes]) != nil
            guard present else { return try Self.keyValueVersion(container, db) }
            let version = try Self.nextKeyValueVersion(container, db)
            try db.cachedStatement(sql: "UPDATE key_values SET version = ?, value = x'', removed = 1 WHERE container_key = ? AND key = ?")
                .execute(arguments: [version, container.key, keyBytes])
            return version
        }
    }

    public func keyValues(in container: ContainerRef, since: Int64) async throws -> (version: Int64, entries: [KeyValueEntry]) {
        try readNow { db in
            let version = try Self.keyValueVersion(container, db)
            // A version this store never had: the reader knew another store (another server,
            // the account removed and added again, a restored backup) and must start over.
            guard (0...version).contains(since) else { throw StorageError.invalidCursor(String(since)) }
            let rows = try Row.fetchAll(
                try db.cachedStatement(sql: """
                    SELECT key, version, value, removed FROM key_values
                    WHERE container_key = ? AND version > ? AND (removed = 0 OR ? > 0) ORDER BY version
                    """),
                arguments: [container.key, since, since])
            let entries = rows.map { row in
                KeyValueEntry(
                    key: String(decoding: row["key"] as Data, as: UTF8.self), version: row["version"],
                    value: (row["removed"] as Int64) != 0 ? nil : (row["value"] as Data? ?? Data()))
            }
            return (version, entries)
        }
    }

    public func keyValueVersion(in container: ContainerRef) async throws -> Int64 {
        try readNow { db in try Self.keyValueVersion(container, db) }
    }

    static func keyValueVersion(_ container: ContainerRef, _ db: Database) throws -> Int64 {
        guard let version = try Int64.fetchOne(
            try db.cachedStatement(sql: "SELECT kv_version FROM containers WHERE key = ?"), arguments: [container.key])
        else { throw StorageError.containerNotFound(container.id) }
        return version
    }

    /// Moves the store's version up by one, inside the caller's transaction; returns it.
    static func nextKeyValueVersion(_ container: ContainerRef, _ db: Database) throws -> Int64 {
        try db.cachedStatement(sql: "UPDATE containers SET kv_version = kv_version + 1 WHERE key = ?").execute(arguments: [container.key])
        // The container went with its account meanwhile (`ubiq-server account remove`).
        guard db.changesCount == 1 else { throw StorageError.containerNotFound(container.id) }
        return try keyValueVersion(container, db)
    }
}
