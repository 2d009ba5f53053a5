import CacheFiles
import Foundation
import ItemModel
import LocalState
import Logging
import OpenFiles
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
    /// The files in use, shared with the file system: uploads wait for writers, eviction
    /// skips open files, and a server change waits for a file's writers.
    public let openFiles: OpenFiles
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
        var recoveredUnclosedWrites = false
        /// A server change is held because it would loop the folders here (see `applyLocked`):
        /// held changes are tried again after each later batch of the feed.
        var heldForLoops = false
        /// The last change cursor applied or skipped.
        var cursor: ChangeCursor?
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
    let keyValueSignal: AsyncStream<Void>.Continuation
    let keyValueSignals: AsyncStream<Void>
    /// What `kv watch` reports: the key-value store's changes, as NSUbiquitousKeyValueStore's
    /// change notification names them.
    public let keyValueNotices = FanOut<KeyValueNotice>()

    public init(store: LocalStore, remote: any RemoteStore, cache: ContentCache, openFiles: OpenFiles, configuration: EngineConfiguration, observer: any MountObserver, logger: Logger) {
        self.store = store
        self.openFiles = openFiles
        self.remote = remote
        self.cache = cache
        self.configuration = configuration
        self.observer = observer
        self.logger = logger
        (outboxSignals, outboxSignal) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
        (maintenanceSignals, maintenanceSignal) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
        (keyValueSignals, keyValueSignal) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
        let maintenance = maintenanceSignal
        downloads = Downloads(remote: remote, cache: cache, store: store, openFiles: openFiles, observer: observer, logger: logger) { _ in maintenance.yield() }
        outboxSignal.yield()
        maintenanceSignal.yield()
        keyValueSignal.yield()
    }

    // MARK: What the file system tells the engine

    /// A local change was queued: wake the uploader.
    public func outboxChanged() { outboxSignal.yield() }

    public func kernelPagesAreStale(_ ino: Int64) { observer.invalidate([.inode(ino)]) }

    /// A descriptor of the file was closed: what its close left to do (`OpenFiles.closed`).
    public func fileClosed(_ ino: Int64, then after: OpenFiles.AfterClose) {
        if after.applyHeldChange { applyHeldChange(of: ino, afterTheFeed: true) }
        if after.kernelMustForget { observer.invalidate([.inode(ino)]) }
        if after.revertToServerVersion { revertToServerVersion(ino) }
        if after.wakeOutbox { outboxSignal.yield() }
        maintenanceSignal.yield()
    }

    public func didAccess(_ ino: Int64) {
        let now = Self.now()
        accessTimes.withLock { $0[ino] = now }
    }

    /// An access not yet written to the database, for the attributes (atime).
    public func unsavedAccess(_ ino: Int64) -> Timestamp? { accessTimes.withLock { $0[ino] } }

    public func forgetUnsavedAccess(_ ino: Int64) { _ = accessTimes.withLock { $0.removeValue(forKey: ino) } }

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

    public func contentChangedLocally() { maintenanceSignal.yield() }

    // MARK: Status

    public struct Status: Sendable {
        public var connected: Bool
        public var lastError: String?
        public var pendingUploads: Int
        public var activeDownloads: Int
        public var cachedBytes: Int64
        public var cacheLimit: Int64?
        public var itemCount: Int
        /// The index has held the container's whole tree since a catch-up with the server
        /// ended (in this run or an earlier one): listings are complete as of then.
        public var hasWholeTree: Bool
    }

    public func status() throws -> Status {
        let (connected, lastError) = state.withLock { ($0.connected, $0.lastError) }
        return try store.read { r in
            Status(connected: connected, lastError: lastError, pendingUploads: try r.outboxCount(),
                   activeDownloads: downloads.activeCount, cachedBytes: try r.cachedBytesTotal(),
                   cacheLimit: configuration.cacheLimit, itemCount: try r.itemCount(),
                   hasWholeTree: try r.meta(Self.wholeTreeMeta) != nil)
        }
    }

    /// Set once the first catch-up with the server ends (`catchUp`): before, the index holds
    /// only the pages of the change log applied so far.
    static let wholeTreeMeta = "whole_tree"

    /// Whether a download runs or a change waits to go up: while one does, progress moves
    /// without a commit to tell of it.
    public var transfersUnderWay: Bool { downloads.activeCount > 0 || ((try? unsentCount()) ?? 0) > 0 }

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

    /// How far the file's running download is, in percent; nil when none runs.
    public func downloadPercent(_ ino: Int64) -> Int? {
        downloads.progress(ino).map { $0.size == 0 ? 100 : Int($0.bytes * 100 / $0.size) }
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
            observer.event(MountEvent(connected ? .online : .offline, detail: error))
            if connected {
                downloads.forgetFailedRetries()
                outboxSignal.yield()
                keyValueSignal.yield()
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
        let identity = try await remote.whoami().identity
        let recordedIdentity = try store.read { try $0.accountIdentity() }
        let anotherAccount = recordedIdentity.map { $0 != identity } ?? false
        // Another account first: its container is another one too, and mounting again sets
        // this cache's state aside (`AccountFolders`), which a new container alone does not.
        if anotherAccount {
            why = "the server answers for another account than the one this cache holds (the account was removed and added again, or another server answers at this address); nothing is sent or applied and local files are kept; mount again to set this cache's files aside and show that account's"
        } else if let recorded, recorded != created {
            why = "the server's container is not the one this cache holds (it was made anew: another server, or the account was removed and added again); nothing is sent or applied and local files are kept; mount with a new --cache folder to use it"
        } else if let mine = mine?.position, let theirs = info.cursor.position, theirs < mine {
            why = "the server's change log is behind this cache's (was it restored from a backup?); nothing is sent or applied and local files are kept; mount with a new --cache folder to start again from the server"
        }
        if recorded == nil || recordedIdentity == nil {
            try store.write { w in
                if recorded == nil { try w.setMeta("container_created", created) }
                if recordedIdentity == nil { try w.setAccountIdentity(identity) }
            }
        }
        let wasForeign = state.withLock { s -> Bool in
            defer { s.foreignContainer = why; s.containerVerified = why == nil }
            return s.foreignContainer != nil
        }
        if let why {
            if !wasForeign {
                logger.error("not syncing with this container", metadata: ["reason": "\(why)"])
                if anotherAccount { noteAccountChange() }
            }
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

    /// The mount shows another account than before, or the server answers for another one:
    /// `ubiq monitor` and `kv watch` hear it, also those that start listening later.
    public func noteAccountChange() {
        observer.event(MountEvent(.accountChange), keep: true)
        keyValueNotices.publish(KeyValueNotice(.accountChange, keys: []), keep: true)
    }
}
