import Foundation
import ItemModel
import LocalState
import Logging
import ServiceLifecycle
import SyncAPI
import Synchronization

public struct EngineConfiguration: Sendable {
    public var deviceName: String
    /// Content beyond this many bytes is evicted (least recently used, clean, closed, unpinned).
    public var cacheLimit: Int64?
    public init(deviceName: String, cacheLimit: Int64? = nil) {
        self.deviceName = deviceName
        self.cacheLimit = cacheLimit
    }
}

/// The mount's sync engine: applies the server's change feed to the local state, sends the
/// outbox to the server, downloads content on demand, keeps the cache within its limit.
///
/// Lock order: `state` is a leaf; no other lock is taken while holding it, and no I/O happens
/// under it. The database serializes its own writes.
public final class SyncEngine: Sendable {
    public let store: LocalStore
    public let remote: any RemoteStore
    public let cache: ContentCache
    public let downloads: Downloads
    let configuration: EngineConfiguration
    let observer: any MountObserver
    let logger: Logger

    struct State {
        var connected = false
        var lastError: String?
        /// Why the server's container is not the one this cache was made from, once seen:
        /// nothing is sent or applied then (see `checkContainer`).
        var foreignContainer: String?
        /// The container was checked against this cache in this run of the mount.
        var containerVerified = false
        /// Set from `generationClock` on every local write to a file: an upload whose file
        /// changed meanwhile is redone. Only files written or uploaded lately have an entry
        /// (see `generation(of:)` and `forgetGenerations(of:)`), so the map does not grow with
        /// every file the mount ever wrote.
        var writeGenerations: [Int64: UInt64] = [:]
        /// The generation the last release or fsync of a writer saved (see `uploadableGeneration`).
        var savedGenerations: [Int64: UInt64] = [:]
        /// One clock for all files: a generation is never handed out twice, so an entry
        /// forgotten and made again never equals a value read before (see `generation(of:)`).
        var generationClock: UInt64 = 0
        var recoveredUnclosedWrites = false
        /// Files an upload recorded as clean while open for writing (see `didWrite`).
        var cleanedWhileOpen: Set<Int64> = []
        /// Files open for writing: never evicted, and their uploads wait for a save (`uploadableGeneration`).
        var openForWriting: [Int64: Int] = [:]
        /// Files open for writing when a server change of them arrived: the change is held
        /// (`held_changes`) until the last writer closes (see `applyHeldChange`).
        var heldForWriters: Set<Int64> = []
        /// A server change is held because it would loop the folders here (see `applyLocked`):
        /// held changes are tried again after each later batch of the feed.
        var heldForLoops = false
        var openCount: [Int64: Int] = [:]
        var uploading: Set<Int64> = []
        var uploadProgress: [Int64: (Int64, Int64)] = [:]
        /// The last change cursor applied or skipped.
        var cursor: ChangeCursor?

        /// The file's write generation. A file with no entry has no write that a release or
        /// fsync did not save (entries are forgotten only with no writer open): it gets a new
        /// one, saved. A snapshot taken before an entry was forgotten therefore never matches
        /// after it; the upload is then only redone, never taken for unchanged.
        mutating func generation(of ino: Int64) -> UInt64 {
            if let g = writeGenerations[ino] { return g }
            generationClock &+= 1
            writeGenerations[ino] = generationClock
            savedGenerations[ino] = generationClock
            return generationClock
        }

        mutating func wrote(_ ino: Int64) {
            generationClock &+= 1
            writeGenerations[ino] = generationClock
        }

        /// Drops the file's generations once no writer has it open: everything written was
        /// saved, and the next `generation(of:)` starts afresh.
        mutating func forgetGenerations(of ino: Int64) {
            guard openForWriting[ino] == nil else { return }
            writeGenerations[ino] = nil
            savedGenerations[ino] = nil
        }
    }

    let state = Mutex(State())
    /// Last opens, kept in memory and written in one transaction by the maintenance pass: an
    /// open must not wait for a durable commit, and an access time lost in a crash only
    /// changes which clean file the cache limit evicts first.
    let accessTimes = Mutex<[Int64: Timestamp]>([:])
    let outboxSignal: AsyncStream<Void>.Continuation
    let outboxSignals: AsyncStream<Void>
    let maintenanceSignal: AsyncStream<Void>.Continuation
    let maintenanceSignals: AsyncStream<Void>

    public init(store: LocalStore, remote: any RemoteStore, cache: ContentCache, configuration: EngineConfiguration, observer: any MountObserver, logger: Logger) {
        self.store = store
        self.remote = remote
        self.cache = cache
        self.configuration = configuration
        self.observer = observer
        self.logger = logger
        (outboxSignals, outboxSignal) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
        (maintenanceSignals, maintenanceSignal) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
        let maintenance = maintenanceSignal
        downloads = Downloads(remote: remote, cache: cache, store: store, observer: observer, logger: logger) { _ in maintenance.yield() }
        outboxSignal.yield()
        maintenanceSignal.yield()
    }

    // MARK: What the file system tells the engine

    /// A local change was queued: wake the uploader.
    public func outboxChanged() { outboxSignal.yield() }

    /// True when the row must be marked as having local changes again: an upload (after an
    /// fsync) recorded the file as clean while its writer kept it open, and the writer's
    /// handle had marked it already.
    @discardableResult
    public func didWrite(_ ino: Int64) -> Bool {
        state.withLock { s in
            s.wrote(ino)
            return s.cleanedWhileOpen.remove(ino) != nil
        }
    }

    public func didOpen(_ ino: Int64, forWriting: Bool) {
        state.withLock { s in
            s.openCount[ino, default: 0] += 1
            if forWriting { s.openForWriting[ino, default: 0] += 1 }
        }
    }

    public func didClose(_ ino: Int64, forWriting: Bool) {
        let held = state.withLock { s -> Bool in
            s.openCount[ino, default: 1] -= 1
            if s.openCount[ino] == 0 { s.openCount[ino] = nil }
            guard forWriting else { return false }
            s.openForWriting[ino, default: 1] -= 1
            guard s.openForWriting[ino] == 0 else { return false }
            s.openForWriting[ino] = nil
            s.cleanedWhileOpen.remove(ino)
            // An upload under way compares its snapshot when it is done, and forgets them then.
            if !s.uploading.contains(ino) { s.forgetGenerations(of: ino) }
            return s.heldForWriters.remove(ino) != nil
        }
        if held { applyHeldChange(of: ino) }
        // The last writer closed: an upload held for it goes now.
        if forWriting && !isOpenForWriting(ino) { outboxSignal.yield() }
        maintenanceSignal.yield()
    }

    /// How many local writes the file has had (in this run of the mount).
    public func writeGeneration(_ ino: Int64) -> UInt64 { state.withLock { $0.generation(of: ino) } }

    /// How many files the engine keeps write generations for: those written or uploaded
    /// lately, not every file the mount ever wrote.
    package var filesWithWriteGenerations: Int { state.withLock { $0.writeGenerations.count } }

    /// An fsync, or the release of a descriptor, recorded the file's writes up to `generation`
    /// and queued them: that version may go up even while another writer keeps the file open.
    public func didSave(_ ino: Int64, generation: UInt64) {
        state.withLock { s in s.savedGenerations[ino] = max(s.savedGenerations[ino] ?? 0, generation) }
        outboxSignal.yield()
    }

    /// The file's write generation when its content may be uploaded now; nil while a writer
    /// has it open and the file was written since the last release or fsync of a writer: the
    /// content may then be half-written (`cat v1 > f` queues v1; a writer that opens f with
    /// `O_TRUNC` right after must not send the empty file in its place). What goes up is
    /// always what a release or fsync saved; with no writer open, every write was followed by
    /// a release (a crash is handled at startup, see `recoverUnclosedWrites`).
    func uploadableGeneration(_ ino: Int64) -> UInt64? {
        state.withLock { s in
            let generation = s.generation(of: ino)
            guard s.openForWriting[ino] != nil, s.savedGenerations[ino] != generation else { return generation }
            return nil
        }
    }

    public func didAccess(_ ino: Int64) {
        let now = Self.now()
        accessTimes.withLock { $0[ino] = now }
    }

    /// An access not yet written to the database, for the attributes (atime).
    public func unsavedAccess(_ ino: Int64) -> Timestamp? { accessTimes.withLock { $0[ino] } }

    func saveAccessTimes() {
        let pending = accessTimes.withLock { $0 }
        guard !pending.isEmpty else { return }
        do {
            try store.write { w in for (ino, time) in pending { try w.noteAccess(ino, at: time) } }
            // Drop only what was written: a newer access stays for the next pass.
            accessTimes.withLock { a in for (ino, time) in pending where a[ino] == time { a[ino] = nil } }
        } catch {
            logger.error("cannot record access times", metadata: ["error": "\(error)"])
        }
    }

    public func isOpen(_ ino: Int64) -> Bool { state.withLock { $0.openCount[ino] != nil } }
    public func isOpenForWriting(_ ino: Int64) -> Bool { state.withLock { $0.openForWriting[ino] != nil } }

    public func contentChangedLocally() { maintenanceSignal.yield() }

    /// The kernel must ask again for an item's attributes (and drop its pages), from the
    /// invalidation service, never inside the request that noticed it.
    public func kernelMustForget(_ ino: Int64) { observer.invalidate([.inode(ino)]) }

    // MARK: Status

    public struct Status: Sendable {
        public var connected: Bool
        public var lastError: String?
        public var pendingUploads: Int
        public var activeDownloads: Int
        public var cachedBytes: Int64
        public var cacheLimit: Int64?
        public var itemCount: Int
    }

    public func status() throws -> Status {
        let (connected, lastError) = state.withLock { ($0.connected, $0.lastError) }
        return try store.read { r in
            Status(connected: connected, lastError: lastError, pendingUploads: try r.outboxCount(),
                   activeDownloads: downloads.activeCount, cachedBytes: try r.cachedBytesTotal(),
                   cacheLimit: configuration.cacheLimit, itemCount: try r.itemCount())
        }
    }

    /// How many changes are still to send (a count, for polling).
    public func unsentCount() throws -> Int { try store.read { try $0.outboxCount() } }

    /// The changes still to send: how many, and the paths of the first `listing` of them.
    public func unsentChanges(listing limit: Int) throws -> (count: Int, paths: [String]) {
        try store.read { r in
            let pending = try r.outbox(limit: 1000)
            return (pending.count, try pending.prefix(limit).compactMap { try r.path(of: $0.ino) })
        }
    }

    public var isConnected: Bool { state.withLock { $0.connected } }

    public func transfer(_ ino: Int64) -> (uploading: Bool, uploadPercent: Int?, downloadPercent: Int?) {
        let (up, progress) = state.withLock { ($0.uploading.contains(ino), $0.uploadProgress[ino]) }
        let down = downloads.progress(ino).map { $0.size == 0 ? 100 : Int($0.bytes * 100 / $0.size) }
        let upPct = progress.map { $0.1 == 0 ? 100 : Int($0.0 * 100 / $0.1) }
        return (up, upPct, down)
    }

    func setConnected(_ connected: Bool, error: String?) {
        let changed = state.withLock { s -> Bool in
            defer { s.connected = connected; s.lastError = error }
            // Whoever answers after a lost connection or a refused token may be another
            // server, or the account added again: the container is checked again first.
            if !connected { s.containerVerified = false }
            return s.connected != connected
        }
        if changed {
            observer.event(MountEvent(kind: connected ? "connected" : "disconnected", detail: error))
            if connected {
                downloads.forgetFailedRetries()
                outboxSignal.yield()
                // Requested and pinned downloads wait while offline (`startWantedDownloads`).
                maintenanceSignal.yield()
            }
        }
    }

    static func now() -> Timestamp { WallClock.now() }

    // MARK: Which container

    /// Asks the server for its container and checks it is the one this cache was made from: the same creation time
    /// (a container made anew, by another server on the same address or by an account removed
    /// and added again, has another), and a change log not behind the one this cache applied
    /// (a server restored from a backup). Any other container's change log and revisions mean
    /// nothing to this cache: syncing with it made this device's uploaded files vanish from it
    /// (hidden, marked uploaded, never sent) and queued endless retries. So nothing is sent or
    /// applied while it differs, and the status says why; local files stay as they are. The
    /// first container seen is recorded.
    ///
    /// This cache's cursor is read before the server is asked: changes applied while the
    /// answer travels must not make the server look behind.
    @discardableResult
    func checkContainer() async throws -> Bool {
        let mine = try lastCursor()
        let info = try await remote.ensureContainer()
        let created = String(info.created)
        let recorded = try store.read { try $0.meta("container_created") }
        var why: String?
        if let recorded, recorded != created {
            why = "the server's container is not the one this cache holds (it was made anew: another server, or the account was removed and added again); nothing is sent or applied and local files are kept; mount with a new --cache folder to use it"
        } else if let mine = mine?.position, let theirs = info.cursor.position, theirs < mine {
            why = "the server's change log is behind this cache's (was it restored from a backup?); nothing is sent or applied and local files are kept; mount with a new --cache folder to start again from the server"
        }
        if recorded == nil { try store.write { w in try w.setMeta("container_created", created) } }
        let wasForeign = state.withLock { s -> Bool in
            defer { s.foreignContainer = why; s.containerVerified = why == nil }
            return s.foreignContainer != nil
        }
        if let why {
            if !wasForeign { logger.error("not syncing with this container", metadata: ["reason": "\(why)"]) }
            setConnected(false, error: why)
            return false
        }
        return true
    }

    /// True when the container was checked since the last lost connection and is the one this
    /// cache holds; asks the server otherwise (again each time while it is another one). False
    /// while it cannot be asked (offline).
    func containerIsOurs() async -> Bool {
        if state.withLock({ $0.containerVerified }) { return true }
        do {
            return try await checkContainer()
        } catch let error as RemoteError {
            setConnected(false, error: describe(error))
            return false
        } catch {
            logger.error("cannot check the server's container", metadata: ["error": "\(error)"])
            return false
        }
    }
}
