import CacheFiles
import Foundation
import ItemModel
import LocalState
import Logging
import OpenFiles
import Synchronization

/// Downloads content into cache files, and lets readers wait for just the bytes they need.
///
/// One sequential stream per file (its 128 KiB head, then the rest) fills the sparse cache file
/// from the start, and the file is checked against its digest once complete; a reader far ahead of the stream gets its own
/// ranged fetch, so a seek does not wait for the whole prefix. Concurrent readers of one file share its download.
///
/// Guarded by `state` (one Mutex); waiters are called after the lock is released (a waiter that
/// is told its range landed runs on the thread that landed it, inside that writer's lock).
public final class Downloads: Sendable {
    struct Waiter {
        let range: Range<Int64>
        /// Called once, outside `state`'s lock: nil when the range landed, else why it never will.
        let resume: @Sendable (Error?) -> Void
    }

    struct Active {
        let digest: ContentDigest
        let size: Int64
        var ranges = ByteRanges()
        var waiters: [Waiter] = []
        var priorityFetches: [Range<Int64>] = []
        var task: Task<Void, Never>?
        /// Identifies this download among later ones of the same file.
        let generation: UInt64
        /// Every writer into the cache file, cancelled (waited for) when the download ends.
        var sinks: [CacheFileSink] = []
        /// For its events (`announceStart`): the file's path, and when progress last went out.
        var path: String?
        var lastProgress: ContinuousClock.Instant?
    }

    struct Table {
        var active: [Int64: Active] = [:]
        /// Downloads of each item that ended (successfully or not) while a `start` was between
        /// its two looks at this table; emptied when none is, so that it does not keep an entry
        /// for every file the mount ever downloaded.
        var finished: [Int64: Int] = [:]
        /// `start`s between their two looks at the table.
        var startsLooking = 0
        var nextGeneration: UInt64 = 0
        var retries = DownloadRetries()
    }

    let state = Mutex(Table())
    let remote: any RemoteStore
    let cache: ContentCache
    let store: LocalStore
    let logger: Logger
    let onFinished: @Sendable (Int64) -> Void

    /// A reader more than 8 MiB past the sequential stream gets its own fetch of 4 MiB: about
    /// what the stream delivers in a few milliseconds on loopback, so smaller gaps just wait.
    static let priorityDistance: Int64 = 8 << 20
    static let priorityLength: Int64 = 4 << 20
    /// What a first read of a file asks for (the kernel's first readahead window is at most this).
    static let headLength: Int64 = 128 << 10

    let observer: any MountObserver
    /// Who holds descriptors of the cache files: told when a stale copy's cache file is
    /// replaced and when a download completes.
    let openFiles: OpenFiles

    init(remote: any RemoteStore, cache: ContentCache, store: LocalStore, openFiles: OpenFiles, observer: any MountObserver, logger: Logger, onFinished: @escaping @Sendable (Int64) -> Void) {
        self.observer = observer
        self.openFiles = openFiles
        self.remote = remote
        self.cache = cache
        self.store = store
        self.logger = logger
        self.onFinished = onFinished
    }

    /// False while the pause after a failed download of this version runs (`DownloadRetries`):
    /// the background does not start it then.
    func retryIsDue(_ item: LocalItem) -> Bool {
        state.withLock { $0.retries.isDue(item.ino, digest: item.serverDigest, at: .now) }
    }

    /// Files waiting out a pause after a failed download.
    var pausedRetries: Int { state.withLock { $0.retries.entries.count } }

    func forgetFailedRetries() {
        state.withLock { $0.retries.forgetAll() }
    }

    /// Progress of a running download, for the status attributes.
    public func progress(_ ino: Int64) -> (bytes: Int64, size: Int64)? {
        state.withLock { s in s.active[ino].map { ($0.ranges.total, $0.size) } }
    }

    /// The digest a running download fetches.
    public func activeDigest(_ ino: Int64) -> ContentDigest? {
        state.withLock { $0.active[ino]?.digest }
    }

    public var activeCount: Int { state.withLock { $0.active.count } }

    /// Starts downloading an item's server content unless it is under way or already here.
    ///
    /// The database decides "already here", read afresh: `finish` records the outcome before it
    /// drops its entry and counts it in `finished`, so a download that ended between our look
    /// at the table and our insert is noticed, and a finished file is never truncated and
    /// fetched again under a reader.
    public func start(_ item: LocalItem) {
        let ino = item.ino
        // A download of a version the server has replaced is of no use to anyone any more.
        if let digest = item.serverDigest, let running = state.withLock({ $0.active[ino]?.digest }), running != digest {
            cancel(ino)
        }
        guard let seen = state.withLock({ s -> Int? in
            guard s.active[ino] == nil else { return nil }
            s.startsLooking += 1
            return s.finished[ino, default: 0]
        }) else { return }
        var looking = true
        func stopLooking(_ s: inout Table) {
            guard looking else { return }
            looking = false
            s.startsLooking -= 1
            if s.startsLooking == 0 { s.finished.removeAll(keepingCapacity: true) }
        }
        defer { state.withLock { stopLooking(&$0) } }
        guard let fresh = try? store.read({ try $0.item(ino) }), fresh.kind == .file,
              fresh.content.needsDownload,
              let digest = fresh.serverDigest
        else { return }
        let size = fresh.size
        let generation = state.withLock { s -> UInt64? in
            let ended = s.finished[ino, default: 0] != seen
            stopLooking(&s)
            if s.active[ino] != nil || ended { return nil }
            s.nextGeneration += 1
            s.active[ino] = Active(digest: digest, size: size, generation: s.nextGeneration)
            return s.nextGeneration
        }
        guard let generation else { return }
        if fresh.content == .stale {
            guard replaceStaleCopy(ino, digest: digest) else { return cancel(ino, generation: generation) }
        } else if openFiles.willRefill(ino, for: digest) {
            // Unlinked, not emptied: descriptors of another version keep their bytes.
            cache.remove(ino)
            observer.invalidate([.inode(ino)])
        }
        // The head is asked for first, from this thread (an open's, waiting for it), before
        // the cache file is made: the request's round trip then covers the file's creation,
        // and no task has to be scheduled first. Its answer ends at once, so the server's
        // thread goes idle and the one waiting for the first bytes runs at once; in one stream
        // the server went on to send the next megabytes, and on two cores the waiting thread,
        // woken on the server's CPU, waited a millisecond for it. The sink holds back bytes
        // that arrive before it has its file (`attach`).
        let sink = CacheFileSink(at: 0) { [self] range in landed(ino, range) }
        let head = remote.beginDownload(digest, range: 0..<min(size, Self.headLength), receive: sink.receive)
        let fd: Int32
        do {
            fd = try cache.openSparse(ino, size: size)
            do { try register(sink, ino: ino, generation: generation) } catch { close(fd); throw error }
        } catch {
            sink.attachFailed()
            finish(ino, digest: digest, generation: generation, error: error)
            return
        }
        sink.attach(fd)
        let task = Task {
            defer { close(fd) }
            self.announceStart(ino, generation: generation)
            await self.runSequential(ino: ino, digest: digest, size: size, generation: generation, fd: fd, sink: sink, head: head)
        }
        state.withLock { $0.active[ino]?.task = task }
    }

    public func cancel(_ ino: Int64) { cancel(ino, generation: nil) }

    /// Cancels the download of `ino` unless it fetches `kept` (a version the server has now: a
    /// download of it started after the change was applied is of use).
    func cancel(_ ino: Int64, unlessItFetches kept: ContentDigest?) {
        guard let generation = state.withLock({ s in s.active[ino].flatMap { $0.digest == kept ? nil : $0.generation } }) else { return }
        cancel(ino, generation: generation)
    }

    /// Cancels every download, recording nothing: the daemon is stopping, and a download cut
    /// by that is no failure of the server (its connections were about to be closed, which
    /// would have read as "the server cannot be reached"). What they fetched is dropped at the
    /// next start (`SyncEngine.dropLeftoverContent`).
    public func cancelAll() {
        for ino in state.withLock({ Array($0.active.keys) }) { cancel(ino) }
    }

    /// Cancels the download of `ino`, only if it is that `generation` when one is given.
    func cancel(_ ino: Int64, generation: UInt64?) {
        end(ino, generation: generation, telling: ContentError.cancelled)?.task?.cancel()
    }

    /// Drops the download of `ino` (only that `generation`, when given) and counts it as ended,
    /// stops its writers, and tells its waiters `outcome` (nil: their bytes landed). Returns
    /// it, or nil when no such download runs.
    @discardableResult
    func end(_ ino: Int64, generation: UInt64?, telling outcome: Error?) -> Active? {
        let active = state.withLock { s -> Active? in
            guard let a = s.active[ino], generation == nil || a.generation == generation else { return nil }
            s.active[ino] = nil
            // Only a `start` between its looks asks whether a download ended meanwhile.
            if s.startsLooking > 0 { s.finished[ino, default: 0] += 1 }
            return a
        }
        for sink in active?.sinks ?? [] { sink.cancel() }
        // A slot for queued downloads is free, also when this one was cancelled (`finish`,
        // which says so too, never runs then).
        if active != nil { onFinished(ino) }
        for w in active?.waiters ?? [] { w.resume(outcome) }
        return active
    }

    /// Before a stale copy is downloaded again: its cache file is unlinked, not truncated, so
    /// that descriptors open on it keep reading the whole old version, and the new version goes
    /// into a file of its own. The row becomes a placeholder: the device no longer holds a
    /// whole copy. False when it must not happen now (a writer has the file open, and writes
    /// into that cache file) or when the row moved on meanwhile.
    func replaceStaleCopy(_ ino: Int64, digest: ContentDigest) -> Bool {
        if !openFiles.willReplaceStaleCopy(ino) { return false }
        // Unlinked before the row says placeholder: an open that reads the row as a placeholder
        // opens (or creates) the new file, which the download then sizes in place.
        cache.remove(ino)
        let ours = (try? store.write { w -> Bool in
            guard var row = try w.reader.item(ino), row.content == .stale else { return false }
            row.content = .placeholder
            row.cachedBytes = 0
            try w.update(row)
            return row.serverDigest == digest
        }) ?? false
        observer.invalidate([.inode(ino)])
        return ours
    }

    /// Attaches a writer to its download, or throws `cancelled` when that download has ended.
    func register(_ sink: CacheFileSink, ino: Int64, generation: UInt64) throws {
        let attached = state.withLock { s -> Bool in
            guard s.active[ino]?.generation == generation else { return false }
            s.active[ino]!.sinks.append(sink)
            return true
        }
        guard attached else { throw ContentError.cancelled }
    }
}
