import Foundation
import ItemModel
import PostgresNIO
import ServerStorage

/// The key-value stores: the container's row is locked, the limits are checked, the key
/// written and the store's version moved up in one transaction, so a refused write leaves
/// nothing and writers take the versions in the order they commit (the lock makes the writers
/// of one container take turns, as for the change log).
extension PostgresMetadataStore {
    public func setValue(_ value: Data, for key: String, in container: ContainerRef) async throws -> Int64 {
        do { try KeyValueLimits.checkKey(key) } catch { throw StorageError.keyValueLimit(error) }
        guard value.count <= KeyValueLimits.maxValueBytes else { throw StorageError.keyValueLimit(.valueSize(value.count)) }
        let keyBytes = Data(key.utf8)
        return try await write { tx in
            try await Self.lockContainer(container, tx)
            // The store's live keys and bytes, and the bytes this key holds now (which the new
            // value replaces), in one statement.
            let live = try await tx.rows("""
                SELECT COUNT(*),
                       COALESCE(SUM(octet_length(key) + octet_length(value)), 0)::bigint,
                       (SELECT octet_length(key) + octet_length(value) FROM key_values
                            WHERE container_key = \(container.key) AND key = \(keyBytes) AND NOT removed)
                FROM key_values WHERE container_key = \(container.key) AND NOT removed
                """)[0].decode((Int64, Int64, Int32?).self)
            do throws(KeyValueRefusal) {
                try KeyValueLimits.checkWrite(
                    key: key, valueBytes: value.count, replacedBytes: live.2.map(Int.init), liveKeys: Int(live.0), liveBytes: Int(live.1))
            } catch { throw StorageError.keyValueLimit(error) }
            let version = try await Self.nextKeyValueVersion(container, tx)
            try await tx.run("""
                INSERT INTO key_values (container_key, key, version, value, removed) VALUES (\(container.key), \(keyBytes), \(version), \(value), false)
                ON CONFLICT (container_key, key) DO UPDATE SET version = excluded.version, value = excluded.value, removed = false
                """)
            return version
        }
    }

    public func removeValue(for key: String, in container: ContainerRef) async throws -> Int64 {
        do { try KeyValueLimits.checkKey(key) } catch { throw StorageError.keyValueLimit(error) }
        let keyBytes = Data(key.utf8)
        return try await write { tx in
            try await Self.lockContainer(container, tx)
            let present = try await tx.run("""
                SELECT 1 FROM key_values WHERE container_key = \(container.key) AND key = \(keyBytes) AND NOT removed
                """) == 1
            guard present else { return try await Self.keyValueVersion(container, tx) }
            let version = try await Self.nextKeyValueVersion(container, tx)
            try await tx.run("""
                UPDATE key_values SET version = \(version), value = ''::bytea, removed = true WHERE container_key = \(container.key) AND key = \(keyBytes)
                """)
            return version
        }
    }

    public func keyValues(in container: ContainerRef, since: Int64) async throws -> (version: Int64, entries: [KeyValueEntry]) {
        // The version and the entries in one snapshot.
        try await readSnapshot { tx in
            let version = try await Self.keyValueVersion(container, tx)
            // A version this store never had: the reader knew another store (another server,
            // the account removed and added again, a restored backup) and must start over.
            guard (0...version).contains(since) else { throw StorageError.invalidCursor(String(since)) }
            let entries = try await tx.rows("""
                SELECT key, version, value, removed FROM key_values
                WHERE container_key = \(container.key) AND version > \(since) AND (NOT removed OR \(since) > 0) ORDER BY version
                """).map { row in
                let (key, version, value, removed) = try row.decode((Data, Int64, Data, Bool).self)
                return KeyValueEntry(key: String(decoding: key, as: UTF8.self), version: version, value: removed ? nil : value)
            }
            return (version, entries)
        }
    }

    public func keyValueVersion(in container: ContainerRef) async throws -> Int64 {
        guard let version = try await rows("SELECT kv_version FROM containers WHERE key = \(container.key)").first?.decode(Int64.self) else {
            throw StorageError.containerNotFound(container.id)
        }
        return version
    }

    static func keyValueVersion(_ container: ContainerRef, _ tx: Transaction) async throws -> Int64 {
        guard let version = try await tx.rows("SELECT kv_version FROM containers WHERE key = \(container.key)").first?.decode(Int64.self) else {
            throw StorageError.containerNotFound(container.id)
        }
        return version
    }

    /// Moves the store's version up by one, inside the caller's transaction; returns it.
    static func nextKeyValueVersion(_ container: ContainerRef, _ tx: Transaction) async throws -> Int64 {
        guard let version = try await tx.rows("UPDATE containers SET kv_version = kv_version + 1 WHERE key = \(container.key) RETURNING kv_version")
            .first?.decode(Int64.self)
        else { throw StorageError.containerNotFound(container.id) }
        return version
    }
}
