import Foundation

/// The limits of a container's key-value store, NSUbiquitousKeyValueStore's own: an app that
/// fits Apple's store fits this one, and one that does not is told so by the same rules.
public enum KeyValueLimits {
    /// Live keys in one store.
    public static let maxKeys = 1024
    /// Bytes of UTF-8 in a key (at least one).
    public static let maxKeyBytes = 64
    /// Bytes of one value (its JSON text).
    public static let maxValueBytes = 1 << 20
    /// Bytes of the whole store: key bytes plus value bytes, summed over the live keys.
    public static let maxStoreBytes = 1 << 20

    /// Checks a key's length; the count and sizes that depend on the store are checked where
    /// the store is, inside the write.
    public static func checkKey(_ key: String) throws(KeyValueRefusal) {
        let bytes = key.utf8.count
        guard (1...maxKeyBytes).contains(bytes) else { throw .keyLength(bytes) }
    }

    /// Checks a write of `valueBytes` to `key` against a store that holds `liveKeys` keys of
    /// `liveBytes` bytes, of which the key's present value takes `replacedBytes` (nil: the key
    /// is new). The same rules, in the same order, wherever a store is kept: the server's and
    /// a mount's own view of it refuse the same write for the same reason.
    public static func checkWrite(
        key: String, valueBytes: Int, replacedBytes: Int?, liveKeys: Int, liveBytes: Int
    ) throws(KeyValueRefusal) {
        try checkKey(key)
        guard valueBytes <= maxValueBytes else { throw .valueSize(valueBytes) }
        if replacedBytes == nil, liveKeys >= maxKeys { throw .tooManyKeys }
        let after = liveBytes - (replacedBytes ?? 0) + key.utf8.count + valueBytes
        guard after <= maxStoreBytes else { throw .storeSize(after) }
    }
}

/// A write the key-value store refuses because it would pass a limit; nothing was stored.
public enum KeyValueRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    /// The store holds `KeyValueLimits.maxKeys` live keys already, and this key is new.
    case tooManyKeys
    /// The key is empty or longer than `KeyValueLimits.maxKeyBytes` (its length in bytes).
    case keyLength(Int)
    /// The value is longer than `KeyValueLimits.maxValueBytes` (its length in bytes).
    case valueSize(Int)
    /// The store would hold more than `KeyValueLimits.maxStoreBytes` (what it would hold).
    case storeSize(Int)

    public var description: String {
        switch self {
        case .tooManyKeys:
            "a key-value store holds at most \(KeyValueLimits.maxKeys) keys; remove one before adding another"
        case .keyLength(let n):
            "a key is 1 to \(KeyValueLimits.maxKeyBytes) bytes of UTF-8; this one is \(n)"
        case .valueSize(let n):
            "a value is at most \(KeyValueLimits.maxValueBytes) bytes; this one is \(n)"
        case .storeSize(let n):
            "a key-value store holds at most \(KeyValueLimits.maxStoreBytes) bytes of keys and values; this write would make it \(n)"
        }
    }
}

/// One key of a container's key-value store as a read reports it: its value and the store's
/// version of its last change, or, for a key removed since the version the reader asked from,
/// its removal (`value` nil, a tombstone).
///
/// Keys are compared byte for byte (their UTF-8), as the server stores them: Swift's `String`
/// equality treats `é` and `e` + U+0301 as equal, so keep keys apart by `key.utf8`, not `==`.
public struct KeyValueEntry: Sendable, Equatable {
    public var key: String
    /// The store's key-value version when this key last changed.
    public var version: Int64
    /// The exact bytes of the JSON document written; nil when the key was removed.
    public var value: Data?

    public init(key: String, version: Int64, value: Data?) {
        self.key = key
        self.version = version
        self.value = value
    }

    public var removed: Bool { value == nil }

    public static func == (a: KeyValueEntry, b: KeyValueEntry) -> Bool {
        a.key.utf8.elementsEqual(b.key.utf8) && a.version == b.version && a.value == b.value
    }
}
