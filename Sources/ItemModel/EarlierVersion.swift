/// A content a file had before another replaced it, kept by the server for as long as its
/// operator says (`ubiq-server --keep-versions`): what `ubiq versions --all` lists and
/// `ubiq restore` makes current again. Its content is a blob like any other, shared by digest.
public struct EarlierVersion: Codable, Hashable, Sendable {
    /// The revision of the file that had this content.
    public var revision: Revision
    public var digest: ContentDigest
    public var size: Int64
    /// The content's modification time.
    public var modified: Timestamp
    /// When another content replaced it.
    public var replaced: Timestamp
    /// The device that saved this content (`CreateItemRequest.device`); nil when the writer
    /// named none (an API client), or the content is older than the server's record of devices.
    public var device: String?

    public init(revision: Revision, digest: ContentDigest, size: Int64, modified: Timestamp, replaced: Timestamp, device: String? = nil) {
        self.device = device
        self.revision = revision
        self.digest = digest
        self.size = size
        self.modified = modified
        self.replaced = replaced
    }
}
