import ItemModel

/// Who holds descriptors of cache files: the file system's open handles. A handle's descriptor
/// stays on the file it opened, so the holder must know when that file is whole and when a new
/// version goes into a new file.
public protocol CacheFileHolders: AnyObject, Sendable {
    /// The download of `digest` is complete and checked: descriptors that followed it hold it whole.
    func downloadCompleted(_ ino: Int64, digest: ContentDigest)
    /// A stale copy's cache file is about to be unlinked and a new version downloaded into a
    /// new one: descriptors open on the old file keep it. False refuses (a writer has it open).
    func willReplaceStaleCopy(_ ino: Int64) -> Bool
}
