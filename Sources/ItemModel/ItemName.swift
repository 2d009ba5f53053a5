/// A validated name of one item inside a folder.
///
/// The rules are the server's and the mount's alike (docs/SEMANTICS.md, "Items and names"): a
/// name is never mangled to make it fit; it is accepted as it is or refused with a reason.
public struct ItemName: Hashable, Sendable, CustomStringConvertible, Comparable {
    /// 255 bytes: the longest name Linux file systems (and `NAME_MAX`) accept.
    public static let maxByteCount = 255

    public enum Invalid: Error, Equatable, Sendable, CustomStringConvertible {
        case empty
        case dotOrDotDot
        case containsSlash
        case containsNUL
        case notUTF8
        case tooLong(byteCount: Int)

        public var description: String {
            switch self {
            case .empty: "the name is empty"
            case .dotOrDotDot: "'.' and '..' are not names"
            case .containsSlash: "the name contains '/'"
            case .containsNUL: "the name contains a NUL byte"
            case .notUTF8: "the name is not valid UTF-8"
            case .tooLong(let n): "the name is \(n) bytes long; at most \(ItemName.maxByteCount) are allowed"
            }
        }
    }

    public let rawValue: String

    /// Validates raw bytes, as they come from the kernel or a URL.
    public init(bytes: some Collection<UInt8>) throws(Invalid) {
        if bytes.isEmpty { throw .empty }
        if bytes.contains(0) { throw .containsNUL }
        if bytes.contains(UInt8(ascii: "/")) { throw .containsSlash }
        if bytes.count > Self.maxByteCount { throw .tooLong(byteCount: bytes.count) }
        guard let string = String(validating: Array(bytes), as: UTF8.self) else { throw .notUTF8 }
        if string == "." || string == ".." { throw .dotOrDotDot }
        self.rawValue = string
    }

    public init(_ string: String) throws(Invalid) {
        try self.init(bytes: Array(string.utf8))
    }

    public var description: String { rawValue }

    public static func < (lhs: ItemName, rhs: ItemName) -> Bool {
        // Byte order, like `ls` in the C locale, so listings are stable everywhere.
        lhs.rawValue.utf8.lexicographicallyPrecedes(rhs.rawValue.utf8)
    }

    /// True for names that are local-only on the mount (`.nosync`).
    public var isNoSync: Bool { rawValue.hasSuffix(".nosync") }
}
