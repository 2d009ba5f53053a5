/// The stable identity of an item in a container. Opaque to clients; the root folder of every
/// container is `ItemID.root`.
public struct ItemID: Hashable, Sendable, Codable, CustomStringConvertible, RawRepresentable {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }

    public static let root = ItemID("root")

    /// 128 random bits, hex: unguessable and collision-free without coordination.
    public static func random() -> ItemID {
        var generator = SystemRandomNumberGenerator()
        let hi = generator.next() as UInt64
        let lo = generator.next() as UInt64
        return ItemID(hex(hi) + hex(lo))
    }

    /// Item IDs travel in URL paths: accept only what we hand out (and `root`).
    public var isWellFormed: Bool {
        !rawValue.isEmpty && rawValue.utf8.count <= 64
            && rawValue.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x7A) }
    }

    public var description: String { rawValue }

    public init(from decoder: any Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(String.self)
    }
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(rawValue)
    }
}

/// The server's revision of an item. Every committed change to an item (content, name,
/// parent, xattrs, deletion) gives it a new one, and revisions increase within a container
/// (docs/SYNC_PROTOCOL.md): a client can tell a late echo of an old state from a new change.
public struct Revision: Hashable, Sendable, Codable, CustomStringConvertible, RawRepresentable {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public var description: String { rawValue }

    /// True when `self` was committed after `other`. Revisions are decimal sequence numbers.
    public func isNewer(than other: Revision) -> Bool {
        guard let a = UInt64(rawValue), let b = UInt64(other.rawValue) else { return self != other }
        return a > b
    }

    public init(from decoder: any Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(String.self)
    }
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(rawValue)
    }
}

/// A position in a container's change log. Opaque; `ChangeCursor.start` precedes every change.
public struct ChangeCursor: Hashable, Sendable, Codable, CustomStringConvertible, RawRepresentable {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public static let start = ChangeCursor("0")
    public var description: String { rawValue }

    /// The change-log position this cursor stands for. A server writes a cursor as the plain
    /// decimal number of the last change it covers, and only that spelling is a cursor: "+1"
    /// or "01" would be answered and then echoed back as a cursor nobody handed out.
    public var position: Int64? {
        guard let n = Int64(rawValue), n >= 0, String(n) == rawValue else { return nil }
        return n
    }

    public init(from decoder: any Decoder) throws {
        rawValue = try decoder.singleValueContainer().decode(String.self)
    }
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(rawValue)
    }
}

/// The identifier of a container, like iCloud's `iCloud.com.example.app`.
public struct ContainerID: Hashable, Sendable, Codable, CustomStringConvertible {
    public static let maxByteCount = 128
    public static let `default` = ContainerID(unchecked: "default")

    public struct Invalid: Error, Equatable, Sendable, CustomStringConvertible {
        public let value: String
        public var description: String {
            "container identifiers are 1 to \(ContainerID.maxByteCount) characters of A-Z a-z 0-9 . _ -"
        }
    }

    public let rawValue: String

    public init(_ rawValue: String) throws(Invalid) {
        let ok = !rawValue.isEmpty && rawValue.utf8.count <= Self.maxByteCount
            && rawValue.utf8.allSatisfy { b in
                (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A)
                    || b == UInt8(ascii: ".") || b == UInt8(ascii: "_") || b == UInt8(ascii: "-")
            }
            && rawValue != "." && rawValue != ".."
        guard ok else { throw Invalid(value: rawValue) }
        self.rawValue = rawValue
    }

    init(unchecked: String) { self.rawValue = unchecked }

    public var description: String { rawValue }

    public init(from decoder: any Decoder) throws {
        let raw = try decoder.singleValueContainer().decode(String.self)
        do { try self.init(raw) } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.description))
        }
    }
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(rawValue)
    }
}

@inline(__always)
func hex(_ value: UInt64) -> String {
    let s = String(value, radix: 16)
    return String(repeating: "0", count: 16 - s.count) + s
}
