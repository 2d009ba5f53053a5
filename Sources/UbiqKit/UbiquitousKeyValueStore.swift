import Foundation
import SyncAPI
import Synchronization

/// A container's key-value store (NSUbiquitousKeyValueStore), through its mount's daemon: the
/// daemon keeps the store in its database, so reads and writes work offline, and a write goes
/// up when the server can be reached (docs/SEMANTICS.md, "The key-value store").
///
/// Every call asks the daemon (a local round trip of about a millisecond), so there is no
/// in-memory copy to fall behind another device, and `synchronize()` has nothing to flush.
/// Thread-safe, as Apple's is.
public struct UbiquitousKeyValueStore: Sendable {
    let target: MountTarget

    /// The store of the container mounted at `containerURL` (any path inside the mount); nil:
    /// the default container's, looked up at each call.
    public init(containerURL: URL? = nil, registry: MountRegistryLocation = .standard) {
        target = MountTarget(containerURL: containerURL, registry: registry)
    }

    /// The default container's store.
    public static let `default` = UbiquitousKeyValueStore()

    // MARK: Reading

    /// The value's JSON as stored, byte for byte; nil when the key has none or no mount answers.
    public func json(forKey key: String) -> Data? {
        guard let mount = try? target.mount(),
              let data = try? mount.exchange("GET", ControlPath.keyValues + "?" + ControlPath.keyParameter(key)),
              let page = try? KeyValuePage(json: data)
        else { return nil }
        return page.entries.first { $0.key.utf8.elementsEqual(key.utf8) }?.value
    }

    /// `String`, `Int`, `Double`, `Bool`, `Data`, `[Any]` or `[String: Any]`.
    public func object(forKey key: String) -> Any? { json(forKey: key).flatMap(KeyValueJSON.value) }

    public func string(forKey key: String) -> String? { object(forKey: key) as? String }
    public func data(forKey key: String) -> Data? { object(forKey: key) as? Data }
    public func array(forKey key: String) -> [Any]? { object(forKey: key) as? [Any] }
    public func dictionary(forKey key: String) -> [String: Any]? { object(forKey: key) as? [String: Any] }

    /// 0 when the key has no number, as Apple's; a fraction is cut off.
    public func longLong(forKey key: String) -> Int64 {
        switch object(forKey: key) {
        case let value as Int: Int64(value)
        case let value as Double where value.isFinite && abs(value) < 9.2e18: Int64(value)
        case let value as Bool: value ? 1 : 0
        default: 0
        }
    }

    public func double(forKey key: String) -> Double {
        switch object(forKey: key) {
        case let value as Double: value
        case let value as Int: Double(value)
        case let value as Bool: value ? 1 : 0
        default: 0
        }
    }

    /// A number is true when it is not 0, as Apple's.
    public func bool(forKey key: String) -> Bool {
        switch object(forKey: key) {
        case let value as Bool: value
        case let value as Int: value != 0
        case let value as Double: value != 0
        default: false
        }
    }

    /// Every key and its value (as `object(forKey:)` gives them); empty when no mount answers.
    public var dictionaryRepresentation: [String: Any] {
        guard let mount = try? target.mount(), let data = try? mount.exchange("GET", ControlPath.keyValues), let page = try? KeyValuePage(json: data) else {
            return [:]
        }
        var all: [String: Any] = [:]
        for entry in page.entries {
            if let json = entry.value, let value = KeyValueJSON.value(json) { all[entry.key] = value }
        }
        return all
    }

    // MARK: Writing

    /// Sets the key to one JSON document (data as `{"$data":"BASE64"}`). Kept by the mount at
    /// once, sent when the server can be reached. Throws when the daemon refuses it (a limit:
    /// the store's watchers also get `quotaViolationChange`) or does not answer.
    public func set(json: Data, forKey key: String) throws(UbiqKitError) {
        let report: KeyValueWriteReport = try target.mount().call("POST", ControlPath.keyValueSet + "?" + ControlPath.keyParameter(key), body: json)
        if let error = report.error { throw .refused(error) }
    }

    /// Removes the key; no error when it had no value.
    public func removeObject(forKey key: String) {
        try? remove(forKey: key)
    }

    /// `removeObject(forKey:)`, saying why it failed.
    public func remove(forKey key: String) throws(UbiqKitError) {
        let report: KeyValueWriteReport = try target.mount().call("POST", ControlPath.keyValueRemove + "?" + ControlPath.keyParameter(key))
        if let error = report.error { throw .refused(error) }
    }

    /// Sets a `String`, number, `Bool`, `Data`, array or dictionary of them; nil removes the
    /// key. As Apple's, a write the store does not take is dropped without an error here (a
    /// limit is reported to `changes` as `quotaViolationChange`); `set(json:forKey:)` and
    /// `setValue(_:forKey:)` throw instead.
    public func set(_ value: Any?, forKey key: String) {
        try? setValue(value, forKey: key)
    }

    public func set(_ value: String?, forKey key: String) { set(value as Any?, forKey: key) }
    public func set(_ value: Data?, forKey key: String) { set(value as Any?, forKey: key) }
    public func set(_ value: [Any]?, forKey key: String) { set(value as Any?, forKey: key) }
    public func set(_ value: [String: Any]?, forKey key: String) { set(value as Any?, forKey: key) }
    public func set(_ value: Int, forKey key: String) { set(value as Any?, forKey: key) }
    public func set(_ value: Int64, forKey key: String) { set(value as Any?, forKey: key) }
    public func set(_ value: Double, forKey key: String) { set(value as Any?, forKey: key) }
    public func set(_ value: Bool, forKey key: String) { set(value as Any?, forKey: key) }

    /// `set(_:forKey:)`, saying why a write was not taken.
    public func setValue(_ value: Any?, forKey key: String) throws(UbiqKitError) {
        guard let value else { return try remove(forKey: key) }
        try set(json: try KeyValueJSON.document(value), forKey: key)
    }

    /// True when the mount's daemon answers: every write is already kept by it, and every read
    /// asks it, so there is nothing to exchange here.
    @discardableResult
    public func synchronize() -> Bool {
        guard let mount = try? target.mount(), (try? mount.whoami()) != nil else { return false }
        startPostingChanges()
        return true
    }

    // MARK: Changes

    /// NSUbiquitousKeyValueStoreDidChangeExternallyNotification's reasons, with Apple's raw values.
    public enum ChangeReason: Int, Sendable {
        /// Another device changed these keys (or this device's write was overtaken).
        case serverChange = 0
        /// This device read the store for the first time (a fresh cache): every key it found.
        case initialSyncChange = 1
        /// A write of this device passed one of the store's limits; the key shows the server's
        /// value again.
        case quotaViolationChange = 2
        /// The mount shows another account than before; no keys.
        case accountChange = 3
    }

    public struct Change: Sendable, Equatable {
        public var reason: ChangeReason
        public var changedKeys: [String]
        public init(reason: ChangeReason, changedKeys: [String]) {
            self.reason = reason
            self.changedKeys = changedKeys
        }
    }

    /// Each change of the store made elsewhere, as the mount reports it. `initialSyncChange`
    /// and `accountChange` describe the state the running mount is in, so a sequence started
    /// later gets them too, first. Throws when no mount runs or its daemon stops (an unmount);
    /// ends when the consumer stops iterating.
    public var changes: AsyncThrowingStream<Change, Error> {
        let target = target
        return AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    for try await line in try target.mount().lines(ControlPath.keyValueWatch) {
                        guard let notice = try? JSONDecoder().decode(KeyValueNotice.self, from: Data(line.utf8)) else { continue }
                        continuation.yield(Change(reason: ChangeReason(notice.reason), changedKeys: notice.keys))
                    }
                    throw UbiqKitError.daemonUnreachable("the mount's key-value notices ended (the mount went away)")
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
}

// MARK: The notification

extension UbiquitousKeyValueStore {
    /// NSUbiquitousKeyValueStoreDidChangeExternallyNotification: posted on
    /// `NotificationCenter.default` for each change of `changes`, once `synchronize()` has
    /// answered true for the store (Apple's apps call it at launch), with the reason's raw value
    /// (`Int`) under `changeReasonKey` and the keys (`[String]`) under `changedKeysKey`. The
    /// object is nil: a store is a value, not an object to compare. The posting ends with the
    /// mount; the next `synchronize()` starts it again.
    public static let didChangeExternallyNotification = Notification.Name("NSUbiquitousKeyValueStoreDidChangeExternallyNotification")
    public static let changeReasonKey = "NSUbiquitousKeyValueStoreChangeReasonKey"
    public static let changedKeysKey = "NSUbiquitousKeyValueStoreChangedKeysKey"

    /// The stores whose changes are being posted: one watch each, however often a program
    /// synchronizes.
    static let posting = Mutex<Set<MountTarget>>([])

    func startPostingChanges() {
        let target = target
        guard Self.posting.withLock({ $0.insert(target).inserted }) else { return }
        let changes = changes
        Task {
            defer { _ = Self.posting.withLock { $0.remove(target) } }
            do {
                for try await change in changes {
                    NotificationCenter.default.post(
                        name: Self.didChangeExternallyNotification, object: nil,
                        userInfo: [Self.changeReasonKey: change.reason.rawValue, Self.changedKeysKey: change.changedKeys])
                }
            } catch {
                // The mount went away: nothing more to post until it is back.
            }
        }
    }
}

#if !canImport(Darwin)
public let NSUbiquitousKeyValueStoreChangeReasonKey = UbiquitousKeyValueStore.changeReasonKey
public let NSUbiquitousKeyValueStoreChangedKeysKey = UbiquitousKeyValueStore.changedKeysKey
#endif

extension UbiquitousKeyValueStore.ChangeReason {
    init(_ reason: KeyValueNotice.Reason) {
        switch reason {
        case .serverChange: self = .serverChange
        case .initialSync: self = .initialSyncChange
        case .quotaViolation: self = .quotaViolationChange
        case .accountChange: self = .accountChange
        }
    }
}
