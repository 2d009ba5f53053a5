import CacheFiles
import ItemModel
import LocalState
import OpenFiles

/// What the file system asks of whoever keeps its content in step with the server: the sync
/// engine, which the composition root conforms to this. Owned here, so that the file system
/// knows the engine only through these calls. Files in use are shared through `OpenFiles`.
public protocol ContentSource: AnyObject, Sendable {
    // MARK: Readers

    /// Makes sure the first bytes of a file can be read, starting its download: opening a
    /// placeholder that cannot be downloaded fails at once instead of hanging a later read.
    func prepareForReading(_ item: LocalItem) async throws
    /// Waits until `range` of the file's current server version is readable from its cache
    /// file (`ContentError` says why not).
    func waitForContent(_ item: LocalItem, range: Range<Int64>) async throws
    /// Starts downloading the item's server version now, for a reader that opened it.
    func downloadNow(_ item: LocalItem)
    /// Starts the download of a placeholder and calls `done(true)` once its first bytes are in
    /// the cache file, on the thread that wrote them; `done(false)` when they will not come
    /// from this download.
    func whenFirstBytesLand(_ item: LocalItem, _ done: @escaping @Sendable (Bool) -> Void)
    /// Where a read of `count` bytes at `offset` stands against the running download of `digest`.
    func readPosition(_ ino: Int64, digest: ContentDigest, from offset: Int64, count: Int) -> ReadPosition
    /// Calls `done` with the cache file's size once the range has landed (on the thread that
    /// landed it), or nil when the download ended first; false when no download of that
    /// version runs.
    func whenLanded(_ ino: Int64, digest: ContentDigest, from offset: Int64, count: Int, _ done: @escaping @Sendable (Int64?) -> Void) -> Bool
    /// Waits for the range when a download of `digest` runs; false when none does.
    func waitIfDownloading(_ ino: Int64, digest: ContentDigest, from offset: Int64, count: Int) async throws -> Bool
    func cancelDownload(_ ino: Int64)
    /// How far the file's running download is, in percent; nil when none runs.
    func downloadPercent(_ ino: Int64) -> Int?
    var isConnected: Bool { get }

    // MARK: Requests

    func setPinned(_ ino: Int64, _ pinned: Bool) throws
    /// Asks for the item's content (a folder's: everything below it) to be downloaded.
    func startDownload(_ ino: Int64) throws
    /// Drops the local content of clean files, keeping their placeholders (`EvictRefusal`).
    func evict(_ ino: Int64) throws

    // MARK: Word of local changes

    /// A local change was queued: the uploader wakes.
    func outboxChanged()
    /// Local content changed in size: the cache limit and the disk-full reserve are looked at again.
    func contentChangedLocally()
    /// A descriptor of the file was closed: what its close left to do.
    func fileClosed(_ ino: Int64, then after: OpenFiles.AfterClose)
    func didAccess(_ ino: Int64)
    /// The kernel's pages and size of the file are not what the daemon holds (an append went to
    /// the file's end, past where the kernel put it): it must read them again.
    func kernelPagesAreStale(_ ino: Int64)
    /// An access not yet written to the database, for the attributes (atime).
    func unsavedAccess(_ ino: Int64) -> Timestamp?
    /// An access time set explicitly (utimensat) replaces the accesses not yet written.
    func forgetUnsavedAccess(_ ino: Int64)
}
