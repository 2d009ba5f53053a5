import Foundation
import Crypto
import _CryptoExtras
import ItemModel

/// Password and token hashing. Passwords are stored as scrypt hashes; bearer tokens are 256
/// random bits handed to the client once and stored as SHA-256 (a token is already high
/// entropy, so a fast hash suffices and lookups stay one indexed read).
public enum Credentials {
    /// scrypt N = 2^15, r = 8, p = 1: OWASP's minimum, about 30 ms here.
    static let scryptRounds = 1 << 15

    public static func hashPassword(_ password: String) throws -> String {
        var salt = [UInt8](repeating: 0, count: 16)
        var generator = SystemRandomNumberGenerator()
        for i in salt.indices { salt[i] = generator.next() }
        let key = try derive(password, salt: salt, rounds: scryptRounds)
        return "scrypt$\(scryptRounds)$8$1$\(Data(salt).base64EncodedString())$\(Data(key).base64EncodedString())"
    }

    /// A hash no password matches, verified for unknown users so that they take as long as
    /// known ones.
    public static let decoyHash: String = (try? hashPassword(Credentials.newToken())) ?? ""

    public static func verifyPassword(_ password: String, against stored: String) -> Bool {
        let parts = stored.split(separator: "$").map(String.init)
        guard parts.count == 6, parts[0] == "scrypt", let rounds = Int(parts[1]),
              let salt = Data(base64Encoded: parts[4]), let expected = Data(base64Encoded: parts[5]),
              let key = try? derive(password, salt: Array(salt), rounds: rounds)
        else { return false }
        // Constant-time comparison.
        guard key.count == expected.count else { return false }
        return zip(key, expected).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }

    static func derive(_ password: String, salt: [UInt8], rounds: Int) throws -> [UInt8] {
        let key = try KDF.Scrypt.deriveKey(
            from: Array(password.utf8), salt: salt, outputByteCount: 32, rounds: rounds, blockSize: 8, parallelism: 1)
        return key.withUnsafeBytes { Array($0) }
    }

    /// A new bearer token: 256 random bits, URL-safe text.
    public static func newToken() -> String {
        var generator = SystemRandomNumberGenerator()
        var bytes = [UInt8](repeating: 0, count: 32)
        for i in bytes.indices { bytes[i] = generator.next() }
        return Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    public static func hashToken(_ token: String) -> String {
        ContentDigest.of(Array(token.utf8)).hex
    }
}
