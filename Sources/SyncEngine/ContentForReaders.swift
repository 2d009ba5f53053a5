import CacheFiles
import ItemModel
import LocalState

/// What the file system asks of the engine for its readers: the waits of an open and a read
/// for content, and where a read stands against a running download. The file system reaches
/// downloads only through these.
extension SyncEngine {
    /// Starts downloading `item`'s server version now, for a reader that opened it (unless it
    /// runs already).
    public func downloadNow(_ item: LocalItem) { downloads.start(item) }

    public func cancelDownload(_ ino: Int64) { downloads.cancel(ino) }

    /// Where a read of `count` bytes at `offset` stands against the running download of
    /// version `digest`.
    public func readPosition(_ ino: Int64, digest: ContentDigest, from offset: Int64, count: Int) -> ReadPosition {
        downloads.position(ino, digest: digest, from: offset, count: count)
    }

    /// Calls `done` with the cache file's size once the range has landed (on the thread that
    /// landed it), or nil when the download ended first; false when no download of that
    /// version runs.
    public func whenLanded(_ ino: Int64, digest: ContentDigest, from offset: Int64, count: Int, _ done: @escaping @Sendable (Int64?) -> Void) -> Bool {
        downloads.whenLanded(ino, digest: digest, from: offset, count: count, done)
    }

    /// Waits for the range when a download of version `digest` runs; false when none does.
    public func waitIfDownloading(_ ino: Int64, digest: ContentDigest, from offset: Int64, count: Int) async throws -> Bool {
        try await downloads.waitIfRunning(ino, digest: digest, from: offset, count: count)
    }

    /// Makes sure the first bytes of a file can be read, starting its download: opening a
    /// placeholder that cannot be downloaded fails at once instead of hanging a later read.
    public func prepareForReading(_ item: LocalItem) async throws {
        guard item.kind == .file, item.content.needsDownload else { return }
        try await waitForContent(item, range: 0..<min(item.size, Self.firstBytes))
    }

    /// Starts the download of a placeholder (unless it runs) and calls `done(true)` once its
    /// first bytes (`firstBytes`) are in the cache file, on the thread that wrote them; `done(false)`
    /// when they will not come from this download (`waitForContent` then says why, or retries).
    public func whenFirstBytesLand(_ item: LocalItem, _ done: @escaping @Sendable (Bool) -> Void) {
        guard let digest = item.serverDigest else { return done(false) }
        downloads.start(item)
        let waiting = downloads.whenLanded(item.ino, digest: digest, from: 0, count: Int(min(item.size, Self.firstBytes))) { done($0 != nil) }
        if !waiting { done(false) }
    }

    /// What an open of a placeholder waits for: the start of the file, which is what most
    /// readers look at first (a file type's magic number, a header).
    public static let firstBytes: Int64 = 4096

    /// Waits until `range` of the file's current server version is readable from its cache file.
    ///
    /// A remote change may replace the version being fetched (its download is cancelled and a
    /// new one starts), so this looks again a few times; it fails only when a download of the
    /// current version failed (the reason is in `downloadingError`).
    public func waitForContent(_ item: LocalItem, range: Range<Int64>) async throws {
        for _ in 0..<8 {
            guard let row = try store.read({ try $0.item(item.ino) }) else { throw ContentError.notFound }
            if row.content.isWhole { return }
            do {
                try await downloads.wait(for: range, of: row)
            } catch ContentError.cancelled {
                continue
            }
            // Which download runs is looked at before the row: a download writes its outcome to
            // the row and only then leaves the table, so a row read after this look holds the
            // outcome of any download the look did not find running. The other way round, a
            // download that ended between the two reads left an old row, with the error of an
            // earlier attempt: a read right after a reconnect failed with EIO (seen once, under
            // a whole test run's load).
            let running = downloads.activeDigest(item.ino)
            guard let after = try store.read({ try $0.item(item.ino) }) else { throw ContentError.notFound }
            if after.content.isWhole { return }
            if let running, running == after.serverDigest { return }
            if running == nil, let error = after.downloadError, after.serverDigest == row.serverDigest {
                throw ContentError.offline(error)
            }
        }
        throw ContentError.offline("the content kept changing while it was being downloaded")
    }
}
