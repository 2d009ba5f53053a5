import Foundation
import ItemModel
import SyncAPI

/// The key-value store and the account's identity, answered as `ubiq-server` answers them
/// (SQLiteMetadataStore+KeyValues): the same limits, checked before anything is stored, and
/// one version for the store that each change moves up by one.
extension InMemoryRemoteStore {
    /// The account's identity, as `whoami` answers it; set it to play an account added again.
    public var identity: String {
        get { state.withLock { $0.identity } }
        set { state.withLock { $0.identity = newValue } }
    }

    /// Every live key with its value, as the server holds them (no call is counted).
    public func storedKeyValues() -> [String: Data] {
        state.withLock { s in
            Dictionary(s.keyValues.values.compactMap { e in e.value.map { (e.key, $0) } }, uniquingKeysWith: { a, _ in a })
        }
    }

    public func whoami() async throws -> WhoAmI {
        try await enter(.whoami)
        defer { answer(.whoami) }
        return state.withLock { WhoAmI(account: "test", identity: $0.identity) }
    }

    public func keyValues(since: Int64) async throws -> KeyValuePage {
        try await enter(.keyValues)
        defer { answer(.keyValues) }
        return try await delivered(.keyValues, try state.withLock { s in
            guard (0...s.keyValueVersion).contains(since) else {
                throw RemoteError.refused(code: .invalidCursor, message: "version \(since) is not one of this store's", current: nil)
            }
            let entries = s.keyValues.values.filter { $0.version > since && ($0.value != nil || since > 0) }.sorted { $0.version < $1.version }
            return KeyValuePage(version: s.keyValueVersion, entries: entries)
        })
    }

    public func setKeyValue(_ key: String, json: Data) async throws -> Int64 {
        try await enter(.setKeyValue)
        defer { answer(.setKeyValue) }
        return try await delivered(.setKeyValue, try mutate { s in
            if let problem = KeyValueDocument.problem(json) { throw RemoteError.refused(code: .invalidRequest, message: problem, current: nil) }
            let id = Data(key.utf8)
            let live = s.keyValues.values.compactMap { e in e.value.map { e.key.utf8.count + $0.count } }
            do throws(KeyValueRefusal) {
                try KeyValueLimits.checkWrite(
                    key: key, valueBytes: json.count, replacedBytes: s.keyValues[id]?.value.map { key.utf8.count + $0.count },
                    liveKeys: live.count, liveBytes: live.reduce(0, +))
            } catch {
                throw RemoteError.refused(code: APIErrorCode(error), message: error.description, current: nil)
            }
            s.keyValueVersion += 1
            s.keyValues[id] = KeyValueEntry(key: key, version: s.keyValueVersion, value: json)
            return s.keyValueVersion
        })
    }

    public func removeKeyValue(_ key: String) async throws -> Int64 {
        try await enter(.removeKeyValue)
        defer { answer(.removeKeyValue) }
        return try await delivered(.removeKeyValue, try mutate { s in
            let id = Data(key.utf8)
            guard s.keyValues[id]?.value != nil else { return s.keyValueVersion }
            s.keyValueVersion += 1
            s.keyValues[id] = KeyValueEntry(key: key, version: s.keyValueVersion, value: nil)
            return s.keyValueVersion
        })
    }

    /// Another device's write, whether or not this client is online.
    public func otherDeviceSets(_ key: String, json: Data) {
        _ = try? mutate { s in
            s.keyValueVersion += 1
            s.keyValues[Data(key.utf8)] = KeyValueEntry(key: key, version: s.keyValueVersion, value: json)
        }
    }
}
