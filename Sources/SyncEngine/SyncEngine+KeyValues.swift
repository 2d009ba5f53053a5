import Foundation
import ItemModel
import LocalState
import Logging
import ServiceLifecycle
import SyncAPI

/// A key-value write refused on this device, before anything was queued.
public enum KeyValueWriteRefusal: Error, Sendable, CustomStringConvertible {
    /// Past one of the store's limits, as this device sees the store (`quotaViolation`).
    case limit(KeyValueRefusal)
    /// Not a value the store takes (`KeyValueDocument.problem`).
    case notAValue(String)

    public var description: String {
        switch self {
        case .limit(let refusal): refusal.description + "; nothing was stored"
        case .notAValue(let why): why
        }
    }
}

/// The container's key-value store on this device (docs/SEMANTICS.md, "The key-value store"):
/// read and written in the mount's database, offline too; writes go up in the order they were
/// made, and the server's changes come down when the push stream says the store moved.
extension SyncEngine {
    /// The key's value as this device sees it (its own writes not yet sent included).
    public func keyValue(_ key: String) throws -> Data? { try store.read { try $0.keyValue(key) } }

    /// Every key with its value, ordered by the keys' bytes, and the store's version this
    /// device has read up to (0 before its first read). An entry's version is the server's of
    /// its value, 0 for a write of this device not yet there.
    public func keyValuePage() throws -> KeyValuePage {
        try store.read { r in KeyValuePage(version: try r.keyValueVersion() ?? 0, entries: try r.keyValueList()) }
    }

    /// Sets a key, checked against the limits as this device sees the store; queued to go up.
    /// A refusal stores nothing and is reported to `kv watch` as `quotaViolation`.
    public func setKeyValue(_ key: String, json: Data) throws {
        if let problem = KeyValueDocument.problem(json) { throw KeyValueWriteRefusal.notAValue(problem) }
        try queueKeyValueWrite(key) { w in
            let live = try w.reader.keyValueList()
            func bytes(_ e: KeyValueEntry) -> Int { e.key.utf8.count + (e.value?.count ?? 0) }
            let replaced = live.first { $0.key.utf8.elementsEqual(key.utf8) }.map(bytes)
            do throws(KeyValueRefusal) {
                try KeyValueLimits.checkWrite(
                    key: key, valueBytes: json.count, replacedBytes: replaced, liveKeys: live.count,
                    liveBytes: live.reduce(0) { $0 + bytes($1) })
            } catch { throw KeyValueWriteRefusal.limit(error) }
            try w.queueKeyValue(key, value: json)
        }
    }

    /// Removes a key (no error when it has none); queued to go up.
    public func removeKeyValue(_ key: String) throws {
        try queueKeyValueWrite(key) { w in
            do throws(KeyValueRefusal) { try KeyValueLimits.checkKey(key) } catch { throw KeyValueWriteRefusal.limit(error) }
            try w.queueKeyValue(key, value: nil)
        }
    }

    func queueKeyValueWrite(_ key: String, _ body: (LocalWriter) throws -> Void) throws {
        do {
            try store.write(body)
        } catch KeyValueWriteRefusal.limit(let refusal) {
            keyValueNotices.publish(KeyValueNotice(.quotaViolation, keys: [key]))
            throw KeyValueWriteRefusal.limit(refusal)
        }
        keyValueSignal.yield()
    }

    /// The server's store is at `version` (the push stream said so): reads what changed since
    /// the version this device read last, or the whole store when it never read one (then the
    /// notice is `initialSync`) or the server does not know that version (another store).
    func followKeyValues(to version: Int64) async throws {
        let known = try store.read { try $0.keyValueVersion() }
        if known == version { return }
        var page: KeyValuePage
        var complete = true
        if let known, known < version {
            do {
                page = try await remote.keyValues(since: known)
                complete = false
            } catch RemoteError.refused(code: .invalidCursor, _, _) {
                page = try await remote.keyValues(since: 0)
            }
        } else {
            page = try await remote.keyValues(since: 0)
        }
        let changed = try store.write { w in try w.takeServerKeyValues(page.entries, version: page.version, complete: complete) }
        if known == nil {
            keyValueNotices.publish(KeyValueNotice(.initialSync, keys: changed), keep: true)
        } else if !changed.isEmpty {
            keyValueNotices.publish(KeyValueNotice(.serverChange, keys: changed))
        }
    }

    /// Sends this device's writes, oldest first, until none is left. Returns when to try again
    /// (a server error), or nil: nothing left, or offline (the connection coming back wakes
    /// the sender).
    func sendKeyValueWrites() async -> Duration? {
        guard await containerIsOurs() else { return nil }
        while !Task.isCancelled {
            let writes: [KeyValueWrite]
            do { writes = try store.read { try $0.keyValueWrites() } } catch {
                logger.error("cannot read the key-value writes", metadata: ["error": "\(error)"])
                return .seconds(5)
            }
            guard !writes.isEmpty else { return nil }
            for write in writes {
                do {
                    let version: Int64
                    if let value = write.value { version = try await remote.setKeyValue(write.key, json: value) } else { version = try await remote.removeKeyValue(write.key) }
                    try store.write { w in try w.settleKeyValueWrite(write.seq, key: write.key, version: version, value: write.value) }
                } catch let error as RemoteError {
                    if error.meansOffline {
                        setConnected(false, error: describe(error))
                        return nil
                    }
                    guard case .refused(let code, let message, _) = error else { return .seconds(2) }
                    // Refused for good: never sent again. The key shows the server's value again.
                    do { try store.write { w in try w.dropKeyValueWrite(write.seq) } } catch { return .seconds(5) }
                    if code.isKeyValueLimit { keyValueNotices.publish(KeyValueNotice(.quotaViolation, keys: [write.key])) }
                    observer.event(MountEvent(.error, detail: "the server refused the key-value write of '\(write.key)': \(message)"))
                } catch {
                    logger.error("cannot record a key-value write", metadata: ["error": "\(error)"])
                    return .seconds(5)
                }
            }
        }
        return nil
    }

    /// Sends the key-value writes whenever one is made or the connection comes back.
    public var keyValueSender: some Service { KeyValueSender(engine: self) }
}

struct KeyValueSender: Service {
    let engine: SyncEngine

    func run() async throws {
        await cancelWhenGracefulShutdown {
            for await _ in engine.keyValueSignals {
                while let retry = await engine.sendKeyValueWrites(), !Task.isCancelled {
                    try? await Task.sleep(for: retry)
                }
            }
        }
    }
}
