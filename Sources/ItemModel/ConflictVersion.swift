/// An edit of a file that reached the server after another edit from the same base: kept beside
/// the file's current content until someone chooses (`NSFileVersion`'s unresolved conflict
/// versions). Its content is a blob like any other, shared by digest.
public struct ConflictVersion: Hashable, Sendable, Codable {
    /// Chosen by the device that sends it, as item IDs are: a retried send adds nothing twice.
    public var id: ItemID
    public var digest: ContentDigest
    public var size: Int64
    /// The device whose edit it is (its `--device` name).
    public var device: String
    /// The edit's modification time.
    public var modified: Timestamp
    /// The revision the edit was made from.
    public var base: Revision

    public init(id: ItemID, digest: ContentDigest, size: Int64, device: String, modified: Timestamp, base: Revision) {
        self.id = id
        self.digest = digest
        self.size = size
        self.device = device
        self.modified = modified
        self.base = base
    }

    /// The longest device name a version carries: it becomes part of a file name at `--keep-both`.
    public static let maxDeviceBytes = 64
}
