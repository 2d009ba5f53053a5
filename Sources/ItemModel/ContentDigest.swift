import Crypto
import Foundation

/// The SHA-256 of a file's content, as 64 lowercase hex digits. Content is stored once per digest.
public struct ContentDigest: Hashable, Sendable, Codable, CustomStringConvertible {
    public struct Invalid: Error, Equatable, Sendable, CustomStringConvertible {
        public let value: String
        public var description: String { "a content digest is 64 lowercase hex digits (SHA-256)" }
    }

    public let hex: String

    public init(hex: String) throws(Invalid) {
        guard hex.utf8.count == 64,
              hex.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) })
        else { throw Invalid(value: hex) }
        self.hex = hex
    }

    /// The SHA-256 of `bytes`: how content gets its digest, on the server and in the mount.
    public static func of(_ bytes: some DataProtocol) -> ContentDigest { ContentDigest(SHA256.hash(data: bytes)) }

    /// From a finished SHA-256: taking the hash's own type, not any bytes, is what keeps a
    /// digest 64 hex digits long.
    public init(_ digest: SHA256.Digest) {
        self.init(uncheckedBytes: digest)
    }

    private init(uncheckedBytes bytes: some Sequence<UInt8>) {
        var s = ""
        s.reserveCapacity(64)
        for b in bytes {
            let digits = Array("0123456789abcdef".utf8)
            s.unicodeScalars.append(UnicodeScalar(digits[Int(b >> 4)]))
            s.unicodeScalars.append(UnicodeScalar(digits[Int(b & 0xF)]))
        }
        self.hex = s
    }

    /// SHA-256 of the empty string: the content of every new empty file.
    public static let empty = try! ContentDigest(hex: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")

    public var description: String { hex }

    public init(from decoder: any Decoder) throws {
        let raw = try decoder.singleValueContainer().decode(String.self)
        do { try self.init(hex: raw) } catch {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: error.description))
        }
    }
    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        try c.encode(hex)
    }
}
