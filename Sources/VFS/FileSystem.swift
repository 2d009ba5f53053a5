import Foundation
import ItemModel
import LocalState
import Logging
import SyncEngine
import Synchronization

/// The mount's file-system semantics, without FUSE: what each POSIX operation does to the
/// local state, the cache files and the outbox (docs/SEMANTICS.md). MountDaemon's FuseBridge
/// only converts requests and replies; tests drive this directly.
///
/// Threading: metadata operations run synchronously on the caller's (FUSE) thread against the
/// local database and cache files, never the network. Operations that may need the network
/// (open of a placeholder, read of bytes not yet here) are `async`; the bridge runs them in a
/// Task and replies when they finish.
///
/// Lock order: `handles` then `sizesBeingWritten`; both are leaves for everything else (no
/// I/O, no database call, no engine call under them).
public final class FileSystem: Sendable {
    public let engine: SyncEngine
    let store: LocalStore
    let cache: ContentCache
    let logger: Logger
    let identityToken: String

    /// One open file (`open`/`create` until `release`).
    struct Handle: Sendable {
        let ino: Int64
        let fd: Int32
        let writable: Bool
        var wrote = false
        /// A write failed (disk full): this version is never uploaded.
        var writeError: Int32?
        let excluded: Bool
        /// The server version this handle reads while it downloads (nil: local from the start).
        var digest: ContentDigest? = nil
        /// The descriptor's file holds a whole version: opened on one, or the download it
        /// followed completed. It stays whole while open (eviction waits for the last close,
        /// and a newer version goes into a new file), so reads skip the database.
        var knownLocal = false
        /// Reads a version the file has since left: a stale copy whose cache file a download
        /// of the new version replaced. The kernel's pages of this inode may be of either.
        var oldCopy = false
        /// The file's write generation when this handle last recorded its writes and queued
        /// their upload (flush, fsync): a release or flush with nothing new commits nothing.
        var savedGeneration: UInt64?
    }

    /// The size and time of a file being written, ahead of the database until the last close.
    struct BeingWritten: Sendable {
        var size: Int64
        var modified: Timestamp
    }

    /// Files a write into failed (disk full) while they are open, with the error: part of the
    /// write may have landed, so the version is broken for every descriptor, not only the one
    /// whose write failed; no close of any of them queues it. Cleared at the last close.
    let failedWrites = Mutex<[Int64: Int32]>([:])

    /// The write failure a handle's close must report in the file's state: its own, or another
    /// descriptor's of the same file.
    func writeError(of h: Handle) -> Int32? { h.writeError ?? failedWrites.withLock { $0[h.ino] } }

    let handles = Mutex<(next: UInt64, open: [UInt64: Handle], dirs: [UInt64: OpenDirectory])>((1, [:], [:]))

    /// A folder opened for listing. The snapshot is taken by the first read at offset 0, not at
    /// the open: the kernel opens a folder for every listing, also for those it answers from
    /// its own copy, and those then cost no query.
    struct OpenDirectory {
        let ino: Int64
        var entries: [DirectoryEntry]?
    }
    let sizesBeingWritten = Mutex<[Int64: BeingWritten]>([:])
    /// Items deleted while open: the kernel may still ask about them until the last close.
    let detached = Mutex<[Int64: LocalItem]>([:])
    /// Files whose kernel page cache may hold the bytes of a replaced version (read through a
    /// handle of an old copy): opens do not keep it until no such handle is left.
    let pagesOfOldCopies = Mutex<Set<Int64>>([])
    /// Folders whose entries changed without a request of the kernel's.
    let listings: FolderListings

    /// `store` and `cache` are the engine's own: the file system reads and writes the same
    /// database and cache files.
    public init(engine: SyncEngine, store: LocalStore, cache: ContentCache, identityToken: String, logger: Logger, listings: FolderListings = FolderListings()) {
        self.listings = listings
        self.engine = engine
        self.store = store
        self.cache = cache
        self.identityToken = identityToken
        self.logger = logger
        engine.attach(cacheFileHolders: self)
    }

    // MARK: Lookup and attributes

    /// The item an open names by inode. Gone means the kernel's cached name is out of date.
    func openable(_ ino: Int64) throws(FSError) -> LocalItem {
        do { return try item(ino) } catch .notFound { throw .stale }
    }

    func item(_ ino: Int64) throws(FSError) -> LocalItem {
        do {
            if let item = try store.read({ try $0.item(ino) }) { return item }
        } catch {
            logger.error("database read failed", metadata: ["error": "\(error)"])
            throw .io
        }
        if let gone = detached.withLock({ $0[ino] }) { return gone }
        throw .notFound
    }

    func attributes(of item: LocalItem) -> NodeAttributes {
        let l = sizesBeingWritten.withLock { $0[item.ino] }
        var item = item
        if let accessed = engine.unsavedAccess(item.ino) { item.lastAccess = max(item.lastAccess, accessed) }
        if item.kind == .folder { item.modified = listings.modified(item.ino, stored: item.modified) }
        return NodeAttributes(item, liveSize: l?.size, liveModified: l?.modified)
    }

    static func name(_ bytes: [UInt8]) throws(FSError) -> ItemName {
        do { return try ItemName(bytes: bytes) } catch { throw .invalidName(error) }
    }

    /// nil: no such name (the bridge answers a cacheable negative entry).
    public func lookup(parent: Int64, name: [UInt8]) throws(FSError) -> NodeAttributes? {
        guard let text = String(validating: name, as: UTF8.self) else { return nil }
        // One read answers both: the child, and (when there is none) whether the folder is.
        let found: (child: LocalItem?, parentExists: Bool)
        do {
            found = try store.read { r in
                if let child = try r.child(of: parent, named: text) { return (child, true) }
                return (nil, try r.item(parent) != nil)
            }
        } catch { throw .io }
        guard let child = found.child else {
            if !found.parentExists { _ = try item(parent) }
            return nil
        }
        return attributes(of: child)
    }

    public func attributes(_ ino: Int64) throws(FSError) -> NodeAttributes {
        attributes(of: try item(ino))
    }

    public func forget(_ ino: Int64) {
        // Inode numbers are row ids that live as long as the item: nothing to drop but a
        // detached (deleted while open) node that nobody holds any more.
        if !engine.isOpen(ino) { _ = detached.withLock { $0.removeValue(forKey: ino) } }
    }

    // MARK: Volume

    public func statistics() -> VolumeStatistics {
        var s = statvfs()
        _ = statvfs(cache.directory, &s)
        let items = UInt64((try? store.read { try $0.itemCount() }) ?? 0)
        return VolumeStatistics(
            blockSize: UInt64(s.f_bsize), blocks: UInt64(s.f_blocks), blocksFree: UInt64(s.f_bfree),
            blocksAvailable: UInt64(s.f_bavail), files: items + UInt64(s.f_ffree), filesFree: UInt64(s.f_ffree),
            nameMax: UInt64(ItemName.maxByteCount))
    }

    // MARK: Helpers

    func touchFolder(_ ino: Int64, _ w: LocalWriter, _ now: Timestamp) throws {
        try w.setFolderTimes(ino, modified: now, changed: now)
    }

    /// A transaction body that may run twice: `commit` runs it again after a rollback for a
    /// full disk, once the reserve is freed. So it changes nothing but the database, or resets
    /// what it sets, and a second run does what one would.
    struct Rerunnable<T> {
        let body: (LocalWriter) throws -> T
        init(_ body: @escaping (LocalWriter) throws -> T) { self.body = body }
    }

    @discardableResult
    func commit<T>(_ transaction: Rerunnable<T>) throws(FSError) -> T {
        var reserveLeft = true
        while true {
            do {
                return try store.write(transaction.body)
            } catch let error as FSError {
                throw error
            } catch where reserveLeft && Self.fsError(error) == .noSpace {
                // The volume is full. The reserve is there for this: without it not even an `rm`
                // that would free space could be recorded. The transaction rolled back; run it
                // again.
                reserveLeft = false
                cache.dropReserve()
            } catch {
                logger.error("database write failed", metadata: ["error": "\(error)"])
                throw Self.fsError(error)
            }
        }
    }

    /// What a caller of the file system sees of a failure below it. The errors of the store
    /// and the engine are mapped case by case; anything else (a database fault) is EIO.
    static func fsError(_ error: Error) -> FSError {
        switch error {
        case let e as FSError: return e
        case let e as LocalStoreError:
            switch e {
            case .diskFull: return .noSpace
            case .undecodable: return .io
            }
        case let e as EngineError:
            switch e {
            case .io(_, let code): return FSError(writeFailure: code)
            case .notFound: return .notFound
            case .offline, .digestMismatch, .cancelled: return .io
            }
        default: return .io
        }
    }

    static func now() -> Timestamp { WallClock.now() }
}
