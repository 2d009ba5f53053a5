import Foundation
import ItemModel

/// Where an item's content is on this device. The mount's status attributes are derived from it.
public enum ContentState: String, Sendable, Codable, Hashable, CaseIterable {
    /// A placeholder: metadata only, no bytes on disk (a download under way keeps its ranges
    /// in the cache file and says so in memory, not here).
    case placeholder
    /// The cache file holds the server's current revision.
    case current
    /// The cache file holds an older revision: the server has newer content.
    case stale
    /// The cache file holds local changes that are not (all) on the server yet.
    case dirty

    /// The cache file holds the whole of the version this device shows: reads need nothing
    /// from the server.
    public var isWhole: Bool { self == .current || self == .dirty }

    /// The server's current content is not (all) here: a download would fetch it.
    public var needsDownload: Bool { self == .placeholder || self == .stale }
}

/// One item of the mount, as the local database keeps it.
///
/// `ino` is the local identity and the inode number the kernel sees: handed out once
/// (AUTOINCREMENT) and never reused. `itemID` is the server identity; for items created on this
/// device it is chosen here, so a retried create is idempotent.
public struct LocalItem: Sendable, Hashable {
    public var ino: Int64
    public var itemID: ItemID
    /// nil for the root only.
    public var parent: Int64?
    public var name: String
    public var kind: ItemKind
    /// The size the mount shows: the local content's size when dirty, else the server's.
    public var size: Int64
    public var mode: UInt32
    public var uid: UInt32
    public var gid: UInt32
    public var created: Timestamp
    public var modified: Timestamp
    /// Status change time (`st_ctime`): any local or remote change to the item.
    public var changed: Timestamp
    public var xattrs: [String: Data]
    /// The server revision this local state is based on; nil until the item is on the server.
    public var revision: Revision?
    /// The digest of the content at `revision` (the base of local edits).
    public var serverDigest: ContentDigest?
    public var content: ContentState
    /// Bytes of content present in the cache file (for `st_blocks` and the cache limit).
    public var cachedBytes: Int64
    public var pinned: Bool
    public var lastAccess: Timestamp
    public var downloadError: String?
    public var uploadError: String?
    /// The server's conflict versions of the file, unresolved: edits kept beside its content.
    public var conflicts: [ConflictVersion]
    /// A link's target (`SymlinkTarget`); nil for every other kind.
    public var target: String?

    /// A file whose content as shown is on the server only (a placeholder, or a cache file of
    /// an older version): it can go up again only by naming the server's digest.
    public var contentOnlyOnServer: Bool { kind == .file && content.needsDownload }

    public init(
        ino: Int64 = 0, itemID: ItemID, parent: Int64?, name: String, kind: ItemKind, size: Int64, mode: UInt32,
        uid: UInt32 = 0, gid: UInt32 = 0, created: Timestamp, modified: Timestamp, changed: Timestamp,
        xattrs: [String: Data] = [:], revision: Revision? = nil, serverDigest: ContentDigest? = nil,
        content: ContentState, cachedBytes: Int64 = 0, pinned: Bool = false, lastAccess: Timestamp = 0,
        downloadError: String? = nil, uploadError: String? = nil, conflicts: [ConflictVersion] = [], target: String? = nil
    ) {
        self.target = target
        self.ino = ino
        self.itemID = itemID
        self.parent = parent
        self.name = name
        self.kind = kind
        self.size = size
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.created = created
        self.modified = modified
        self.changed = changed
        self.xattrs = xattrs
        self.revision = revision
        self.serverDigest = serverDigest
        self.content = content
        self.cachedBytes = cachedBytes
        self.pinned = pinned
        self.lastAccess = lastAccess
        self.downloadError = downloadError
        self.uploadError = uploadError
        self.conflicts = conflicts
    }

    public static let rootIno: Int64 = 1

    /// The stored name of the read-only folder that shows the files' conflict versions (see
    /// docs/SEMANTICS.md, "Conflicts"): a name no item can have (it holds a slash), so no item
    /// of the container ever meets it. The mount shows it at its top as `versionsFolderShownName`.
    public static let versionsFolderName = "/versions"
    /// Looked up by name, never listed: as ZFS's `.zfs`, it stays out of `find`, `ls -a` and
    /// copies of the whole tree.
    public static let versionsFolderShownName = ConflictVersion.folderName

    /// Takes the server's revision of the item, and what every revision carries besides its
    /// content and place: the file's conflict versions.
    public mutating func takeRevision(of server: ItemMetadata) {
        revision = server.revision
        conflicts = server.conflicts
    }
}

/// A change queued for the server. Ops are sent in `seq` order; each uses the item's state at
/// the time it is sent, so repeated edits of one item coalesce.
public enum OutboxOp: String, Sendable, Codable, Hashable {
    /// Create a folder or a link on the server: an item without content to send.
    case create
    /// Upload a file's content (creating the file on the server when it is new).
    case content
    /// Send the item's current name and parent.
    case move
    /// Send mode and modification time.
    case attributes
    /// Send the synced extended attributes.
    case xattrs
    /// Delete the item on the server (the local row is already gone).
    case delete
    /// Send the resolution of the file's conflicts chosen here (`LocalReader.resolution(of:)`).
    case resolve
}

public struct OutboxEntry: Sendable, Hashable {
    public var seq: Int64
    public var ino: Int64
    public var op: OutboxOp
    /// For `.delete`: the server identity and revision of the deleted item.
    public var itemID: ItemID?
    public var revision: Revision?
    public var attempts: Int
    public var lastError: String?
    /// Not before this time (backoff after a failure).
    public var notBefore: Timestamp
}
