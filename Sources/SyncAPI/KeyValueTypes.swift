import Foundation
import ItemModel

/// `GET /v1/containers/{c}/kv?since=V`: the store's version, and every key changed after
/// version V, once each in its latest state, ordered by version:
///
///     {"version":7,"entries":[{"key":"theme","version":5,"value":{"dark":true}},
///                             {"key":"draft","version":7,"removed":true}]}
///
/// Each `value` is the JSON document as it was written, byte for byte (spacing, escapes and
/// number spelling included), so the page is not `Codable`: `json()` writes it and
/// `init(json:)` reads it with `RawJSON`, which never decodes a value.
public struct KeyValuePage: Sendable, Equatable {
    /// The store's version when the page was read: pass it as `since` next time.
    public var version: Int64
    public var entries: [KeyValueEntry]

    public init(version: Int64, entries: [KeyValueEntry]) {
        self.version = version
        self.entries = entries
    }

    /// The answer's JSON. Nothing is put around a value, so a reader that takes the bytes
    /// between its colon and the next comma or brace gets exactly the value.
    public func json() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .withoutEscapingSlashes
        var out = Data(#"{"version":\#(version),"entries":["#.utf8)
        for (index, entry) in entries.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: #"{"key":"#.utf8)
            out.append(try encoder.encode(entry.key))
            out.append(contentsOf: #","version":\#(entry.version),"#.utf8)
            if let value = entry.value {
                out.append(contentsOf: #""value":"#.utf8)
                out.append(value)
            } else {
                out.append(contentsOf: #""removed":true"#.utf8)
            }
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: "]}".utf8)
        return out
    }

    public struct Unreadable: Error, CustomStringConvertible {
        public let description: String
    }

    /// Reads an answer: members in any order, unknown members ignored, each value kept as
    /// the bytes between its colon and the comma or brace after it. The answer is not parsed
    /// whole first: a value may be nested as deep as the server's parser allows, and the page
    /// around it would take a parser past that.
    public init(json data: Data) throws {
        let bytes = [UInt8](data)
        let decoder = JSONDecoder()
        func decode<T: Decodable>(_ type: T.Type, _ range: Range<Int>) throws -> T {
            try decoder.decode(T.self, from: Data(bytes[range]))
        }
        var version: Int64?
        var entries: [KeyValueEntry] = []
        for (name, range) in try RawJSON.members(of: bytes, in: 0..<bytes.count) {
            switch name {
            case "version": version = try decode(Int64.self, range)
            case "entries":
                for element in try RawJSON.elements(of: bytes, in: range) {
                    var key: String?, changed: Int64?, value: Data?, removed = false
                    for (name, range) in try RawJSON.members(of: bytes, in: element) {
                        switch name {
                        case "key": key = try decode(String.self, range)
                        case "version": changed = try decode(Int64.self, range)
                        case "value": value = Data(bytes[range])
                        case "removed": removed = try decode(Bool.self, range)
                        default: continue
                        }
                    }
                    guard let key, let changed, removed == (value == nil) else {
                        throw Unreadable(description: "an entry needs a key, a version, and either a value or \"removed\":true")
                    }
                    entries.append(KeyValueEntry(key: key, version: changed, value: value))
                }
            default: continue
            }
        }
        guard let version else { throw Unreadable(description: "no version") }
        self.init(version: version, entries: entries)
    }
}

/// The answer to `PUT` and `DELETE /v1/containers/{c}/kv/{key}`: the store's version after
/// the write (unchanged by the removal of a key that was not there).
public struct KeyValueWriteAnswer: Codable, Sendable, Equatable {
    public var version: Int64
    public init(version: Int64) { self.version = version }
}

/// The `kv` event of the push stream: the container's key-value store is at `version`. Sent
/// once after `ready` and again after each committed change (several changes may come as one).
public struct StreamKeyValues: Codable, Sendable, Equatable {
    public var version: Int64
    public init(version: Int64) { self.version = version }
}

extension APIPath {
    public static func keyValues(_ c: ContainerID) -> String { container(c) + "/kv" }
    /// The key percent-encoded: every byte of its UTF-8 but `A-Z a-z 0-9 - _ ~`, the dot
    /// included, so that `.` and `..` stay keys and no client or proxy folds them away.
    public static func keyValue(_ c: ContainerID, _ key: String) -> String { keyValues(c) + "/" + percentEncoded(key) }

    public static func percentEncoded(_ key: String) -> String {
        var out = ""
        for b in key.utf8 {
            let unreserved = (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
                || b == UInt8(ascii: "-") || b == UInt8(ascii: "_") || b == UInt8(ascii: "~")
            if unreserved { out.unicodeScalars.append(Unicode.Scalar(b)) } else { out += String(format: "%%%02X", b) }
        }
        return out
    }
}

/// What the store takes as a value: one JSON document in UTF-8, and not `null`.
public enum KeyValueDocument {
    /// Why `value` is not a value the store takes; nil when it is. Wrapped in brackets it must
    /// read as an array of one element: two documents (`1,2`) make two, and text in another
    /// encoding (which a parser would guess from its NUL bytes) cannot start with the bracket.
    public static func problem(_ value: Data) -> String? {
        guard String(validating: value, as: UTF8.self) != nil,
              let wrapped = try? JSONSerialization.jsonObject(with: Data("[".utf8) + value + Data("]".utf8)) as? [Any],
              wrapped.count == 1
        else { return "a value is one JSON document, in UTF-8" }
        // NSUbiquitousKeyValueStore has no null: setting nil removes the key.
        guard !(wrapped[0] is NSNull) else { return "null is not a value; remove the key instead" }
        return nil
    }

    /// Bytes as a value: `{"$data":"BASE64"}`, the form the store gives data.
    public static func data(_ bytes: Data) -> Data { Data(#"{"$data":""#.utf8) + Data(bytes.base64EncodedString().utf8) + Data(#""}"#.utf8) }

    /// The bytes a `{"$data":"BASE64"}` value holds; nil for any other value.
    public static func bytes(of value: Data) -> Data? {
        guard let object = try? JSONSerialization.jsonObject(with: value) as? [String: Any], object.count == 1,
              let text = object["$data"] as? String
        else { return nil }
        return Data(base64Encoded: text)
    }
}

/// A change of the key-value store as `ubiq kv watch` reports it, one per line:
/// NSUbiquitousKeyValueStoreDidChangeExternallyNotification's reason and changed keys.
public struct KeyValueNotice: Codable, Sendable, Equatable {
    public enum Reason: String, Codable, Sendable {
        /// Another device changed these keys (or this device's write was overtaken).
        case serverChange
        /// The first read of the store on this device (a fresh cache): every key it found.
        case initialSync
        /// A write of this device was refused by the server for a limit; the key shows the
        /// server's value again.
        case quotaViolation
        /// The mount shows another account than the cache showed before.
        case accountChange
    }
    public var reason: Reason
    public var keys: [String]
    public init(_ reason: Reason, keys: [String]) {
        self.reason = reason
        self.keys = keys
    }

    /// `{"reason":…,"keys":[…]}`: in this order, slashes as they are, as the line is documented.
    public func json() throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .withoutEscapingSlashes
        return Data(#"{"reason":"\#(reason.rawValue)","keys":"#.utf8) + (try encoder.encode(keys)) + Data("}".utf8)
    }
}
