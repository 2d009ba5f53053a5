import Foundation
import ItemModel
import LocalState
import Logging
import SyncAPI
import Synchronization

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
    /// Who holds descriptors of the cache files (the file system's open handles).
    let holders = Mutex<WeakHolders>(WeakHolders())

    struct WeakHolders: Sendable {
        weak var value: (any CacheFileHolders)?
    }

    /// Tells `holders` when a stale copy's cache file is replaced and when a download completes.
    public func attach(holders: any CacheFileHolders) {
        self.holders.withLock { $0.value = holders }
    }

    init(remote: any RemoteStore, cache: ContentCache, store: LocalStore, observer: any MountObserver, logger: Logger, onFinished: @escaping @Sendable (Int64) -> Void) {
        self.observer = observer
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

    /// Where a read stands against the running download of one version.
    public enum ReadPosition: Sendable, Equatable {
        /// No download of that version runs.
        case notRunning
        /// Its bytes have landed: the file's size.
        case landed(size: Int64)
        /// Ahead of the download's front: its bytes are still to come.
        case ahead

        public var landedSize: Int64? {
            if case .landed(let size) = self { size } else { nil }
        }
    }

    /// Where the bytes of `count` from `offset` (clamped to the file) stand in a running
    /// download of `digest`, in one look at the table: readers behind the download's front are
    /// answered without waiting and without the database, and those ahead of it wait for it.
    public func position(_ ino: Int64, digest: ContentDigest, from offset: Int64, count: Int) -> ReadPosition {
        state.withLock { s in
            guard let a = s.active[ino], a.digest == digest else { return .notRunning }
            let range = offset..<(offset + Int64(count))
            return a.ranges.contains(range.clamped(to: 0..<a.size)) ? .landed(size: a.size) : .ahead
        }
    }

    /// Waits for the bytes of `count` from `offset` when a download of `digest` runs; false
    /// (at once) when none does. Throws when that download fails or is cancelled.
    public func waitIfRunning(_ ino: Int64, digest: ContentDigest, from offset: Int64, count: Int) async throws -> Bool {
        try await waitIfRunning(offset..<(offset + Int64(count)), of: ino, digest: digest)
    }

    /// `addWaiter`, awaited: true once `range` has landed, false at once when no download (of
    /// `digest`, when given) runs.
    func waitIfRunning(_ range: Range<Int64>, of ino: Int64, digest: ContentDigest?) async throws -> Bool {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Bool, Error>) in
            let registered = addWaiter(range, of: ino, digest: digest) { _, error in
                if let error { c.resume(throwing: error) } else { c.resume(returning: true) }
            }
            switch registered {
            case .notRunning: c.resume(returning: false)
            case .landed: c.resume(returning: true)
            case .waiting: break
            }
        }
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
            await self.runSequential(ino: ino, digest: digest, size: size, generation: generation, fd: fd, sink: sink, head: head)
        }
        state.withLock { $0.active[ino]?.task = task }
    }

    /// Returns once `range` of the file is in the cache file (or throws why it never will be).
    public func wait(for range: Range<Int64>, of item: LocalItem) async throws {
        start(item)
        try await wait(for: range, ofRunning: item.ino)
    }

    /// Returns once `range` has landed; at once when no download of the file runs.
    func wait(for range: Range<Int64>, ofRunning ino: Int64) async throws {
        // Not downloading: either finished (the caller re-checks the item) or never started.
        _ = try await waitIfRunning(range, of: ino, digest: nil)
    }

    /// What `addWaiter` did.
    enum Registration {
        /// No download of that version runs: `resume` will not be called.
        case notRunning
        /// The range has landed already: `resume` will not be called.
        case landed(size: Int64)
        /// `resume` will be called once, with the file's size and nil when the range landed,
        /// else with why it never will.
        case waiting
    }

    /// Registers `resume` for `range` (clamped to the file) of the running download of `ino`,
    /// of `digest` when given. A reader far ahead of the sequential stream gets a fetch of its
    /// own, so a seek does not wait for the whole prefix.
    func addWaiter(_ range: Range<Int64>, of ino: Int64, digest: ContentDigest?, resume: @escaping @Sendable (Int64, Error?) -> Void) -> Registration {
        let (registration, priority) = state.withLock { s -> (Registration, (ContentDigest, Range<Int64>, UInt64)?) in
            guard var active = s.active[ino], digest == nil || active.digest == digest else { return (.notRunning, nil) }
            let clamped = range.clamped(to: 0..<active.size)
            if active.ranges.contains(clamped) { return (.landed(size: active.size), nil) }
            let size = active.size
            active.waiters.append(Waiter(range: clamped) { error in resume(size, error) })
            var priority: (ContentDigest, Range<Int64>, UInt64)?
            let streamed = active.ranges.ranges.first.map { $0.lowerBound == 0 ? $0.upperBound : 0 } ?? 0
            if clamped.lowerBound > streamed + Self.priorityDistance,
               !active.priorityFetches.contains(where: { $0.contains(clamped.lowerBound) }) {
                let start = clamped.lowerBound & ~((1 << 20) - 1)
                let fetch = start..<min(active.size, start + Self.priorityLength)
                active.priorityFetches.append(fetch)
                priority = (active.digest, fetch, active.generation)
            }
            s.active[ino] = active
            return (.waiting, priority)
        }
        if let (digest, fetch, generation) = priority {
            Task { await self.runPriority(ino: ino, digest: digest, range: fetch, generation: generation) }
        }
        return registration
    }

    /// For an open or a read ahead of the running download of `digest`, with no task waiting:
    /// false at once when none runs. Else `done` gets the file's size once the bytes of
    /// `count` from `offset` have landed (at once, on this thread, when they have; otherwise
    /// on the thread that landed them), or nil when the download failed or was cancelled
    /// first.
    public func whenLanded(_ ino: Int64, digest: ContentDigest, from offset: Int64, count: Int, _ done: @escaping @Sendable (Int64?) -> Void) -> Bool {
        let registered = addWaiter(offset..<(offset + Int64(count)), of: ino, digest: digest) { size, error in
            // Landed: at once, on the landing thread (the point of this call). Not landed:
            // on a thread of its own, since a cancel may come from inside a transaction or
            // a writer's lock, and the caller then releases a handle and starts a task.
            if error == nil { done(size) } else { DispatchQueue.global().async { done(nil) } }
        }
        switch registered {
        case .notRunning: return false
        case .landed(let size): done(size)
        case .waiting: break
        }
        return true
    }

    public func cancel(_ ino: Int64) { cancel(ino, generation: nil) }

    /// Cancels every download, recording nothing: the daemon is stopping, and a download cut
    /// by that is no failure of the server (its connections were about to be closed, which
    /// would have read as "the server cannot be reached"). What they fetched is dropped at the
    /// next start (`SyncEngine.dropLeftoverContent`).
    public func cancelAll() {
        for ino in state.withLock({ Array($0.active.keys) }) { cancel(ino) }
    }

    /// Cancels the download of `ino`, only if it is that `generation` when one is given.
    func cancel(_ ino: Int64, generation: UInt64?) {
        end(ino, generation: generation, telling: EngineError.cancelled)?.task?.cancel()
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
        if let holders = holders.withLock({ $0.value }), !holders.willReplaceStaleCopy(ino) { return false }
        // Unlinked before the row says placeholder: an open that reads the row as a placeholder
        // opens (or creates) the new file, which the download then sizes in place.
        cache.remove(ino)
        let ours = (try? store.write { w -> Bool in
            guard var now = try w.reader.item(ino), now.content == .stale else { return false }
            now.content = .placeholder
            now.cachedBytes = 0
            try w.update(now)
            return now.serverDigest == digest
        }) ?? false
        observer.invalidate([.inode(ino)])
        return ours
    }

    /// The rest of a download `start` began: its head (asked for already), then everything after it.
    func runSequential(
        ino: Int64, digest: ContentDigest, size: Int64, generation: UInt64, fd: Int32, sink: CacheFileSink,
        head: @Sendable () async throws -> Void
    ) async {
        do {
            try await head()
            let headEnd = min(size, Self.headLength)
            if headEnd < size { try await remote.download(digest, range: headEnd..<size, receive: sink.receive) }
            guard sink.finish() == size else { throw EngineError.io("the download ended early", EIO) }
            // Checked once everything landed, from the page cache, on a thread of its own: the
            // hash costs as much CPU as the rest of the transfer, and hashing on the connection's
            // thread halved the rate at which readers get their bytes. The file becomes
            // `current` only after this check, as before.
            guard try await Self.digest(ofFile: fd, size: size) == digest else { throw EngineError.digestMismatch }
            finish(ino, digest: digest, generation: generation, error: nil)
        } catch EngineError.digestMismatch {
            finish(ino, digest: digest, generation: generation, error: EngineError.digestMismatch)
            await refreshAfterMismatch(ino)
        } catch {
            finish(ino, digest: digest, generation: generation, error: error)
        }
    }

    /// A download failed its digest check. The row may hold a size or digest that is not the
    /// server's (an update of it lost along the way): ask the server, and unless local changes
    /// wait to go up, take its content's size, digest and time, so that the next open fetches
    /// the right bytes. The row's revision stays: later changes arrive on the feed as usual.
    func refreshAfterMismatch(_ ino: Int64) async {
        guard let item = try? store.read({ try $0.item(ino) }), item.revision != nil,
              let current = try? await remote.item(item.itemID) else { return }
        let repaired = (try? store.write { w -> Bool in
            guard var now = try w.reader.item(ino), now.itemID == current.id, now.kind == .file, now.content != .dirty,
                  try w.reader.pendingOps(for: ino) == 0, now.size != current.size || now.serverDigest != current.digest
            else { return false }
            now.size = current.size
            now.serverDigest = current.digest
            now.modified = current.modified
            now.downloadError = nil
            try w.update(now)
            return true
        }) ?? false
        if repaired {
            logger.notice("a download failed its check; the item's size and digest were refreshed from the server", metadata: ["item.ino": "\(ino)"])
            observer.invalidate([.inode(ino)])
        }
    }

    func runPriority(ino: Int64, digest: ContentDigest, range: Range<Int64>, generation: UInt64) async {
        do {
            let fd = try cache.open(ino)
            defer { close(fd) }
            let sink = CacheFileSink(fd: fd, at: range.lowerBound) { [self] landedRange in landed(ino, landedRange) }
            try register(sink, ino: ino, generation: generation)
            try await remote.download(digest, range: range, receive: sink.receive)
        } catch {
            // The sequential stream still covers this range; its outcome decides.
            logger.debug("priority fetch failed", metadata: ["item.ino": "\(ino)", "error": "\(error)"])
        }
    }

    /// SHA-256 of the first `size` bytes of `fd`, computed on a dispatch thread so that no
    /// thread of the cooperative pool is held for the second a large file takes.
    static func digest(ofFile fd: Int32, size: Int64) async throws -> ContentDigest {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global(qos: .utility).async {
                continuation.resume(with: Result {
                    let (digest, length) = try ContentCache.sha256(of: fd, limit: size, dropBehind: true)
                    guard length == size else { throw EngineError.io("cannot read back a download", EIO) }
                    return digest
                })
            }
        }
    }

    /// Attaches a writer to its download, or throws `cancelled` when that download has ended.
    func register(_ sink: CacheFileSink, ino: Int64, generation: UInt64) throws {
        let attached = state.withLock { s -> Bool in
            guard s.active[ino]?.generation == generation else { return false }
            s.active[ino]!.sinks.append(sink)
            return true
        }
        guard attached else { throw EngineError.cancelled }
    }

    func landed(_ ino: Int64, _ range: Range<Int64>) {
        let ready = state.withLock { s -> [Waiter] in
            guard var active = s.active[ino] else { return [] }
            active.ranges.insert(range)
            let (done, waiting) = active.waiters.partitioned { active.ranges.contains($0.range) }
            active.waiters = waiting
            s.active[ino] = active
            return done
        }
        for w in ready { w.resume(nil) }
    }

    func finish(_ ino: Int64, digest: ContentDigest, generation: UInt64, error: Error?) {
        // A cancelled download's outcome is nobody's business: a later download of the file
        // may be running under the same inode number.
        guard let size = state.withLock({ s in s.active[ino].flatMap { $0.generation == generation ? $0.size : nil } }) else { return }
        // Record the outcome before waking readers, so that they see the final state.
        let message = error.map { ($0 as? EngineError)?.description ?? ($0 as? RemoteError).map(describe) ?? "\($0)" }
        do {
            try store.write { w in
                // A requested download ends here, unless the server could not be reached or
                // refused the token: then it goes on once the connection is back (also after a
                // restart).
                if (error as? RemoteError)?.meansOffline != true { try w.dropDownloadRequest(ino) }
                guard var item = try w.reader.item(ino), item.content != .dirty else { return }
                if let message {
                    item.downloadError = message
                    if item.content != .current && item.content != .stale { item.content = .placeholder; item.cachedBytes = 0 }
                } else {
                    item.downloadError = nil
                    item.content = item.serverDigest == digest ? .current : .stale
                    item.cachedBytes = size
                    item.lastAccess = SyncEngine.now()
                }
                try w.update(item)
            }
        } catch {
            logger.error("cannot record a download", metadata: ["item.ino": "\(ino)", "error": "\(error)"])
        }
        if error == nil {
            if let holders = holders.withLock({ $0.value }) { holders.downloadCompleted(ino, digest: digest) }
            state.withLock { $0.retries.succeeded(ino) }
        } else {
            // The pass that comes when the pause ends may start it again.
            let due = state.withLock { $0.retries.failed(ino, digest: digest, at: .now) }
            let onFinished = onFinished
            Task {
                try? await Task.sleep(until: due)
                onFinished(ino)
            }
        }
        // On failure the sparse file stays (as a placeholder's): an open reader's descriptor
        // keeps pointing at the file a retry will fill.
        let failure: Error? = error.map { e in
            if let r = e as? RemoteError { return EngineError.offline(describe(r)) }
            return e
        }
        end(ino, generation: generation, telling: failure)
        onFinished(ino)
    }
}

func describe(_ error: RemoteError) -> String {
    switch error {
    case .unreachable: "the server cannot be reached"
    case .unauthorized: "the server refused the login token"
    case .refused(_, let message, _): message
    case .protocolError(let m): m
    }
}

extension Array {
    func partitioned(_ isFirst: (Element) -> Bool) -> ([Element], [Element]) {
        var a: [Element] = [], b: [Element] = []
        for e in self { if isFirst(e) { a.append(e) } else { b.append(e) } }
        return (a, b)
    }
}

/// Writes a download's bytes into its cache file as the transport delivers them (on its
/// thread), and reports each range that landed.
///
/// `cancel` waits for a write in progress and stops every later one. That matters because the
/// next download of a placeholder or partial file truncates the same cache file in place (open
/// readers keep their descriptor): a late write of the old version must never land in the new one.
///
/// Unchecked Sendable: every stored var is read and written under `lock`.
final class CacheFileSink: @unchecked Sendable {
    var fd: Int32
    let lock = NSLock()
    var offset: Int64
    var cancelled = false
    let landed: @Sendable (Range<Int64>) -> Void

    init(fd: Int32, at offset: Int64, landed: @escaping @Sendable (Range<Int64>) -> Void) {
        self.fd = fd
        self.offset = offset
        self.landed = landed
    }

    /// A sink whose file is still being made: it holds its lock, so the transport's first
    /// `receive` waits (on the transport's thread, for the microseconds the file takes) until
    /// `attach` or `attachFailed`, which the creating thread must call.
    init(at offset: Int64, landed: @escaping @Sendable (Range<Int64>) -> Void) {
        self.fd = -1
        self.offset = offset
        self.landed = landed
        lock.lock()
    }

    func attach(_ fd: Int32) {
        self.fd = fd
        lock.unlock()
    }

    func attachFailed() {
        cancelled = true
        lock.unlock()
    }

    /// Called in order, one part after another, by the transport.
    @Sendable func receive(_ bytes: UnsafeRawBufferPointer) throws {
        lock.lock()
        defer { lock.unlock() }
        guard !cancelled else { throw EngineError.cancelled }
        try Self.write(bytes, fd: fd, at: offset)
        let range = offset..<(offset + Int64(bytes.count))
        offset = range.upperBound
        landed(range)
    }

    func cancel() {
        lock.lock()
        cancelled = true
        lock.unlock()
    }

    /// The offset after the last byte written.
    func finish() -> Int64 {
        lock.lock()
        defer { lock.unlock() }
        return offset
    }

    static func write(_ bytes: UnsafeRawBufferPointer, fd: Int32, at offset: Int64) throws {
        var done = 0
        while done < bytes.count {
            let n = pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset + Int64(done)))
            if n < 0 {
                if errno == EINTR { continue }
                throw EngineError.io("cannot write the cache file", errno)
            }
            done += n
        }
    }
}
