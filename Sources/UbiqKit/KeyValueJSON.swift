import Foundation
import SyncAPI

/// The store's values (one JSON document each, data as `{"$data":"BASE64"}`) as the Swift
/// values NSUbiquitousKeyValueStore hands out: `String`, `Int` (a number written without a
/// fraction or exponent that fits), `Double`, `Bool`, `Data`, `[Any]` and `[String: Any]`.
enum KeyValueJSON {
    indirect enum Value: Decodable {
        case string(String), integer(Int), double(Double), bool(Bool), array([Value]), object([String: Value]), null

        init(from decoder: any Decoder) throws {
            let single = try decoder.singleValueContainer()
            if single.decodeNil() {
                self = .null
            } else if let bool = try? single.decode(Bool.self) {
                self = .bool(bool)
            } else if let integer = try? single.decode(Int.self) {
                self = .integer(integer)
            } else if let double = try? single.decode(Double.self) {
                self = .double(double)
            } else if let string = try? single.decode(String.self) {
                self = .string(string)
            } else if let array = try? single.decode([Value].self) {
                self = .array(array)
            } else {
                self = .object(try single.decode([String: Value].self))
            }
        }

        /// `null` inside an array or a dictionary is `NSNull`, as JSONSerialization gives it.
        var any: Any {
            switch self {
            case .string(let s): s
            case .integer(let i): i
            case .double(let d): d
            case .bool(let b): b
            case .array(let a): a.map(\.any)
            case .object(let o):
                if o.count == 1, case .string(let text)? = o["$data"], let bytes = Data(base64Encoded: text) { bytes } else { o.mapValues(\.any) }
            case .null: NSNull()
            }
        }
    }

    static func value(_ json: Data) -> Any? {
        try? JSONDecoder().decode(Value.self, from: json).any
    }

    /// One JSON document for `value`; throws for what JSON has no form for (a `Date`, a
    /// number that is not finite, a dictionary with keys that are not strings).
    static func document(_ value: Any) throws(UbiqKitError) -> Data {
        Data(try text(value).utf8)
    }

    static func text(_ value: Any) throws(UbiqKitError) -> String {
        // Exact types first: on Linux an NSNumber casts to Bool and to every number type.
        switch value {
        case let string as String: return quoted(string)
        case let bool as Bool where type(of: value) == Bool.self: return bool ? "true" : "false"
        case let number as Int: return String(number)
        case let number as Int64: return String(number)
        case let number as Int32: return String(number)
        case let number as UInt: return String(number)
        case let number as UInt64: return String(number)
        case let number as Double: return try double(number)
        case let number as Float: return try double(Double(number))
        case let data as Data: return String(decoding: KeyValueDocument.data(data), as: UTF8.self)
        case let array as [Any]: return "[" + (try array.map { (element: Any) throws(UbiqKitError) -> String in try text(element) }).joined(separator: ",") + "]"
        case let object as [String: Any]:
            // Sorted: the same dictionary is written as the same bytes, so a write that
            // changes nothing reads back identical on every device.
            let members = try object.keys.sorted().map { (key: String) throws(UbiqKitError) -> String in quoted(key) + ":" + (try text(object[key]!)) }
            return "{" + members.joined(separator: ",") + "}"
        case is NSNull: return "null"
        case let number as NSNumber:
            let double = number.doubleValue
            return double.rounded() == double && abs(double) < 9.0e15 ? String(Int64(double)) : try KeyValueJSON.double(double)
        default: throw .unsupportedValue("a key-value store holds strings, numbers, booleans, data, arrays and dictionaries, not \(type(of: value))")
        }
    }

    static func quoted(_ string: String) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .withoutEscapingSlashes
        return String(decoding: (try? encoder.encode(string)) ?? Data(#""""#.utf8), as: UTF8.self)
    }

    static func double(_ number: Double) throws(UbiqKitError) -> String {
        guard number.isFinite else { throw .unsupportedValue("JSON has no \(number)") }
        // Swift's shortest form that reads back as the same Double; JSON takes every one of them.
        return "\(number)"
    }
}
