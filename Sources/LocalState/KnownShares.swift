import Foundation
import GRDB
import ItemModel

/// A share of an item as this mount last heard of it (`ubiq share`, `ubiq share --list`): what
/// `user.ubiq.shares` shows, without asking the server.
public struct KnownShare: Sendable, Hashable, Codable {
    public var token: String
    public var itemID: ItemID
    public var url: String
    public var expires: Timestamp?

    public init(token: String, itemID: ItemID, url: String, expires: Timestamp?) {
        self.token = token
        self.itemID = itemID
        self.url = url
        self.expires = expires
    }
}

extension LocalReader {
    /// The item's shares not expired at `now`, oldest first.
    public func knownShares(of itemID: ItemID, at now: Timestamp) throws -> [KnownShare] {
        try Row.fetchAll(
            try db.cachedStatement(sql: "SELECT * FROM known_shares WHERE item_id = ? AND (expires IS NULL OR expires > ?) ORDER BY rowid"),
            arguments: [itemID.rawValue, now]
        ).map { KnownShare(token: $0["token"], itemID: ItemID($0["item_id"] as String), url: $0["url"], expires: $0["expires"]) }
    }
}

extension LocalWriter {
    public func noteShare(_ share: KnownShare) throws {
        try db.execute(
            sql: "INSERT OR REPLACE INTO known_shares (token, item_id, url, expires) VALUES (?, ?, ?, ?)",
            arguments: [share.token, share.itemID.rawValue, share.url, share.expires])
    }

    public func forgetShares(of itemID: ItemID) throws {
        try db.execute(sql: "DELETE FROM known_shares WHERE item_id = ?", arguments: [itemID.rawValue])
    }

    /// The server's whole list, in place of what was known.
    public func replaceKnownShares(_ shares: [KnownShare]) throws {
        try db.execute(sql: "DELETE FROM known_shares")
        for share in shares { try noteShare(share) }
    }
}
