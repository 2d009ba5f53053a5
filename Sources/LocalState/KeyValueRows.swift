import Foundation
import GRDB
import ItemModel

/// A write to the key-value store made on this device and not yet on the server.
public struct KeyValueWrite: Sendable, Equatable {
    /// Grows with every write; a newer write of the same key replaces this one and its `seq`.
    public var seq: Int64
    public var key: String
    /// The JSON document's bytes; nil for a removal.
    public var value: Data?
}

/// The key-value store's mirror (migration v15). What a reader on this device sees is the
/// server's store as last read, with this device's writes not yet sent laid over it: a write
/// shows at once, offline too, and stays shown until the server has it.
extension LocalReader {
    /// The key's value as this device sees it; nil when it has none.
    public func keyValue(_ key: String) throws -> Data? {
        if let row = try Row.fetchOne(try db.cachedStatement(sql: "SELECT value FROM key_value_writes WHERE key = ?"), arguments: [key]) {
            return row[0]
        }
        return try Data.fetchOne(try db.cachedStatement(sql: "SELECT value FROM key_values WHERE key = ?"), arguments: [key])
    }

    /// Every key this device sees with its value, ordered by the keys' bytes; each entry's
    /// version is the server's of that value, 0 for a write of this device not yet there.
    public func keyValueList() throws -> [KeyValueEntry] {
        let rows = try Row.fetchAll(try db.cachedStatement(sql: """
            SELECT key, 0, value FROM key_value_writes WHERE value IS NOT NULL
            UNION ALL
            SELECT key, version, value FROM key_values WHERE value IS NOT NULL AND key NOT IN (SELECT key FROM key_value_writes)
            ORDER BY key
            """))
        return rows.map { KeyValueEntry(key: $0[0], version: $0[1], value: $0[2]) }
    }

    /// The writes not yet on the server, oldest first.
    public func keyValueWrites() throws -> [KeyValueWrite] {
        try Row.fetchAll(try db.cachedStatement(sql: "SELECT seq, key, value FROM key_value_writes ORDER BY seq"))
            .map { KeyValueWrite(seq: $0[0], key: $0[1], value: $0[2]) }
    }

    /// The server's version of the key as last read, and its value there (nil: removed).
    public func serverKeyValue(_ key: String) throws -> (version: Int64, value: Data?)? {
        try Row.fetchOne(try db.cachedStatement(sql: "SELECT version, value FROM key_values WHERE key = ?"), arguments: [key])
            .map { ($0[0], $0[1]) }
    }

    /// Every key the mirror holds of the server's store, removed ones included.
    func serverKeys() throws -> [String] {
        try String.fetchAll(try db.cachedStatement(sql: "SELECT key FROM key_values"))
    }

    /// The store's version this device has read up to; nil before its first read (a fresh
    /// device, or a cache made before the store existed).
    public func keyValueVersion() throws -> Int64? {
        try meta("kv_version").flatMap { Int64($0) }
    }
}

extension LocalWriter {
    /// Queues a write (`value` nil: a removal), replacing one of the same key not yet sent.
    public func queueKeyValue(_ key: String, value: Data?) throws {
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO key_value_writes (key, value) VALUES (?, ?)").execute(arguments: [key, value])
    }

    /// The server took the write `seq`: its state of the key is `value` at `version`. The write
    /// leaves the queue unless a newer one of the key replaced it meanwhile.
    public func settleKeyValueWrite(_ seq: Int64, key: String, version: Int64, value: Data?) throws {
        try db.cachedStatement(sql: "DELETE FROM key_value_writes WHERE seq = ?").execute(arguments: [seq])
        _ = try takeServerKeyValue(KeyValueEntry(key: key, version: version, value: value))
    }

    /// Drops the write `seq` (the server refused it for good); the key shows the server's value again.
    public func dropKeyValueWrite(_ seq: Int64) throws {
        try db.cachedStatement(sql: "DELETE FROM key_value_writes WHERE seq = ?").execute(arguments: [seq])
    }

    /// Takes what the server's store holds of some keys, read at `version`, and returns the
    /// keys whose value as this device sees it changed (a key with a write of this device
    /// still to send keeps showing that write). An entry older than what the mirror holds of
    /// its key (an answer that crossed a newer one) is skipped. `complete`: the entries are
    /// the whole store, and a key they leave out is gone from it.
    public func takeServerKeyValues(_ entries: [KeyValueEntry], version: Int64, complete: Bool) throws -> [String] {
        var changed: [String] = []
        let shadowed = Set(try reader.keyValueWrites().map { Data($0.key.utf8) })
        func note(_ key: String, old: Data?, new: Data?) {
            if old != new && !shadowed.contains(Data(key.utf8)) { changed.append(key) }
        }
        for entry in entries {
            if let old = try takeServerKeyValue(entry) { note(entry.key, old: old.value, new: entry.value) }
        }
        if complete {
            let listed = Set(entries.map { Data($0.key.utf8) })
            for key in try reader.serverKeys() where !listed.contains(Data(key.utf8)) {
                // Newer than the read: an answer to this device's own write, after it.
                guard let old = try reader.serverKeyValue(key), old.version <= version else { continue }
                try db.cachedStatement(sql: "DELETE FROM key_values WHERE key = ?").execute(arguments: [key])
                note(key, old: old.value, new: nil)
            }
        }
        try setMeta("kv_version", String(version))
        return changed
    }

    /// Records the server's state of one key unless the mirror holds a newer one; returns the
    /// state replaced (value nil: none, or removed), or nil when it was not older.
    func takeServerKeyValue(_ entry: KeyValueEntry) throws -> (version: Int64, value: Data?)? {
        let old = try reader.serverKeyValue(entry.key)
        if let old, old.version >= entry.version { return nil }
        try db.cachedStatement(sql: "INSERT OR REPLACE INTO key_values (key, version, value) VALUES (?, ?, ?)")
            .execute(arguments: [entry.key, entry.version, entry.value])
        return old ?? (0, nil)
    }

    /// Forgets the server's store (kept writes stay): the next read starts from nothing.
    public func forgetServerKeyValues() throws {
        try db.execute(sql: "DELETE FROM key_values; DELETE FROM meta WHERE key = 'kv_version'")
    }
}

/// The account's identity, as the server first answered it to this cache: the identity token
/// the mount shows, and what tells another account answering apart.
extension LocalReader {
    public func accountIdentity() throws -> String? { try meta("identity") }
}

extension LocalWriter {
    public func setAccountIdentity(_ identity: String) throws { try setMeta("identity", identity) }
}
