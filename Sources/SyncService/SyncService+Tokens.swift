import Foundation
import ItemModel
import ServerStorage
import SyncAPI

/// How long a bearer token lives: `lifetime` from its last use (sliding expiry). A use is
/// written down only once `renewAfter` has passed since the last one written, so that checking
/// a token stays a read: a token is then valid for between `lifetime - renewAfter` and
/// `lifetime` after its last use.
public struct TokenPolicy: Sendable {
    public static let defaultLifetime: Duration = .seconds(90 * 86_400)

    public let lifetime: Timestamp

    public init(lifetime: Duration = TokenPolicy.defaultLifetime) {
        self.lifetime = lifetime.components.seconds * 1_000_000_000 + lifetime.components.attoseconds / 1_000_000_000
    }

    /// A tenth of the lifetime, at most an hour.
    var renewAfter: Timestamp { min(lifetime / 10, 3_600 * 1_000_000_000) }

    /// When the token ends. A lifetime shortened since it was last renewed counts from its last use.
    public func expiry(of token: StoredToken) -> Timestamp { min(token.expires, token.used + lifetime) }

    func needsRenewal(_ token: StoredToken, now: Timestamp) -> Bool { now - token.used >= renewAfter }
}

extension SyncService {
    /// A new bearer token for a user and password. `device`: what the client calls itself
    /// (shown by `ubiq-server account tokens`).
    public func issueToken(user: String, password: String, device: String? = nil) async throws -> TokenResponse {
        // The same answer for an unknown user and a wrong password: no account enumeration.
        let found = try await storage.accounts.passwordHash(account: user)
        // An unknown user costs the same scrypt as a wrong password: timing tells nothing either.
        let verified = Credentials.verifyPassword(password, against: found?.1 ?? Credentials.decoyHash)
        guard let (account, _) = found, verified else { throw Self.wrongPassword }
        let token = Credentials.newToken()
        let now = WallClock.now()
        try await storage.accounts.addToken(StoredToken(
            hash: Credentials.hashToken(token), account: account, device: device.map(Self.deviceLabel), created: now, used: now,
            expires: now + tokens.lifetime))
        return TokenResponse(token: token, account: account.name, expires: now + tokens.lifetime)
    }

    public static let wrongPassword = APIError(.invalidCredentials, "unknown user or wrong password")

    /// At most 64 bytes of printable text: it is only ever shown.
    static func deviceLabel(_ text: String) -> String {
        var label = String(text.unicodeScalars.filter { $0.properties.generalCategory != .control }.map(Character.init))
        while label.utf8.count > 64 { label.removeLast() }
        return label
    }

    /// The account a token belongs to; `unauthorized` when there is no such token (never
    /// issued, revoked, or its account removed), `token_expired` when it has ended.
    public func authenticate(tokenHash: String) async throws -> AccountRef {
        guard let token = try await storage.accounts.token(hash: tokenHash) else {
            throw APIError(.unauthorized, "the token is not valid (revoked, or never issued)")
        }
        let now = WallClock.now()
        guard now < tokens.expiry(of: token) else { throw APIError(.tokenExpired, "the token has expired") }
        if tokens.needsRenewal(token, now: now) {
            // A token that cannot be renewed now (a full disk) still serves until its expiry.
            try? await storage.accounts.renewToken(hash: tokenHash, used: now, expires: now + tokens.lifetime)
        }
        return token.account
    }

    /// Revokes the caller's own token (`ubiq logout`).
    public func revokeToken(hash: String) async throws {
        _ = try await storage.accounts.revokeToken(hash: hash)
    }

    /// Deletes the contents queued when their last account was removed, each unless an
    /// account holds it again; with the blob's gate held, as the collection of unused
    /// contents does (`collectBlobs`). Returns how many files went.
    public func deletePendingBlobs() async throws -> Int {
        var removed = 0
        while true {
            let batch = try await storage.metadata.pendingBlobDeletions(limit: 256)
            if batch.isEmpty { return removed }
            for digest in batch {
                if try await removeUnlessGranted(digest) { removed += 1 }
                try await storage.metadata.finishBlobDeletion(digest)
            }
        }
    }
}
