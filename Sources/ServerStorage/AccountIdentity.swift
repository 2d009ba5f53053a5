import Foundation

/// An account's identity: opaque, stable and different for every account, so that a client can
/// tell "the same account" apart from "the same name" (an account removed and added again, the
/// same name on another server) whatever URL or token it reached the server by.
///
/// 32 random bytes, in lowercase hex: made when the account is added and stored with it, never
/// derived from the name. Not a secret: it grants nothing.
public enum AccountIdentity {
    public static let byteCount = 32

    public static func random() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<byteCount).map { _ in
            let byte = UInt8.random(in: 0...255, using: &generator)
            return String(format: "%02x", byte)
        }.joined()
    }

    /// 64 lowercase hex digits: what `random()` makes.
    public static func isWellFormed(_ text: String) -> Bool {
        text.utf8.count == byteCount * 2 && text.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
    }
}
