import Foundation
import ItemModel
import ServerStorage
import SyncAPI

/// The container's key-value store (NSUbiquitousKeyValueStore): each value one JSON document,
/// kept and given back as the exact bytes written; the last write to reach the server wins.
extension ContainerService {
    /// Every key changed after version `since` (as the request wrote it; absent: 0, the whole
    /// store), with the store's version.
    public func keyValues(since raw: String?) async throws -> KeyValuePage {
        let raw = raw ?? "0"
        // The spelling of a cursor: a version written otherwise would come back as another.
        guard let since = ChangeCursor(raw).position else {
            throw APIError(.invalidCursor, "'\(raw.prefix(80))' is not a key-value version: a non-negative integer in plain decimal")
        }
        do {
            let (version, entries) = try await storage.keyValues.keyValues(in: ref, since: since)
            return KeyValuePage(version: version, entries: entries)
        } catch StorageError.invalidCursor {
            throw APIError(.invalidCursor, "version \(since) is ahead of this key-value store's; read it again from 0")
        }
    }

    /// Sets `key` (its UTF-8, as the path carried it) to the JSON document `value`; answers
    /// the store's version after the write.
    public func setKeyValue(_ key: [UInt8], json value: Data) async throws -> KeyValueWriteAnswer {
        let key = try KeyValueChecks.key(key)
        try KeyValueChecks.value(value)
        let version = try await storage.keyValues.setValue(value, for: key, in: ref)
        service.hub.publish(container: ref.key)
        return KeyValueWriteAnswer(version: version)
    }

    /// Removes `key`; a key that is not there is no error and leaves the version as it is.
    public func removeKeyValue(_ key: [UInt8]) async throws -> KeyValueWriteAnswer {
        let version = try await storage.keyValues.removeValue(for: try KeyValueChecks.key(key), in: ref)
        // Also after a removal that changed nothing: a push stream sends the version only when
        // it differs from the one it sent last.
        service.hub.publish(container: ref.key)
        return KeyValueWriteAnswer(version: version)
    }

    public func keyValueVersion() async throws -> Int64 {
        try await storage.keyValues.keyValueVersion(in: ref)
    }
}

/// Checks of a key-value request, before the store is touched.
enum KeyValueChecks {
    static func key(_ bytes: [UInt8]) throws -> String {
        guard let key = String(validating: bytes, as: UTF8.self) else {
            throw APIError(.invalidRequest, "a key is UTF-8, and this one is not")
        }
        do { try KeyValueLimits.checkKey(key) } catch { throw APIError(error) }
        return key
    }

    static func value(_ value: Data) throws {
        guard value.count <= KeyValueLimits.maxValueBytes else { throw APIError(KeyValueRefusal.valueSize(value.count)) }
        if let problem = KeyValueDocument.problem(value) { throw APIError(.invalidRequest, problem) }
    }
}
