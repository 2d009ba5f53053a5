import Crypto
import Foundation
import ItemModel
import LocalState
import Logging
import SyncAPI
import Synchronization

/// Downloads content into cache files, and lets readers wait for just the bytes they need.
///
/// One sequential stream per file fills the sparse cache file from the start and hashes as it
/// goes; a reader far ahead of it gets its own ranged fetch, so a seek does not wait for the
/// whole prefix. Concurrent readers of one file share its download.
///
/// Guarded by `state` (one Mutex); continuations are resumed after the lock is released.
public final class Downloads: Sendable {
    struct Waiter {
        let range: Range<Int64>
        let continuation: CheckedContinuation<Void, Error>
    }

    struct Active {
        let digest: ContentDigest
        let size: Int64
        var ranges = ByteRanges()
        var waiters: [Waiter] = []
        var priorityFetches: [Range<Int64>] = []
        var task: Task<Void, Never>?
    }

    struct Table {
        var active: [Int64: Active] = [:]
        /// Downloads of each item that ended (successfully or not).
        var finished: [Int64: Int] = [:]
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

    init(remote: any RemoteStore, cache: ContentCache, store: LocalStore, logger: Logger, onFinished: @escaping @Sendable (Int64) -> Void) {
        self.remote = remote
        self.cache = cache
        self.store = store
        self.logger = logger
        self.onFinished = onFinished
    }

    /// Progress of a running download, for the status attributes.
    public func progress(_ ino: Int64) -> (bytes: Int64, size: Int64)? {
        state.withLock { s in s.active[ino].map { ($0.ranges.total, $0.size) } }
    }

    /// True when `range` of a running download's file has landed in its cache file (readers
    /// behind the download front are answered without waiting).
    public func hasLanded(_ ino: Int64, _ range: Range<Int64>) -> Bool {
        state.withLock { s in
            guard let a = s.active[ino] else { return false }
            return a.ranges.contains(range.clamped(to: 0..<a.size))
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
        guard let seen = state.withLock({ s -> Int? in s.active[ino] == nil ? s.finished[ino, default: 0] : nil }) else { return }
        guard let fresh = try? store.read({ try $0.item(ino) }), fresh.kind == .file,
              fresh.content == .placeholder || fresh.content == .partial || fresh.content == .stale,
              let digest = fresh.serverDigest
        else { return }
        let size = fresh.size
        let shouldStart = state.withLock { s -> Bool in
            if s.active[ino] != nil || s.finished[ino, default: 0] != seen { return false }
            s.active[ino] = Active(digest: digest, size: size)
            return true
        }
        guard shouldStart else { return }
        do {
            try cache.prepareSparse(ino, size: size)
        } catch {
            finish(ino, digest: digest, error: error)
            return
        }
        let task = Task { await self.runSequential(ino: ino, digest: digest, size: size) }
        state.withLock { $0.active[ino]?.task = task }
    }

    /// Returns once `range` of the file is in the cache file (or throws why it never will be).
    public func wait(for range: Range<Int64>, of item: LocalItem) async throws {
        let ino = item.ino
        start(item)
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, Error>) in
            let (ready, priority) = state.withLock { s -> (Bool, (ContentDigest, Range<Int64>)?) in
                guard var active = s.active[ino] else { return (true, nil) }
                let clamped = range.clamped(to: 0..<active.size)
                if active.ranges.contains(clamped) { return (true, nil) }
                active.waiters.append(Waiter(range: clamped, continuation: c))
                var priority: (ContentDigest, Range<Int64>)?
                let streamed = active.ranges.ranges.first.map { $0.lowerBound == 0 ? $0.upperBound : 0 } ?? 0
                if clamped.lowerBound > streamed + Self.priorityDistance,
                   !active.priorityFetches.contains(where: { $0.contains(clamped.lowerBound) }) {
                    let start = clamped.lowerBound & ~((1 << 20) - 1)
                    let fetch = start..<min(active.size, start + Self.priorityLength)
                    active.priorityFetches.append(fetch)
                    priority = (active.digest, fetch)
                }
                s.active[ino] = active
                return (false, priority)
            }
            if ready {
                // Not downloading: either finished (the caller re-checks the item) or never started.
                c.resume()
            } else if let (digest, fetch) = priority {
                Task { await self.runPriority(ino: ino, digest: digest, range: fetch) }
            }
        }
    }

    public func cancel(_ ino: Int64) {
        let active = state.withLock { s -> Active? in
            guard let a = s.active.removeValue(forKey: ino) else { return nil }
            s.finished[ino, default: 0] += 1
            return a
        }
        active?.task?.cancel()
        for w in active?.waiters ?? [] { w.continuation.resume(throwing: EngineError.cancelled) }
    }

    func runSequential(ino: Int64, digest: ContentDigest, size: Int64) async {
        var hasher = SHA256()
        var offset: Int64 = 0
        do {
            let fd = try cache.open(ino)
            defer { close(fd) }
            for try await chunk in remote.download(digest, range: 0..<size) {
                try Task.checkCancellation()
                try Self.write(chunk, fd: fd, at: offset)
                hasher.update(data: chunk)
                let range = offset..<(offset + Int64(chunk.count))
                offset += Int64(chunk.count)
                landed(ino, range)
            }
            guard offset == size else { throw EngineError.io("the download ended early", EIO) }
            guard ContentDigest(bytes: hasher.finalize()) == digest else { throw EngineError.digestMismatch }
            finish(ino, digest: digest, error: nil)
        } catch {
            finish(ino, digest: digest, error: error)
        }
    }

    func runPriority(ino: Int64, digest: ContentDigest, range: Range<Int64>) async {
        do {
            let fd = try cache.open(ino)
            defer { close(fd) }
            var offset = range.lowerBound
            for try await chunk in remote.download(digest, range: range) {
                try Self.write(chunk, fd: fd, at: offset)
                let landedRange = offset..<(offset + Int64(chunk.count))
                offset += Int64(chunk.count)
                landed(ino, landedRange)
            }
        } catch {
            // The sequential stream still covers this range; its outcome decides.
            logger.debug("priority fetch failed", metadata: ["item.ino": "\(ino)", "error": "\(error)"])
        }
    }

    static func write(_ chunk: [UInt8], fd: Int32, at offset: Int64) throws {
        var done = 0
        try chunk.withUnsafeBytes { buf in
            while done < buf.count {
                let n = pwrite(fd, buf.baseAddress! + done, buf.count - done, off_t(offset + Int64(done)))
                if n < 0 {
                    if errno == EINTR { continue }
                    throw EngineError.io("cannot write the cache file", errno)
                }
                done += n
            }
        }
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
        for w in ready { w.continuation.resume() }
    }

    func finish(_ ino: Int64, digest: ContentDigest, error: Error?) {
        // Record the outcome before waking readers, so that they see the final state.
        let message = error.map { ($0 as? EngineError)?.description ?? ($0 as? RemoteError).map(describe) ?? "\($0)" }
        let size = state.withLock { $0.active[ino]?.size } ?? 0
        do {
            try store.write { w in
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
        // On failure the sparse file stays (as a placeholder's): an open reader's descriptor
        // keeps pointing at the file a retry will fill.
        let active = state.withLock { s -> Active? in
            s.finished[ino, default: 0] += 1
            return s.active.removeValue(forKey: ino)
        }
        let failure: Error? = error.map { e in
            if let r = e as? RemoteError { return EngineError.offline(describe(r)) }
            return e
        }
        for w in active?.waiters ?? [] {
            if let failure { w.continuation.resume(throwing: failure) } else { w.continuation.resume() }
        }
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
