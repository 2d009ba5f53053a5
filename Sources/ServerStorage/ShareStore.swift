import ItemModel

/// One file of a share's snapshot: its content as it was when shared.
public struct ShareEntry: Sendable, Hashable {
    /// Below the shared folder, `/`-separated (`photos/a.jpg`); the empty string for a shared file.
    public var path: String
    public var digest: ContentDigest
    public var size: Int64
    public var modified: Timestamp

    public init(path: String, digest: ContentDigest, size: Int64, modified: Timestamp) {
        self.path = path
        self.digest = digest
        self.size = size
        self.modified = modified
    }
}

/// A read-only snapshot of a file or a folder, published under an unguessable token. It holds
/// its contents: they stay on the server while the share exists, whatever happens to the item.
public struct Share: Sendable, Hashable {
    public var token: String
    public var itemID: ItemID
    /// The item's name when it was shared.
    public var name: String
    /// `.file` or `.folder`.
    public var kind: ItemKind
    public var created: Timestamp
    /// nil: until unshared.
    public var expires: Timestamp?
    public var downloads: Int64
    /// The files, ordered by path.
    public var entries: [ShareEntry]

    public init(token: String, itemID: ItemID, name: String, kind: ItemKind, created: Timestamp, expires: Timestamp?, downloads: Int64 = 0, entries: [ShareEntry]) {
        self.token = token
        self.itemID = itemID
        self.name = name
        self.kind = kind
        self.created = created
        self.expires = expires
        self.downloads = downloads
        self.entries = entries
    }

    public func isExpired(at time: Timestamp) -> Bool { expires.map { time >= $0 } ?? false }
}

/// Where shares are kept. A share's contents count as named (`forgetUnreferencedBlobs` keeps
/// them) for as long as it exists; removing the container or the account removes its shares.
public protocol ShareStore: Sendable {
    func addShare(_ share: Share, in container: ContainerRef) async throws
    /// Any container's share: the public routes know only the token.
    func share(token: String) async throws -> Share?
    /// The container's shares, newest first.
    func shares(in container: ContainerRef) async throws -> [Share]
    /// False when the container has no such share.
    func removeShare(token: String, in container: ContainerRef) async throws -> Bool
    func countDownload(token: String) async throws
}
