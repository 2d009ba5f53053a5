import Foundation
import ItemModel

/// Everything a metadata store holds, row by row, in a form both stores read and write: what
/// `ubiq-server migrate` copies from one store to another, and compares afterwards.
///
/// Values are the stored ones (keys, cursors, revisions, hashes, the change log's JSON as its
/// bytes), so that tokens, cursors and revisions the devices hold stay valid in the copy. The
/// arrays are in a fixed order (`sorted()`), so that two dumps of the same state are equal.
public struct MetadataDump: Sendable, Codable, Equatable {
    public struct Account: Sendable, Codable, Equatable {
        public var key: Int64
        public var name: String
        public var passwordHash: String
        public var created: Int64
        public var identity: String
        public init(key: Int64, name: String, passwordHash: String, created: Int64, identity: String) {
            (self.key, self.name, self.passwordHash, self.created, self.identity) = (key, name, passwordHash, created, identity)
        }
    }

    public struct Token: Sendable, Codable, Equatable {
        public var hash: String
        public var accountKey: Int64
        public var created: Int64
        public var device: String?
        public var used: Int64
        public var expires: Int64
        public init(hash: String, accountKey: Int64, created: Int64, device: String?, used: Int64, expires: Int64) {
            (self.hash, self.accountKey, self.created, self.device, self.used, self.expires) = (hash, accountKey, created, device, used, expires)
        }
    }

    public struct Container: Sendable, Codable, Equatable {
        public var key: Int64
        public var accountKey: Int64
        public var name: String
        public var created: Int64
        /// The highest change-log cursor the container's devices may hold: the next change
        /// gets a higher one. (SQLite's store counts one sequence for every container.)
        public var changeCursor: Int64
        public var keyValueVersion: Int64
        public init(key: Int64, accountKey: Int64, name: String, created: Int64, changeCursor: Int64, keyValueVersion: Int64) {
            (self.key, self.accountKey, self.name, self.created) = (key, accountKey, name, created)
            (self.changeCursor, self.keyValueVersion) = (changeCursor, keyValueVersion)
        }
    }

    public struct Item: Sendable, Codable, Equatable {
        public var containerKey: Int64
        public var item: ItemMetadata
        public var savedBy: String?
        public init(containerKey: Int64, item: ItemMetadata, savedBy: String?) {
            (self.containerKey, self.item, self.savedBy) = (containerKey, item, savedBy)
        }
    }

    public struct Change: Sendable, Codable, Equatable {
        public var containerKey: Int64
        public var seq: Int64
        public var itemID: String
        public var kind: String
        /// The item as the log keeps it, byte for byte.
        public var itemJSON: Data
        public init(containerKey: Int64, seq: Int64, itemID: String, kind: String, itemJSON: Data) {
            (self.containerKey, self.seq, self.itemID, self.kind, self.itemJSON) = (containerKey, seq, itemID, kind, itemJSON)
        }
    }

    public struct Grant: Sendable, Codable, Equatable {
        public var accountKey: Int64
        public var digest: String
        public var size: Int64
        public var granted: Int64
        public init(accountKey: Int64, digest: String, size: Int64, granted: Int64) {
            (self.accountKey, self.digest, self.size, self.granted) = (accountKey, digest, size, granted)
        }
    }

    public struct InlineContent: Sendable, Codable, Equatable {
        public var digest: String
        public var bytes: Data
        public init(digest: String, bytes: Data) { (self.digest, self.bytes) = (digest, bytes) }
    }

    public struct EarlierVersion: Sendable, Codable, Equatable {
        public var containerKey: Int64
        public var itemID: String
        public var revision: Int64
        public var digest: String
        public var size: Int64
        public var modified: Int64
        public var replaced: Int64
        public var device: String?
        public init(containerKey: Int64, itemID: String, revision: Int64, digest: String, size: Int64, modified: Int64, replaced: Int64, device: String?) {
            (self.containerKey, self.itemID, self.revision, self.digest) = (containerKey, itemID, revision, digest)
            (self.size, self.modified, self.replaced, self.device) = (size, modified, replaced, device)
        }
    }

    public struct KeyValue: Sendable, Codable, Equatable {
        public var containerKey: Int64
        public var key: Data
        public var version: Int64
        public var value: Data
        public var removed: Bool
        public init(containerKey: Int64, key: Data, version: Int64, value: Data, removed: Bool) {
            (self.containerKey, self.key, self.version, self.value, self.removed) = (containerKey, key, version, value, removed)
        }
    }

    public struct Share: Sendable, Codable, Equatable {
        public var token: String
        public var containerKey: Int64
        public var itemID: String
        public var name: String
        public var kind: String
        public var created: Int64
        public var expires: Int64?
        public var downloads: Int64
        public init(token: String, containerKey: Int64, itemID: String, name: String, kind: String, created: Int64, expires: Int64?, downloads: Int64) {
            (self.token, self.containerKey, self.itemID, self.name, self.kind) = (token, containerKey, itemID, name, kind)
            (self.created, self.expires, self.downloads) = (created, expires, downloads)
        }
    }

    public struct ShareEntry: Sendable, Codable, Equatable {
        public var token: String
        public var path: String
        public var digest: String
        public var size: Int64
        public var modified: Int64
        public init(token: String, path: String, digest: String, size: Int64, modified: Int64) {
            (self.token, self.path, self.digest, self.size, self.modified) = (token, path, digest, size, modified)
        }
    }

    /// A content whose last account went, waiting for its file to be deleted.
    public struct PendingDeletion: Sendable, Codable, Equatable {
        public var digest: String
        public var queued: Int64
        public init(digest: String, queued: Int64) { (self.digest, self.queued) = (digest, queued) }
    }

    public var accounts: [Account] = []
    public var tokens: [Token] = []
    public var containers: [Container] = []
    public var items: [Item] = []
    public var changes: [Change] = []
    public var grants: [Grant] = []
    public var inlineContents: [InlineContent] = []
    public var earlierVersions: [EarlierVersion] = []
    public var keyValues: [KeyValue] = []
    public var shares: [Share] = []
    public var shareEntries: [ShareEntry] = []
    public var pendingDeletions: [PendingDeletion] = []

    public init() {}

    /// The same rows, each table in the order of its primary key compared byte for byte (a
    /// store's own `ORDER BY` may collate text otherwise).
    public func sorted() -> MetadataDump {
        func b(_ s: String) -> ByteKey { ByteKey(Array(s.utf8)) }
        var d = self
        d.accounts.sort { $0.key < $1.key }
        d.tokens.sort { b($0.hash) < b($1.hash) }
        d.containers.sort { $0.key < $1.key }
        d.items.sort { ($0.containerKey, b($0.item.id.rawValue)) < ($1.containerKey, b($1.item.id.rawValue)) }
        d.changes.sort { ($0.containerKey, $0.seq) < ($1.containerKey, $1.seq) }
        d.grants.sort { ($0.accountKey, b($0.digest)) < ($1.accountKey, b($1.digest)) }
        d.inlineContents.sort { b($0.digest) < b($1.digest) }
        d.earlierVersions.sort { ($0.containerKey, b($0.itemID), $0.revision) < ($1.containerKey, b($1.itemID), $1.revision) }
        d.keyValues.sort { ($0.containerKey, ByteKey(Array($0.key))) < ($1.containerKey, ByteKey(Array($1.key))) }
        d.shares.sort { b($0.token) < b($1.token) }
        d.shareEntries.sort { (b($0.token), b($0.path)) < (b($1.token), b($1.path)) }
        d.pendingDeletions.sort { b($0.digest) < b($1.digest) }
        return d
    }

    /// Bytes ordered as `memcmp` orders them.
    struct ByteKey: Comparable {
        let bytes: [UInt8]
        init(_ bytes: [UInt8]) { self.bytes = bytes }
        static func < (a: ByteKey, b: ByteKey) -> Bool { a.bytes.lexicographicallyPrecedes(b.bytes) }
    }

    /// The first table in which `other` differs from this dump, compared byte for byte (Swift's
    /// `==` on strings takes canonically equivalent names as equal; a copy must not change
    /// one form into the other). Nil when they hold the same rows.
    public func firstDifference(from other: MetadataDump) throws -> String? {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        func same<T: Encodable>(_ a: T, _ b: T) throws -> Bool { try encoder.encode(a) == encoder.encode(b) }
        let (a, b) = (sorted(), other.sorted())
        if try !same(a.accounts, b.accounts) { return "accounts" }
        if try !same(a.tokens, b.tokens) { return "tokens" }
        if try !same(a.containers, b.containers) { return "containers" }
        if try !same(a.items, b.items) { return "items" }
        if try !same(a.changes, b.changes) { return "changes" }
        if try !same(a.grants, b.grants) { return "account contents" }
        if try !same(a.inlineContents, b.inlineContents) { return "inline contents" }
        if try !same(a.earlierVersions, b.earlierVersions) { return "earlier versions" }
        if try !same(a.keyValues, b.keyValues) { return "key-value stores" }
        if try !same(a.shares, b.shares) { return "shares" }
        if try !same(a.shareEntries, b.shareEntries) { return "share entries" }
        if try !same(a.pendingDeletions, b.pendingDeletions) { return "pending deletions" }
        return nil
    }

    /// The contents the rows name and their sizes, except empty ones and those kept inline in
    /// the metadata: what the blob store must hold for every file, conflict version, earlier
    /// version and share to download.
    public var namedContents: [String: Int64] {
        var named: [String: Int64] = [:]
        for entry in items where !entry.item.deleted {
            if let digest = entry.item.digest { named[digest.hex] = entry.item.size }
            for conflict in entry.item.conflicts { named[conflict.digest.hex] = conflict.size }
        }
        for version in earlierVersions { named[version.digest] = version.size }
        for entry in shareEntries { named[entry.digest] = entry.size }
        for inline in inlineContents { named[inline.digest] = nil }
        return named.filter { $0.value > 0 }
    }
}

/// Reads every row of a store (`MetadataDump`), in one snapshot.
public protocol MetadataExporting: Sendable {
    func exportAll() async throws -> MetadataDump
}

/// Writes a dump into an empty store, in one transaction: all of it or nothing.
public protocol MetadataImporting: Sendable {
    func importAll(_ dump: MetadataDump) async throws
}

/// A dump the target store will not take, and why.
public struct ImportRefused: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
