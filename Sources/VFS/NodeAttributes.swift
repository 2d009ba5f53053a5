import ItemModel
import LocalState

/// What `stat` shows for an item. Times in nanoseconds since the epoch.
public struct NodeAttributes: Sendable, Hashable {
    public var ino: Int64
    public var kind: ItemKind
    /// Permission bits only; the bridge adds the file type.
    public var mode: UInt32
    public var nlink: UInt32
    public var uid: UInt32
    public var gid: UInt32
    public var size: Int64
    /// 512-byte blocks of content on this device: 0 for a placeholder.
    public var blocks: Int64
    public var atime: Timestamp
    public var mtime: Timestamp
    public var ctime: Timestamp
}

public struct DirectoryEntry: Sendable, Hashable {
    public var name: String
    public var attributes: NodeAttributes
}

/// `statfs`: the cache volume's space, since that is where written content lands first.
public struct VolumeStatistics: Sendable, Hashable {
    public var blockSize: UInt64
    public var blocks: UInt64
    public var blocksFree: UInt64
    public var blocksAvailable: UInt64
    public var files: UInt64
    public var filesFree: UInt64
    public var nameMax: UInt64
}

extension NodeAttributes {
    /// `subfolders`: a folder's, which its link count counts (each one's `..`), as ext4's does.
    init(_ item: LocalItem, liveSize: Int64? = nil, liveModified: Timestamp? = nil, subfolders: Int = 0) {
        let size = liveSize ?? item.size
        let blocks: Int64
        switch item.content {
        case .placeholder: blocks = 0
        // A link's target is in the row, as ext4 keeps a short one in the inode.
        case .current, .stale, .dirty: blocks = item.kind == .file ? (size + 511) / 512 : 0
        }
        self.init(
            ino: item.ino, kind: item.kind, mode: item.mode & 0o7777, nlink: item.kind == .folder ? 2 + UInt32(clamping: subfolders) : 1,
            uid: item.uid, gid: item.gid, size: item.kind == .folder ? 4096 : size, blocks: blocks,
            // Never opened here: its modification time.
            atime: item.lastAccess > 0 ? item.lastAccess : liveModified ?? item.modified, mtime: liveModified ?? item.modified,
            ctime: max(item.changed, liveModified ?? item.modified))
    }
}
