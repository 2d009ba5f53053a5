import CacheFiles
import Foundation
import ItemModel
import LocalState
import Logging
import OpenFiles
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
/// Lock order: `directories` and the `OpenFiles` table are leaves (no I/O, no database call
/// and no call out under them).
public final class FileSystem: Sendable {
    /// Where content comes from: the sync engine, through the calls this target owns.
    let content: any ContentSource
    /// The files in use, shared with the engine: the descriptors and every per-file fact of them.
    public let openFiles: OpenFiles
    let store: LocalStore
    let cache: ContentCache
    let logger: Logger

    typealias Handle = OpenFiles.Handle

    /// The folders opened for listing (`opendir` until `releasedir`).
    let directories = Mutex<(next: UInt64, open: [UInt64: OpenDirectory])>((1, [:]))

    /// A folder opened for listing. The snapshot is taken by the first read at offset 0, not at
    /// the open: the kernel opens a folder for every listing, also for those it answers from
    /// its own copy, and those then cost no query.
    struct OpenDirectory {
        let ino: Int64
        var entries: [DirectoryEntry]?
    }
    /// Folders whose entries changed without a request of the kernel's.
    let listings: FolderListings
    /// The versions folder's inode (see FileSystem+Versions.swift).
    let versionsFolder: Int64?

    /// `store`, `cache` and `openFiles` are the engine's own: the file system reads and writes
    /// the same database, cache files and table of files in use.
    public init(content: any ContentSource, openFiles: OpenFiles, store: LocalStore, cache: ContentCache, logger: Logger, listings: FolderListings = FolderListings()) {
        self.listings = listings
        self.content = content
        self.openFiles = openFiles
        self.store = store
        self.cache = cache
        self.logger = logger
        versionsFolder = (try? store.read { try $0.versionsFolder()?.ino }) ?? nil
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
        if let gone = openFiles.detached(ino) { return gone }
        throw .notFound
    }

    func attributes(of item: LocalItem) -> NodeAttributes {
        let l = openFiles.beingWritten(item.ino)
        var item = item
        if let accessed = content.unsavedAccess(item.ino) { item.lastAccess = max(item.lastAccess, accessed) }
        var subfolders = 0
        if item.kind == .folder {
            item.modified = listings.modified(item.ino, stored: item.modified)
            subfolders = (try? store.read { try $0.subfolderCount(of: item.ino) }) ?? 0
        }
        return NodeAttributes(item, liveSize: l?.size, liveModified: l?.modified, subfolders: subfolders)
    }

    static func name(_ bytes: [UInt8]) throws(FSError) -> ItemName {
        do { return try ItemName(bytes: bytes) } catch { throw .invalidName(error) }
    }

    /// nil: no such name (the bridge answers a cacheable negative entry).
    public func lookup(parent: Int64, name: [UInt8]) throws(FSError) -> NodeAttributes? {
        // No name this long can exist; the kernel leaves NAME_MAX to the file system.
        if name.count > ItemName.maxByteCount { throw .nameTooLong }
        guard var text = String(validating: name, as: UTF8.self) else { return nil }
        text = storedName(text, in: parent)
        if parent == versionsFolder { try refreshVersionsFolder() }
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
        var attributes = attributes(of: try item(ino))
        // Deleted while open (`fstat` of it): no name links to it any more.
        if openFiles.detached(ino) != nil { attributes.nlink = 0 }
        return attributes
    }

    public func forget(_ ino: Int64) {
        // Inode numbers are row ids that live as long as the item: nothing to drop but a
        // detached (deleted while open) node that nobody holds any more.
        openFiles.forget(ino)
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
    /// and of content are mapped case by case; anything else (a database fault) is EIO.
    static func fsError(_ error: Error) -> FSError {
        switch error {
        case let e as FSError: return e
        case let e as LocalStoreError:
            switch e {
            case .diskFull: return .noSpace
            case .undecodable: return .io
            }
        case let e as ContentError:
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
