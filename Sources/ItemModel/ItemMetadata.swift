import Foundation

/// Nanoseconds since 1970-01-01T00:00:00Z. POSIX keeps file times to the nanosecond, and a
/// round trip through the server must not change them (`cp -p`, `touch -d`, `make`).
public typealias Timestamp = Int64

/// The wall clock (CLOCK_REALTIME), in the unit file times and the protocol use.
public enum WallClock {
    @Sendable public static func now() -> Timestamp {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1_000_000_000 + Int64(ts.tv_nsec)
    }

    /// `2026-11-26T21:00:00Z`: a time in UTC, ISO 8601, to the second.
    /// A timestamp (nanoseconds since 1970) in ISO 8601, UTC, to the second.
    public static func isoSeconds(of time: Timestamp) -> String { isoSeconds(Int(time / 1_000_000_000)) }

    public static func isoSeconds(_ secondsSince1970: Int) -> String {
        var t = time_t(secondsSince1970)
        var parts = tm()
        gmtime_r(&t, &parts)
        return String(format: "%04d-%02d-%02dT%02d:%02d:%02dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
                      parts.tm_hour, parts.tm_min, parts.tm_sec)
    }
}

/// Everything the server knows about one item, except its content. The same value travels on
/// the wire, sits in the server's metadata store and in the mount's local state.
public struct ItemMetadata: Hashable, Sendable, Codable {
    public var id: ItemID
    /// nil for the container's root folder only.
    public var parentID: ItemID?
    /// The root folder's name is the empty string; every other name is a valid `ItemName`.
    public var name: String
    public var kind: ItemKind
    public var revision: Revision
    /// Content size in bytes; 0 for folders; a link's target length in bytes.
    public var size: Int64
    /// SHA-256 of the content; nil for folders.
    public var digest: ContentDigest?
    /// Permission bits (`chmod`), without the file type bits.
    public var mode: UInt32
    public var created: Timestamp
    public var modified: Timestamp
    /// Synced extended attributes (`user.*` except `user.ubiq.*`); values are raw bytes,
    /// base64 on the wire.
    public var xattrs: [String: Data]
    /// A tombstone: the item was deleted at `revision`. Only the change log shows tombstones.
    public var deleted: Bool
    /// Edits kept beside the current content until resolved, oldest first (files only).
    public var conflicts: [ConflictVersion]
    /// A symbolic link's target (`SymlinkTarget`); nil for every other kind. A link is made
    /// with its target and keeps it: `ln -sf` makes a new link.
    public var target: String?

    public init(
        id: ItemID, parentID: ItemID?, name: String, kind: ItemKind, revision: Revision,
        size: Int64, digest: ContentDigest?, mode: UInt32, created: Timestamp, modified: Timestamp,
        xattrs: [String: Data] = [:], deleted: Bool = false, conflicts: [ConflictVersion] = [], target: String? = nil
    ) {
        self.id = id
        self.parentID = parentID
        self.name = name
        self.kind = kind
        self.revision = revision
        self.size = size
        self.digest = digest
        self.mode = mode
        self.created = created
        self.modified = modified
        self.xattrs = xattrs
        self.deleted = deleted
        self.conflicts = conflicts
        self.target = target
    }

    enum CodingKeys: String, CodingKey {
        case id, parentID, name, kind, revision, size, digest, mode, created, modified, xattrs, deleted, conflicts, target
    }

    /// `conflicts` is left out when there are none, which is nearly always, and `target` for
    /// all but links: listings stay as small as they were.
    ///
    /// The identifiers, the kind and the digest are read as the strings they are on the wire,
    /// not through their own `Decodable`: a nested decoder per field was a large part of
    /// decoding a page of a first sync, thousands of items.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = ItemID(try c.decode(String.self, forKey: .id))
        parentID = try c.decodeIfPresent(String.self, forKey: .parentID).map(ItemID.init(_:))
        name = try c.decode(String.self, forKey: .name)
        let kindText = try c.decode(String.self, forKey: .kind)
        guard let kind = ItemKind(rawValue: kindText) else {
            throw DecodingError.dataCorruptedError(forKey: .kind, in: c, debugDescription: "unknown kind '\(kindText)'")
        }
        self.kind = kind
        revision = Revision(try c.decode(String.self, forKey: .revision))
        size = try c.decode(Int64.self, forKey: .size)
        if let hex = try c.decodeIfPresent(String.self, forKey: .digest) {
            do { digest = try ContentDigest(hex: hex) } catch {
                throw DecodingError.dataCorruptedError(forKey: .digest, in: c, debugDescription: error.description)
            }
        } else {
            digest = nil
        }
        mode = try c.decode(UInt32.self, forKey: .mode)
        created = try c.decode(Timestamp.self, forKey: .created)
        modified = try c.decode(Timestamp.self, forKey: .modified)
        xattrs = try c.decode([String: Data].self, forKey: .xattrs)
        deleted = try c.decode(Bool.self, forKey: .deleted)
        conflicts = try c.decodeIfPresent([ConflictVersion].self, forKey: .conflicts) ?? []
        target = try c.decodeIfPresent(String.self, forKey: .target)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encodeIfPresent(parentID, forKey: .parentID)
        try c.encode(name, forKey: .name)
        try c.encode(kind, forKey: .kind)
        try c.encode(revision, forKey: .revision)
        try c.encode(size, forKey: .size)
        try c.encodeIfPresent(digest, forKey: .digest)
        try c.encode(mode, forKey: .mode)
        try c.encode(created, forKey: .created)
        try c.encode(modified, forKey: .modified)
        try c.encode(xattrs, forKey: .xattrs)
        try c.encode(deleted, forKey: .deleted)
        if !conflicts.isEmpty { try c.encode(conflicts, forKey: .conflicts) }
        try c.encodeIfPresent(target, forKey: .target)
    }

    /// Default permission bits for new items when the creator does not say.
    public static func defaultMode(for kind: ItemKind) -> UInt32 {
        switch kind {
        case .folder: 0o755
        // Linux gives every link 0777 and ignores it.
        case .symlink: 0o777
        case .file, .fifo, .socket: 0o644
        }
    }
}

/// One entry of a container's change log: the state of an item as of `cursor`.
public struct ItemChange: Hashable, Sendable, Codable {
    public enum Kind: String, Sendable, Codable, Hashable {
        /// The item was created or changed; `item` is its new state.
        case upsert
        /// The item was deleted; `item` is its tombstone.
        case delete
    }

    public var cursor: ChangeCursor
    public var kind: Kind
    public var item: ItemMetadata

    public init(cursor: ChangeCursor, kind: Kind, item: ItemMetadata) {
        self.cursor = cursor
        self.kind = kind
        self.item = item
    }
}

/// The rules for synced extended attributes, shared by the server and the mount.
public enum SyncedXattr {
    /// The status attributes are computed per device and never synced (docs/SEMANTICS.md,
    /// "Extended attributes").
    public static let statusPrefix = "user.ubiq."
    public static let maxNameBytes = 255
    /// 64 KiB: the largest value Linux accepts for one attribute (XATTR_SIZE_MAX).
    public static let maxValueBytes = 65_536
    /// 256 KiB in all per item, so that metadata stays small enough to list 10,000 items fast.
    public static let maxTotalBytes = 262_144

    public enum Invalid: Error, Equatable, Sendable, CustomStringConvertible {
        case notUserNamespace(String)
        case statusAttribute(String)
        case nameTooLong(String)
        case valueTooLarge(String)
        case tooLargeInTotal
        /// A NUL cannot be in a name: Linux lists attribute names NUL-separated, so one would
        /// turn into two names on every device.
        case nulInName(String)

        public var description: String {
            switch self {
            case .notUserNamespace(let n): "'\(n)' is not a user.* attribute"
            case .statusAttribute(let n): "'\(n)' is a status attribute and is not synced"
            case .nameTooLong(let n): "attribute name '\(n.prefix(40))…' is longer than \(SyncedXattr.maxNameBytes) bytes"
            case .valueTooLarge(let n): "the value of '\(n)' is larger than \(SyncedXattr.maxValueBytes) bytes"
            case .tooLargeInTotal: "the item's attributes are larger than \(SyncedXattr.maxTotalBytes) bytes in all"
            case .nulInName(let n): "attribute name '\(n.replacingOccurrences(of: "\0", with: "\\0"))' holds a NUL byte"
            }
        }
    }

    public static func validate(_ xattrs: [String: Data]) throws(Invalid) {
        var total = 0
        for (name, value) in xattrs {
            guard name.hasPrefix("user."), name.utf8.count > 5 else { throw .notUserNamespace(name) }
            if name.hasPrefix(statusPrefix) { throw .statusAttribute(name) }
            if name.utf8.contains(0) { throw .nulInName(name) }
            if name.utf8.count > maxNameBytes { throw .nameTooLong(name) }
            if value.count > maxValueBytes { throw .valueTooLarge(name) }
            total += name.utf8.count + value.count
        }
        if total > maxTotalBytes { throw .tooLargeInTotal }
    }
}
