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
/// Lock order: `handles` then `live`; both are leaves for everything else (no I/O, no database
/// call, no engine call under them).
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
    struct Live: Sendable {
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
    let live = Mutex<[Int64: Live]>([:])
    /// Items deleted while open: the kernel may still ask about them until the last close.
    let detached = Mutex<[Int64: LocalItem]>([:])
    /// Files whose kernel page cache may hold the bytes of a replaced version (read through a
    /// handle of an old copy): opens do not keep it until no such handle is left.
    let pagesOfOldCopies = Mutex<Set<Int64>>([])
    /// Folders whose entries changed without a request of the kernel's.
    let listings: FolderListings

    public init(engine: SyncEngine, identityToken: String, logger: Logger, listings: FolderListings = FolderListings()) {
        self.listings = listings
        self.engine = engine
        self.store = engine.store
        self.cache = engine.cache
        self.identityToken = identityToken
        self.logger = logger
        engine.downloads.attach(holders: self)
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
        let l = live.withLock { $0[item.ino] }
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

    // MARK: Directories

    public func openDirectory(_ ino: Int64) throws(FSError) -> UInt64 {
        guard try item(ino).kind == .folder else { throw .notADirectory }
        return handles.withLock { h in
            let id = h.next
            h.next += 1
            h.dirs[id] = OpenDirectory(ino: ino)
            return id
        }
    }

    /// Entries from `offset` (an index into the snapshot; 0 is the first). A read at offset 0
    /// takes a new snapshot (the start of a listing, or a `rewinddir`); later offsets index into
    /// it, so they stay stable across the kernel's readdir calls.
    public func readDirectory(_ handle: UInt64, from offset: Int) throws(FSError) -> LazyMapSequence<ArraySlice<DirectoryEntry>, DirectoryEntry> {
        guard let dir = handles.withLock({ $0.dirs[handle] }) else { throw .badHandle }
        var entries = dir.entries ?? []
        if dir.entries == nil || offset == 0 {
            do {
                entries = try store.read { try $0.children(of: dir.ino) }.map { DirectoryEntry(name: $0.name, attributes: attributes(of: $0)) }
            } catch { throw .io }
            handles.withLock { $0.dirs[handle]?.entries = entries }
        }
        // A change after the snapshot moves its folders' times (see `FolderListings`), as the
        // kernel reads each entry; lazily, since it reads only as many as fit its buffer.
        return entries[min(offset, entries.count)...].lazy.map { [listings] e in
            guard e.attributes.kind == .folder else { return e }
            var shown = e
            shown.attributes.mtime = listings.modified(e.attributes.ino, stored: e.attributes.mtime)
            return shown
        }
    }

    public func closeDirectory(_ handle: UInt64) {
        _ = handles.withLock { $0.dirs.removeValue(forKey: handle) }
    }

    public func makeDirectory(parent: Int64, name: [UInt8], mode: UInt32, uid: UInt32, gid: UInt32) throws(FSError) -> NodeAttributes {
        let n = try Self.name(name)
        let now = Self.now()
        let made = try commit { w in
            guard let p = try w.reader.item(parent) else { throw FSError.notFound }
            guard p.kind == .folder else { throw FSError.notADirectory }
            if try w.reader.child(of: parent, named: n.rawValue) != nil { throw FSError.exists }
            let item = try w.insert(LocalItem(
                itemID: .random(), parent: parent, name: n.rawValue, kind: .folder, size: 0, mode: mode & 0o7777,
                uid: uid, gid: gid, created: now, modified: now, changed: now, content: .current, pinned: p.pinned))
            if try !w.reader.isExcluded(item.ino) { try w.enqueue(.createFolder, ino: item.ino) }
            try touchFolder(parent, w, now)
            return item
        }
        engine.outboxChanged()
        return attributes(of: made)
    }

    // MARK: Files

    public struct Opened: Sendable {
        public var handle: UInt64
        /// The kernel may keep its page cache from an earlier open: the content did not change.
        public var keepCache: Bool
        public var attributes: NodeAttributes
        /// The kernel must send flush on close (a writer's flush reports a failed write, such
        /// as a full disk). A reader's close then costs no round trip to the daemon.
        public var flushOnClose: Bool = true
        /// Reads and writes bypass the kernel's page cache: another handle still reads a
        /// replaced version of this inode through it.
        public var directIO: Bool = false
    }

    public func createFile(parent: Int64, name: [UInt8], mode: UInt32, flags: Int32, uid: UInt32, gid: UInt32) throws(FSError) -> Opened {
        let n = try Self.name(name)
        let now = Self.now()
        let made = try commit { w in
            guard let p = try w.reader.item(parent) else { throw FSError.notFound }
            guard p.kind == .folder else { throw FSError.notADirectory }
            if try w.reader.child(of: parent, named: n.rawValue) != nil {
                // The kernel creates only a name it holds as missing, so this one came from
                // another device a moment ago (its invalidation still on its way). Without
                // O_EXCL, open(2) opens what is there: ESTALE makes the kernel look the name up
                // again and open the file itself, with its own permission checks.
                throw flags & O_EXCL != 0 ? FSError.exists : FSError.stale
            }
            let item = try w.insert(LocalItem(
                itemID: .random(), parent: parent, name: n.rawValue, kind: .file, size: 0, mode: mode & 0o7777,
                uid: uid, gid: gid, created: now, modified: now, changed: now, content: .dirty, pinned: p.pinned))
            try touchFolder(parent, w, now)
            return (item: item, excluded: try w.reader.isExcluded(item.ino))
        }
        let fd: Int32
        do { fd = try cache.open(made.item.ino, truncate: true) } catch { throw Self.fsError(error) }
        // A new file is a change even if nothing is written: its release queues the upload.
        let handle = register(Handle(ino: made.item.ino, fd: fd, writable: true, wrote: true, excluded: made.excluded))
        live.withLock { $0[made.item.ino] = Live(size: 0, modified: now) }
        engine.didOpen(made.item.ino, forWriting: true)
        return Opened(handle: handle, keepCache: false, attributes: attributes(of: made.item))
    }

    public func open(_ ino: Int64, flags: Int32) async throws(FSError) -> Opened {
        let item = try openable(ino)
        guard item.kind == .file else { throw .isADirectory }
        let waited = Self.needsContent(item, flags: flags, openForWriting: engine.isOpenForWriting(ino))
        if waited {
            do {
                if Self.isWritable(flags) {
                    // Writing into the middle of a file needs all of it here first.
                    try await engine.waitForContent(item, range: 0..<item.size)
                } else {
                    try await engine.prepareForReading(item)
                }
            } catch {
                throw Self.fsError(error)
            }
        }
        let wasLocal = item.content.isWhole
        // After a download the row changed: read it again.
        return try finishOpen(waited ? try self.item(ino) : item, flags: flags, wasLocal: wasLocal)
    }

    /// The open, answered at once, when it needs no download first (content here, or a
    /// truncating open); nil when it does (then the caller uses `open`, in a task). Most opens
    /// take this path and never leave the FUSE thread.
    public func openIfLocal(_ ino: Int64, flags: Int32) throws(FSError) -> Opened? {
        let item = try openable(ino)
        guard item.kind == .file else { throw .isADirectory }
        if Self.needsContent(item, flags: flags, openForWriting: engine.isOpenForWriting(ino)) { return nil }
        return try finishOpen(item, flags: flags, wasLocal: item.content.isWhole)
    }

    /// A read-only open of a placeholder, answered without a task: the download is started
    /// and the handle made here.
    ///
    /// Connected to the server, `answer` gets the open at once: the reader's first read is
    /// then on its way while the first bytes are, and the thread that lands them answers it
    /// (`readWhenLanded`). A download that fails then fails that read with EIO.
    ///
    /// Offline (or not yet connected), `answer` gets the open once the first bytes have
    /// landed, on the thread that landed them, so that a placeholder that cannot be downloaded
    /// fails its open at once. `answer(nil)` when they did not land (failed, or a newer version
    /// replaced the download): the handle is gone then, and `open` says why or tries again.
    /// False: not such an open; the caller uses `open`.
    public func openWhileDownloading(_ ino: Int64, flags: Int32, answer: @escaping @Sendable (Opened?) -> Void) throws(FSError) -> Bool {
        let item = try openable(ino)
        guard item.kind == .file, !Self.isWritable(flags), item.content == .placeholder,
              item.serverDigest != nil, item.size > 0
        else { return false }
        if engine.isConnected {
            // Started first: its request is on its way while the handle is made.
            engine.downloads.start(item)
            answer(try finishOpen(item, flags: flags, wasLocal: false))
            return true
        }
        // The download starts first, so that its request is on its way while the handle is
        // made (the cache file, the database): whichever of the two ends last answers.
        let rendezvous = Mutex<(opened: Opened?, landed: Bool?, failed: Bool)>((nil, nil, false))
        let finish = { @Sendable [self] (opened: Opened, landed: Bool) in
            if landed { return answer(opened) }
            release(opened.handle)
            answer(nil)
        }
        engine.whenFirstBytesLand(item) { landed in
            let opened = rendezvous.withLock { r -> Opened? in
                guard !r.failed else { return nil }
                r.landed = landed
                return r.opened
            }
            if let opened { finish(opened, landed) }
        }
        let opened: Opened
        do { opened = try finishOpen(item, flags: flags, wasLocal: false) } catch {
            // The open fails now; the download it started goes on for the next reader.
            rendezvous.withLock { $0.failed = true }
            throw error
        }
        if let landed = rendezvous.withLock({ r -> Bool? in
            r.opened = opened
            return r.landed
        }) {
            finish(opened, landed)
        }
        return true
    }

    static func isWritable(_ flags: Int32) -> Bool {
        let access = flags & O_ACCMODE
        return access == O_WRONLY || access == O_RDWR
    }

    /// A placeholder, a partial file, or a stale one (refreshed into a new cache file, unless a
    /// writer has it open and writes into the old one) must be downloaded (its start, for
    /// reading) before the open answers; a truncating open needs nothing.
    static func needsContent(_ item: LocalItem, flags: Int32, openForWriting: Bool) -> Bool {
        let truncate = isWritable(flags) && (flags & O_TRUNC) != 0
        return !truncate && (item.content == .placeholder || (item.content == .stale && !openForWriting))
    }

    func finishOpen(_ item: LocalItem, flags: Int32, wasLocal: Bool) throws(FSError) -> Opened {
        let ino = item.ino
        let writable = Self.isWritable(flags)
        let truncate = writable && (flags & O_TRUNC) != 0
        let fd: Int32
        do { fd = try cache.open(ino) } catch { throw Self.fsError(error) }
        // Only a writer's close queues an upload, which an excluded item must not: a reader's
        // open (most opens, and every placeholder's first) skips this database read.
        let excluded = writable ? ((try? store.read { try $0.isExcluded(ino) }) ?? false) : false
        // A stale copy here is whole (a refresh makes the row a placeholder first).
        let local = item.content.isWhole || item.content == .stale
        let handle = register(Handle(ino: ino, fd: fd, writable: writable, excluded: excluded,
                                     digest: local ? nil : item.serverDigest, knownLocal: local))
        let (oldPages, oldCopyOpen) = pagesOfOldCopy(ino)
        engine.didOpen(ino, forWriting: writable)
        if truncate {
            do { try setSize(ino, 0, fd: fd) } catch {
                release(handle)
                throw error
            }
            markWritten(handle)
        }
        engine.didAccess(ino)
        // Truncated: the row changed (read it again), and the kernel's cached pages are old.
        let shown = try truncate ? self.item(ino) : item
        return Opened(handle: handle, keepCache: wasLocal && !truncate && !oldPages, attributes: attributes(of: shown),
                      flushOnClose: writable, directIO: oldCopyOpen)
    }

    /// Whether the kernel's pages of `ino` may hold a replaced version's bytes, and whether a
    /// handle still reads that version. An open must then not keep those pages; and while such
    /// a handle is open, the new one bypasses the page cache, which the two would share.
    func pagesOfOldCopy(_ ino: Int64) -> (pages: Bool, oldCopyOpen: Bool) {
        guard pagesOfOldCopies.withLock({ $0.contains(ino) }) else { return (false, false) }
        let open = handles.withLock { s in s.open.values.contains { $0.ino == ino && $0.oldCopy } }
        // The last old copy closed: this open (which does not keep the cache) drops its pages.
        if !open { pagesOfOldCopies.withLock { _ = $0.remove(ino) } }
        return (true, open)
    }

    public enum ReadResult: Sendable {
        /// Send `count` bytes from the cache file at `offset` (zero-copy through the kernel).
        case file(fd: Int32, offset: Int64, count: Int)
        case bytes([UInt8])
    }

    /// For a read `readIfLocal` could not answer (callers try that first, on their thread).
    public func read(_ handle: UInt64, offset: Int64, size: Int) async throws(FSError) -> ReadResult {
        guard let h = handles.withLock({ $0.open[handle] }) else { throw .badHandle }
        // Ahead of the running download of this handle's version: wait for just this range,
        // without the database (a sequential reader waits here on every request).
        // A failed or cancelled wait falls through to the full path, which knows why.
        if let digest = h.digest, (try? await engine.downloads.waitIfRunning(h.ino, digest: digest, from: offset, count: size)) == true,
           let ready = try readIfLocal(handle, offset: offset, size: size) {
            return ready
        }
        let item = try followed(h)
        let fileSize = live.withLock { $0[h.ino]?.size } ?? item.size
        guard offset < fileSize else { return .bytes([]) }
        let count = Int(min(Int64(size), fileSize - offset))
        if item.content == .placeholder {
            do { try await engine.waitForContent(item, range: offset..<(offset + Int64(count))) } catch { throw Self.fsError(error) }
        }
        return .file(fd: h.fd, offset: offset, count: count)
    }

    public func write(_ handle: UInt64, offset: Int64, data: [UInt8]) throws(FSError) -> Int {
        guard let h = handles.withLock({ $0.open[handle] }) else { throw .badHandle }
        // The file's version is broken (a write failed): later writes fail at once. The kernel
        // reports the first failure of a large write() as a short write, and the writer goes
        // on; writing on would fill the space the reserve just freed for recording the failure.
        if let code = writeError(of: h) { throw FSError(writeFailure: code) }
        var done = 0
        while done < data.count {
            let n = data.withUnsafeBytes { pwrite(h.fd, $0.baseAddress! + done, data.count - done, off_t(offset + Int64(done))) }
            if n < 0 {
                let code = errno
                if code == EINTR { continue }
                handles.withLock { $0.open[handle]?.writeError = code }
                failedWrites.withLock { $0[h.ino] = code }
                // Part of it may have landed: a snapshot taken meanwhile is not sent, and a file
                // an fsync's upload recorded as clean has local changes again.
                if engine.didWrite(h.ino) { markWritten(handle) }
                // Disk full is ENOSPC to the writer, never EIO, and this version is not uploaded.
                // Free the reserve so that the close can still record that.
                if code == ENOSPC || code == EDQUOT { cache.dropReserve() }
                throw FSError(writeFailure: code)
            }
            done += n
        }
        let markAgain = engine.didWrite(h.ino)
        let end = offset + Int64(done)
        let now = Self.now()
        // The size the database holds is needed only by the first write since the open; later
        // writes (and every write to a file created here) find it in `live`.
        let base = live.withLock({ $0[h.ino] }) == nil ? (try? item(h.ino).size) ?? 0 : 0
        live.withLock { l in
            var entry = l[h.ino] ?? Live(size: base, modified: now)
            entry.size = max(entry.size, end)
            entry.modified = now
            l[h.ino] = entry
        }
        if !h.wrote || markAgain { markWritten(handle) }
        return done
    }

    /// The first write through a handle makes the item dirty (its base revision stays).
    func markWritten(_ handle: UInt64) {
        guard let h = handles.withLock({ s -> Handle? in
            guard var h = s.open[handle] else { return nil }
            h.wrote = true
            s.open[handle] = h
            return h
        }) else { return }
        try? store.write { w in
            guard var now = try w.reader.item(h.ino), now.content != .dirty else { return }
            now.content = .dirty
            try w.update(now)
        }
    }

    /// Every close(2) of a descriptor that wrote records the writes and queues their upload
    /// before it returns: the release after the last close comes later, on its own, and a
    /// daemon killed in between would otherwise find a file its writer had closed without a
    /// queued upload, and hold it back as half-written.
    ///
    /// It is not a save, though: the upload still waits for the release (or an fsync). A
    /// close is also the shell's `cmd > f`, which opens f, truncates it, dup2s the descriptor
    /// to 1 and closes the original before `cmd` writes a byte. After a crash, a file that
    /// grew past the size its last close recorded is held back as half-written (see
    /// `SyncEngine.recoverUnclosedWrites`).
    public func flush(_ handle: UInt64) throws(FSError) {
        guard let h = handles.withLock({ $0.open[handle] }) else { throw .badHandle }
        if let code = h.writeError { throw FSError(writeFailure: code) }
        _ = try recordWrites(handle, h)
    }

    /// Makes the written content durable and queues its upload, as a close does. The upload goes
    /// even while the file stays open: the writer said this version is whole.
    public func fsync(_ handle: UInt64) throws(FSError) {
        guard let h = handles.withLock({ $0.open[handle] }) else { throw .badHandle }
        if let code = h.writeError { throw FSError(writeFailure: code) }
        guard Glibc.fsync(h.fd) == 0 else { throw errno == ENOSPC ? .noSpace : .io }
        if let generation = try recordWrites(handle, h) { engine.didSave(h.ino, generation: generation) }
        // The content is on disk: so must be the record that it is to be uploaded.
        do { try store.makeDurable() } catch { throw .io }
    }

    /// Records the handle's writes and queues their upload, unless nothing was written since
    /// it last did. The write generation recorded; nil when the handle never wrote.
    func recordWrites(_ handle: UInt64, _ h: Handle) throws(FSError) -> UInt64? {
        guard h.wrote else { return nil }
        if let code = writeError(of: h) {
            // Another descriptor's write failed: recorded as such, never queued.
            var broken = h
            broken.writeError = code
            try persistWrites(broken, queueUpload: false)
            return nil
        }
        // Read first: a write landing during the commit bumps it, and the next save records it.
        let generation = engine.writeGeneration(h.ino)
        guard h.savedGeneration != generation else { return generation }
        try persistWrites(h, queueUpload: true)
        handles.withLock { $0.open[handle]?.savedGeneration = generation }
        return generation
    }

    public func release(_ handle: UInt64) {
        guard let h = handles.withLock({ $0.open.removeValue(forKey: handle) }) else { return }
        // A failed first write leaves `wrote` false, but part of it may have landed: the
        // failure is recorded (and the queued uploads dropped) all the same.
        let failure = writeError(of: h)
        if h.wrote || h.writeError != nil {
            let generation = engine.writeGeneration(h.ino)
            var recorded = h
            recorded.writeError = failure
            do {
                // Mostly recorded by the close (flush) already.
                if failure != nil || h.savedGeneration != generation { try persistWrites(recorded, queueUpload: failure == nil) }
                // The writer is done: its version may go up even while another writer has the file open.
                if failure == nil { engine.didSave(h.ino, generation: generation) }
            } catch {
                logger.error("cannot record a closed file", metadata: ["item.ino": "\(h.ino)", "error": "\(error)"])
            }
        }
        close(h.fd)
        engine.didClose(h.ino, forWriting: h.writable)
        // A reader of a replaced, longer version that read to its end made the kernel shrink
        // the inode's size to where its read came up short. Asked again only now: asked during
        // its reads, the kernel would take the new size and read zeros past the old end.
        if h.oldCopy { engine.kernelMustForget(h.ino) }
        let stillOpen = handles.withLock { $0.open.values.contains { $0.ino == h.ino } }
        if !stillOpen {
            _ = live.withLock { $0.removeValue(forKey: h.ino) }
            if detached.withLock({ $0.removeValue(forKey: h.ino) }) != nil { cache.remove(h.ino) }
            failedWrites.withLock { _ = $0.removeValue(forKey: h.ino) }
            if let code = failure, code == ENOSPC || code == EDQUOT {
                // The disk filled up under this writer: the partial version is dropped (its
                // space is what the disk lacks) and the file is again the last version on the
                // server, as a placeholder. A file the server never had keeps what was written.
                engine.revertToServerVersion(h.ino)
            }
        }
        if h.wrote { engine.outboxChanged() }
    }

    /// Writes the file's new size and time, and (unless the write failed) queues the upload,
    /// in one transaction: a closed file's upload survives a crash.
    func persistWrites(_ h: Handle, queueUpload: Bool) throws(FSError) {
        let l = live.withLock { $0[h.ino] }
        let size = cache.size(h.ino) ?? l?.size ?? 0
        try commit { w in
            guard var item = try w.reader.item(h.ino) else { return }
            item.size = size
            if let l { item.modified = l.modified }
            item.changed = Self.now()
            item.content = .dirty
            item.cachedBytes = size
            if let code = h.writeError {
                item.uploadError = "a write failed (\(String(cString: strerror(code)))); this version is not uploaded"
                try w.dropUploads(of: h.ino)
            } else if queueUpload {
                item.uploadError = nil
            }
            try w.updateContentState(item)
            if queueUpload && !h.excluded { try w.enqueue(.content, ino: h.ino) }
        }
        engine.contentChangedLocally()
    }

    func register(_ h: Handle) -> UInt64 {
        handles.withLock { s in
            let id = s.next
            s.next += 1
            s.open[id] = h
            return id
        }
    }

    // MARK: Attributes

    public struct AttributeChanges: Sendable {
        public var mode: UInt32?
        public var uid: UInt32?
        public var gid: UInt32?
        public var size: Int64?
        public var atime: Timestamp?
        public var mtime: Timestamp?
        public init(mode: UInt32? = nil, uid: UInt32? = nil, gid: UInt32? = nil, size: Int64? = nil, atime: Timestamp? = nil, mtime: Timestamp? = nil) {
            self.mode = mode
            self.uid = uid
            self.gid = gid
            self.size = size
            self.atime = atime
            self.mtime = mtime
        }
    }

    public func setAttributes(_ ino: Int64, _ changes: AttributeChanges, handle: UInt64?) async throws(FSError) -> NodeAttributes {
        var item = try item(ino)
        if let size = changes.size {
            guard item.kind == .file else { throw .isADirectory }
            if size != 0 && item.content.needsDownload {
                do { try await engine.waitForContent(item, range: 0..<item.size) } catch { throw Self.fsError(error) }
            }
            let fd: Int32
            do { fd = try cache.open(ino) } catch { throw Self.fsError(error) }
            defer { close(fd) }
            try setSize(ino, size, fd: fd)
            // The truncate belongs to the descriptor it came through (`ftruncate`, as truncate(1)
            // does), whose close then saves it; a truncate by path, while another descriptor
            // writes, to one of those (any: the file's upload waits for a save either way).
            let writer = handles.withLock { s -> UInt64? in
                if let handle, s.open[handle]?.writable == true { return handle }
                return s.open.first { $0.value.ino == ino && $0.value.writable }?.key
            }
            if let writer {
                markWritten(writer)
            } else {
                let generation = engine.writeGeneration(ino)
                try persistWrites(Handle(ino: ino, fd: fd, writable: true, wrote: true, excluded: (try? store.read { try $0.isExcluded(ino) }) ?? false), queueUpload: true)
                // No writer holds it: this truncate is the whole change, saved.
                engine.didSave(ino, generation: generation)
            }
            item = try self.item(ino)
        }
        if changes.mode != nil || changes.mtime != nil || changes.uid != nil || changes.gid != nil || changes.atime != nil {
            let synced = changes.mode != nil || changes.mtime != nil
            try commit { w in
                guard var now = try w.reader.item(ino) else { throw FSError.notFound }
                if let mode = changes.mode { now.mode = mode & 0o7777 }
                if let uid = changes.uid { now.uid = uid }
                if let gid = changes.gid { now.gid = gid }
                if let mtime = changes.mtime { now.modified = mtime }
                if let atime = changes.atime { now.lastAccess = atime }
                now.changed = Self.now()
                try w.update(now)
                if try synced && now.revision != nil && !w.reader.isExcluded(ino) { try w.enqueue(.attributes, ino: ino) }
            }
            if let mtime = changes.mtime { live.withLock { if $0[ino] != nil { $0[ino]!.modified = mtime } } }
            engine.outboxChanged()
        }
        return attributes(of: try self.item(ino))
    }

    func setSize(_ ino: Int64, _ size: Int64, fd: Int32) throws(FSError) {
        guard ftruncate(fd, off_t(size)) == 0 else {
            if errno == ENOSPC { cache.dropReserve() }
            throw errno == ENOSPC ? .noSpace : .io
        }
        engine.didWrite(ino)
        let now = Self.now()
        live.withLock { $0[ino] = Live(size: size, modified: now) }
        try commit { w in
            guard var item = try w.reader.item(ino) else { return }
            item.size = size
            item.modified = now
            item.content = .dirty
            try w.update(item)
            // The version an earlier close queued is gone from the cache file: its upload would
            // send this cut file. The truncating writer's close (or the caller, for a truncate
            // by path) queues the next; a crash before that holds the file back.
            try w.dropUploads(of: ino)
        }
    }

    // MARK: Removal and renames

    public func unlink(parent: Int64, name: [UInt8]) throws(FSError) {
        try remove(parent: parent, name: name, folder: false)
    }

    public func removeDirectory(parent: Int64, name: [UInt8]) throws(FSError) {
        try remove(parent: parent, name: name, folder: true)
    }

    func remove(parent: Int64, name: [UInt8], folder: Bool) throws(FSError) {
        let n = try Self.name(name)
        let now = Self.now()
        let removed = try commit { w -> LocalItem in
            guard let item = try w.reader.child(of: parent, named: n.rawValue) else { throw FSError.notFound }
            if folder {
                guard item.kind == .folder else { throw FSError.notADirectory }
                if try w.reader.childCount(of: item.ino) > 0 { throw FSError.notEmpty }
            } else if item.kind == .folder {
                throw FSError.isADirectory
            }
            try deleteRow(item, w)
            try touchFolder(parent, w, now)
            return item
        }
        if engine.isOpen(removed.ino) {
            detached.withLock { $0[removed.ino] = removed }
        } else {
            cache.remove(removed.ino)
            // Space came back: the maintenance pass makes the disk-full reserve again, if a full
            // disk used it up (a later fill must find it there to record its failure).
            engine.contentChangedLocally()
        }
        engine.downloads.cancel(removed.ino)
        engine.outboxChanged()
    }

    /// Removes an item's row and queues its deletion on the server, in one transaction.
    ///
    /// Also for an item that has no server revision yet: its create may be in flight, and the
    /// queued deletion both removes what that create makes and keeps the create's echo on the
    /// change feed from bringing the item back. (The outbox asks the server first; an item
    /// that never went up costs one lookup.)
    func deleteRow(_ item: LocalItem, _ w: LocalWriter) throws {
        let excluded = try w.reader.isExcluded(item.ino)
        try w.dropOps(for: item.ino)
        try w.forgetSentContents(of: item.ino)
        try w.delete(item.ino)
        if !excluded {
            try w.enqueue(.delete, ino: item.ino, itemID: item.itemID, revision: item.revision)
        }
    }

    /// `whiteout` (RENAME_WHITEOUT, for overlay file systems) leaves a device node behind, which
    /// the mount does not keep: refused.
    public func rename(parent: Int64, name: [UInt8], newParent: Int64, newName: [UInt8], noReplace: Bool, exchange: Bool, whiteout: Bool = false) throws(FSError) {
        if whiteout { throw .invalidArgument }
        if exchange { throw .invalidArgument }
        let from = try Self.name(name)
        let to = try Self.name(newName)
        let now = Self.now()
        var replaced: LocalItem?
        try commit { w in
            replaced = nil  // `commit` may run this body a second time (a full disk)
            let r = w.reader
            guard var source = try r.child(of: parent, named: from.rawValue) else { throw FSError.notFound }
            guard let destination = try r.item(newParent) else { throw FSError.notFound }
            guard destination.kind == .folder else { throw FSError.notADirectory }
            if parent == newParent && from == to { return }
            // A folder cannot move below itself.
            if try r.isWithin(newParent, source.ino) { throw FSError.invalidArgument }
            let wasExcluded = try r.isExcluded(source.ino)
            var tookOver: LocalItem?
            if let target = try r.child(of: newParent, named: to.rawValue) {
                if noReplace { throw FSError.exists }
                if target.kind == .folder {
                    guard source.kind == .folder else { throw FSError.isADirectory }
                    if try r.childCount(of: target.ino) > 0 { throw FSError.notEmpty }
                } else if source.kind == .folder {
                    throw FSError.notADirectory
                }
                if try source.kind == .file && source.revision == nil && target.revision != nil && !r.isExcluded(target.ino) {
                    // An editor's safe save (write a temp file, rename it over): the new content
                    // becomes the next version of the same item, with the target's base
                    // revision, so the server checks it like any edit.
                    if try r.hasStartedCreate(source.ino) {
                        // The temp file's own create may be on its way: the item it makes is
                        // nobody's from now on. Its deletion is queued at once, so that until it
                        // is gone the change feed keeps it away from this device, and a later
                        // save refused because it still holds the temp name sends it first.
                        try w.enqueue(.delete, ino: source.ino, itemID: source.itemID, revision: nil)
                    }
                    try w.dropOps(for: target.ino)
                    try w.delete(target.ino)
                    source.itemID = target.itemID
                    source.revision = target.revision
                    source.serverDigest = target.serverDigest
                    tookOver = target
                } else {
                    try deleteRow(target, w)
                }
                replaced = target
            }
            source.parent = newParent
            source.name = to.rawValue
            source.changed = now
            try w.update(source)
            try touchFolder(parent, w, now)
            if newParent != parent { try touchFolder(newParent, w, now) }
            let isExcluded = try r.isExcluded(source.ino)
            switch (wasExcluded, isExcluded) {
            case (false, false):
                if source.revision != nil {
                    try w.enqueue(.move, ino: source.ino)
                    if source.content == .dirty { try w.enqueue(.content, ino: source.ino) }
                    if let old = tookOver { try queueDifferences(of: source, from: old, w) }
                } else if try r.hasStartedCreate(source.ino) {
                    // The create in flight carries the old name and place. The move goes in the
                    // queue now, in its turn: a follow-up queued when the create is answered
                    // would come after a later deletion of the old folder, which the server
                    // then refuses as not empty (a false conflict that restored the folder).
                    try w.enqueue(.move, ino: source.ino)
                }
            case (false, true):
                // Into a `.nosync` folder: local-only from now on, gone from the server.
                try forgetOnServer(source, w)
            case (true, false):
                try announce(source, w)
            case (true, true):
                break
            }
        }
        if let replaced {
            if engine.isOpen(replaced.ino) { detached.withLock { $0[replaced.ino] = replaced } } else { cache.remove(replaced.ino) }
        }
        engine.outboxChanged()
    }

    /// A safe save's file keeps its own mode and attributes: those that differ from the file
    /// it replaced go up too (a content upload carries neither). Its noted attribute changes
    /// become exactly those that differ.
    func queueDifferences(of source: LocalItem, from old: LocalItem, _ w: LocalWriter) throws {
        if source.mode & 0o7777 != old.mode & 0o7777 { try w.enqueue(.attributes, ino: source.ino) }
        let differing = Set(source.xattrs.keys).union(old.xattrs.keys).filter { source.xattrs[$0] != old.xattrs[$0] }
        try w.settleXattrChanges(source.ino, try w.reader.xattrChanges(of: source.ino).subtracting(differing))
        for name in differing { try w.noteXattrChange(source.ino, name: name) }
        if !differing.isEmpty { try w.enqueue(.xattrs, ino: source.ino) }
    }

    /// Queues the deletion of an item (and what is below it) that became local-only.
    func forgetOnServer(_ item: LocalItem, _ w: LocalWriter) throws {
        for var d in try w.reader.descendants(of: item.ino) + [item] {
            try w.dropOps(for: d.ino)
            if let revision = d.revision, d.ino == item.ino {
                try w.enqueue(.delete, ino: d.ino, itemID: d.itemID, revision: revision)
            }
            d.revision = nil
            d.itemID = .random()
            try w.update(d)
        }
    }

    /// Queues the creation of an item (and what is below it) that stopped being local-only.
    func announce(_ item: LocalItem, _ w: LocalWriter) throws {
        var all = [item]
        all += try w.reader.descendants(of: item.ino)
        for var d in all {
            d.revision = nil
            if d.kind == .file { d.content = d.content == .placeholder ? .placeholder : .dirty }
            try w.update(d)
            try w.enqueue(d.kind == .folder ? .createFolder : .content, ino: d.ino)
        }
    }

    // MARK: Extended attributes

    public func getXattr(_ ino: Int64, name: String) throws(FSError) -> [UInt8] {
        // `ls -l` asks for ACLs (system.posix_acl_*) on every file. EOPNOTSUPP says "no ACLs on
        // this file system", which ls remembers for the whole device; ENODATA would make it ask
        // again for every file, each a round trip. Answered without touching the database.
        if name.hasPrefix("system.") { throw .notSupported }
        guard name.hasPrefix("user.") else { throw .noAttribute }
        let item = try item(ino)
        if name.hasPrefix(ItemStatus.prefix) {
            if name == "user.ubiq.identityToken" {
                guard ino == LocalItem.rootIno else { throw .noAttribute }
                return Array(identityToken.utf8)
            }
            guard let value = status(of: item).attributes.first(where: { $0.0 == name })?.1 else { throw .noAttribute }
            return Array(value.utf8)
        }
        guard let value = item.xattrs[name] else { throw .noAttribute }
        return Array(value)
    }

    /// Names only, from the item's row alone: listing must stay one query (tools list the
    /// attributes of every file they copy or show).
    public func listXattrs(_ ino: Int64) throws(FSError) -> [String] {
        let item = try item(ino)
        var names = ItemStatus.names(downloadingError: item.downloadError != nil, uploadingError: item.uploadError != nil, revision: item.revision != nil)
        if ino == LocalItem.rootIno { names.append("user.ubiq.identityToken") }
        names += item.xattrs.keys.sorted()
        return names
    }

    /// A read that can be answered at once from the cache file (the content is here), or nil
    /// when it must wait for a download (then the caller uses `read`).
    public func readIfLocal(_ handle: UInt64, offset: Int64, size: Int) throws(FSError) -> ReadResult? {
        guard let h = handles.withLock({ $0.open[handle] }) else { throw .badHandle }
        // The common cases touch no database: content known to be here (the cache file's own
        // size is the content's), or bytes behind the front of this version's download.
        if h.knownLocal {
            var st = stat()
            guard fstat(h.fd, &st) == 0 else { throw .io }
            return Self.slice(fd: h.fd, offset: offset, size: size, fileSize: Int64(st.st_size))
        }
        if let digest = h.digest {
            switch engine.downloads.position(h.ino, digest: digest, from: offset, count: size) {
            case .landed(let fileSize): return Self.slice(fd: h.fd, offset: offset, size: size, fileSize: fileSize)
            // Ahead of this version's running download: the caller waits for it.
            case .ahead: return nil
            case .notRunning: break
            }
        }
        let item = try followed(h)
        let fileSize = live.withLock { $0[h.ino]?.size } ?? item.size
        guard offset < fileSize else { return .bytes([]) }
        let count = Int(min(Int64(size), fileSize - offset))
        let local = item.content.isWhole
        // Behind the front of a running download of the current version: the bytes are here.
        let landed = !local && item.serverDigest.flatMap {
            engine.downloads.position(h.ino, digest: $0, from: offset, count: count).landedSize
        } != nil
        guard local || landed else { return nil }
        if local { handles.withLock { $0.open[handle]?.knownLocal = true } }
        return .file(fd: h.fd, offset: offset, count: count)
    }

    /// The row a handle that follows a download reads against. Its version replaced before it
    /// was whole here fails the read (EIO): the bytes of another version are not its, and a
    /// reader must never see a mix of two versions.
    func followed(_ h: Handle) throws(FSError) -> LocalItem {
        let item = try item(h.ino)
        if item.serverDigest != h.digest {
            logger.notice("a read of a version replaced during its download fails", metadata: ["item.ino": "\(h.ino)"])
            throw .io
        }
        return item
    }

    /// A read ahead of the running download of the handle's version, answered without a
    /// task: `answer` gets it once its bytes have landed, on the thread that landed them (at
    /// once, on this thread, when they have). A sequential reader of a placeholder waits here
    /// on nearly every request, and the hop through a task was a wake-up more each time.
    /// False when no such download runs: the caller uses `read`. `answer(nil)` when the
    /// download failed or was cancelled first: the caller uses `read`, which says why.
    public func readWhenLanded(_ handle: UInt64, offset: Int64, size: Int, answer: @escaping @Sendable (ReadResult?) -> Void) throws(FSError) -> Bool {
        guard let h = handles.withLock({ $0.open[handle] }) else { throw .badHandle }
        guard let digest = h.digest else { return false }
        let fd = h.fd
        return engine.downloads.whenLanded(h.ino, digest: digest, from: offset, count: size) { fileSize in
            answer(fileSize.map { Self.slice(fd: fd, offset: offset, size: size, fileSize: $0) })
        }
    }

    static func slice(fd: Int32, offset: Int64, size: Int, fileSize: Int64) -> ReadResult {
        guard offset < fileSize else { return .bytes([]) }
        return .file(fd: fd, offset: offset, count: Int(min(Int64(size), fileSize - offset)))
    }

    public func status(of item: LocalItem) -> ItemStatus {
        let excluded = (try? store.read { try $0.isExcluded(item.ino) }) ?? false
        let pending = (try? store.read { try $0.pendingOps(for: item.ino) }) ?? 0
        let transfer = engine.transfer(item.ino)
        var item = item
        if let l = live.withLock({ $0[item.ino] }) { item.size = l.size }
        return ItemStatus(item: item, excluded: excluded, pendingOps: pending, downloadPercent: transfer.downloadPercent,
                          uploading: transfer.uploading, uploadPercent: transfer.uploadPercent)
    }

    public func setXattr(_ ino: Int64, name: String, value: [UInt8], create: Bool, replace: Bool) throws(FSError) {
        if name.hasPrefix(ItemStatus.prefix) {
            guard ItemStatus.writable.contains(name) else { throw .readOnlyAttribute }
            let text = String(decoding: value, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            do {
                switch (name, text) {
                // The pin itself asks for the downloads (the background starts pinned files
                // that need content); no download request is recorded, so after an unpin none
                // of them starts any more.
                case ("user.ubiq.pinned", "1"): try engine.setPinned(ino, true)
                case ("user.ubiq.pinned", "0"): try engine.setPinned(ino, false)
                case ("user.ubiq.downloadingStatus", "current"): try engine.startDownload(ino)
                case ("user.ubiq.downloadingStatus", "notDownloaded"): try engine.evict(ino)
                default: throw FSError.invalidArgument
                }
            } catch let e as FSError {
                throw e
            } catch is EvictRefusal {
                throw .busyWithUnsentChanges
            } catch {
                throw Self.fsError(error)
            }
            return
        }
        guard name.hasPrefix("user."), name.utf8.count > 5 else { throw .notSupported }
        guard name.utf8.count <= SyncedXattr.maxNameBytes else { throw .nameTooLong }
        try commit { w in
            guard var item = try w.reader.item(ino) else { throw FSError.notFound }
            let exists = item.xattrs[name] != nil
            if create && exists { throw FSError.exists }
            if replace && !exists { throw FSError.noAttribute }
            item.xattrs[name] = Data(value)
            do { try SyncedXattr.validate(item.xattrs) } catch { throw FSError.attributeTooLarge }
            item.changed = Self.now()
            try w.update(item)
            try queueXattrChange(item, name: name, w)
        }
        engine.outboxChanged()
    }

    public func removeXattr(_ ino: Int64, name: String) throws(FSError) {
        if name.hasPrefix(ItemStatus.prefix) { throw .readOnlyAttribute }
        guard name.hasPrefix("user.") else { throw .noAttribute }
        try commit { w in
            guard var item = try w.reader.item(ino) else { throw FSError.notFound }
            guard item.xattrs.removeValue(forKey: name) != nil else { throw FSError.noAttribute }
            item.changed = Self.now()
            try w.update(item)
            try queueXattrChange(item, name: name, w)
        }
        engine.outboxChanged()
    }

    /// Records which attribute changed, for a merge with changes made elsewhere meanwhile,
    /// and queues the send of an uploaded item's attributes (a new item's create carries
    /// them; a change made while the create is in flight is sent after it, see
    /// `followUpCreate`).
    func queueXattrChange(_ item: LocalItem, name: String, _ w: LocalWriter) throws {
        guard try !w.reader.isExcluded(item.ino) else { return }
        try w.noteXattrChange(item.ino, name: name)
        if item.revision != nil { try w.enqueue(.xattrs, ino: item.ino) }
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

    @discardableResult
    func commit<T>(_ body: (LocalWriter) throws -> T) throws(FSError) -> T {
        var reserveLeft = true
        while true {
            do {
                return try store.write(body)
            } catch let error as FSError {
                throw error
            } catch where reserveLeft && Self.fsError(error) == .noSpace {
                // The volume is full. The reserve is there for this: without it not even an `rm`
                // that would free space could be recorded. The transaction rolled back; run it
                // again (bodies change nothing but the database, or reset what they set).
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

extension FileSystem: CacheFileHolders {
    public func downloadCompleted(_ ino: Int64, digest: ContentDigest) {
        handles.withLock { s in
            for (key, h) in s.open where h.ino == ino && h.digest == digest { s.open[key]!.knownLocal = true }
        }
    }

    public func willReplaceStaleCopy(_ ino: Int64) -> Bool {
        let keptOpen = handles.withLock { s -> Bool? in
            let ours = s.open.filter { $0.value.ino == ino }
            if ours.values.contains(where: \.writable) { return nil }
            // The others followed a download that never completed: `followed` fails their reads.
            for (key, h) in ours where h.knownLocal { s.open[key]!.oldCopy = true }
            return ours.values.contains(where: \.knownLocal)
        }
        guard let keptOpen else { return false }
        if keptOpen { pagesOfOldCopies.withLock { _ = $0.insert(ino) } }
        return true
    }
}
