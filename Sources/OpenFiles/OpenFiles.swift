import CacheFiles
import Glibc
import ItemModel
import LocalState
import Synchronization

/// Everything the mount knows about files in use: each open descriptor, and per file its
/// opens and writers, write generations, the size being written, a failed write, a deletion
/// while open, old pages in the kernel, a server change held for its writers, and the upload
/// in flight. The file system and the sync engine share one table: each transition takes the
/// one lock once and returns what the caller must do after it.
///
/// Lock order: the table's lock is a leaf. No I/O, no database call and no other lock under it.
public final class OpenFiles: Sendable {
    /// One open descriptor (`open`/`create` until `release`).
    public struct Handle: Sendable {
        public let ino: Int64
        public let fd: Int32
        public let writable: Bool
        /// Opened with `O_APPEND`: its writes go to the end of the file as the daemon holds it.
        public let appends: Bool
        public var wrote: Bool
        /// A write through this descriptor failed: this version is never uploaded.
        public var writeError: Int32?
        public let excluded: Bool
        /// The server version this descriptor reads while it downloads (nil: local from the start).
        public var digest: ContentDigest?
        /// The descriptor's file holds a whole version: opened on one, or the download it
        /// followed completed. It stays whole while open (eviction waits for the last close,
        /// and a newer version goes into a new file), so reads skip the database.
        public var knownLocal: Bool
        /// Reads a version the file has since left: a stale copy whose cache file a download
        /// of the new version replaced, or a placeholder's file another version's download
        /// replaced (`willRefill`). The kernel's pages of this inode may be of either.
        public var oldCopy = false
        /// The file's write generation when this descriptor last recorded its writes and
        /// queued their upload (flush, fsync): a release or flush with nothing new commits nothing.
        public var savedGeneration: UInt64?

        public init(ino: Int64, fd: Int32, writable: Bool, appends: Bool = false, wrote: Bool = false, excluded: Bool, digest: ContentDigest? = nil, knownLocal: Bool = false) {
            self.ino = ino
            self.fd = fd
            self.writable = writable
            self.appends = appends
            self.wrote = wrote
            self.excluded = excluded
            self.digest = digest
            self.knownLocal = knownLocal
        }
    }

    /// The size and time of a file being written, ahead of the database until the last close.
    public struct BeingWritten: Sendable, Equatable {
        public var size: Int64
        public var modified: Timestamp
        public init(size: Int64, modified: Timestamp) {
            self.size = size
            self.modified = modified
        }
    }

    /// One file's facts. A file has an entry while any of them is set (see `isIdle`).
    struct File {
        var opens = 0
        var writers = 0
        /// Set from the table's clock on every local write: an upload whose file changed
        /// meanwhile is redone. Kept only for files written or uploaded lately (see
        /// `Table.generation(of:)` and `forgetGenerations`).
        var writeGeneration: UInt64?
        /// The generation the last release or fsync of a writer saved (see `uploadableGeneration`).
        var savedGeneration: UInt64?
        var beingWritten: BeingWritten?
        /// A write into the file failed (disk full) while it was open: part of it may have
        /// landed, so the version is broken for every descriptor, and no close queues it.
        var failedWrite: Int32?
        /// Deleted while open: the kernel may still ask about it until the last close.
        var detached: LocalItem?
        /// The kernel's pages may hold a replaced version's bytes (read through a handle of an
        /// old copy): opens do not keep them until no such handle is left.
        var pagesOfOldCopy = false
        /// A server change arrived while a writer had the file open: it waits in the database
        /// (`held_changes`) until the last writer closes.
        var changeHeldForWriters = false
        /// An upload recorded the file as clean while a writer kept it open (see `wrote`).
        var cleanedWhileOpen = false
        var uploading = false
        var uploadProgress: (sent: Int64, total: Int64)?

        var isIdle: Bool {
            opens == 0 && writers == 0 && writeGeneration == nil && savedGeneration == nil && beingWritten == nil
                && failedWrite == nil && detached == nil && !pagesOfOldCopy && !changeHeldForWriters
                && !cleanedWhileOpen && !uploading && uploadProgress == nil
        }

        /// Forgets the generations once no writer has the file open and no upload compares
        /// against them: everything written was saved, and the next generation starts afresh.
        mutating func forgetGenerations() {
            guard writers == 0 else { return }
            writeGeneration = nil
            savedGeneration = nil
        }
    }

    struct Table {
        var nextHandle: UInt64 = 1
        var handles: [UInt64: Handle] = [:]
        var files: [Int64: File] = [:]
        /// One clock for all files: a generation is never handed out twice, so a generation
        /// forgotten and made again never equals a value read before.
        var clock: UInt64 = 0

        /// Runs `body` on the file's entry, made if missing and dropped once idle.
        mutating func update<T>(_ ino: Int64, _ body: (inout File) -> T) -> T {
            var file = files[ino] ?? File()
            let result = body(&file)
            files[ino] = file.isIdle ? nil : file
            return result
        }

        /// The file's write generation. A file with none has no write that a release or fsync
        /// did not save (generations are forgotten only with no writer open): it gets a new one,
        /// saved. A snapshot taken before they were forgotten therefore never matches after.
        mutating func generation(of ino: Int64) -> UInt64 {
            if let g = files[ino]?.writeGeneration { return g }
            clock &+= 1
            let g = clock
            update(ino) { f in
                f.writeGeneration = g
                f.savedGeneration = g
            }
            return g
        }

        /// A write: a new generation. True when an upload had recorded the file as clean while
        /// open, so the row must be marked as having local changes again.
        mutating func wrote(_ ino: Int64) -> Bool {
            clock &+= 1
            let g = clock
            return update(ino) { f in
                f.writeGeneration = g
                defer { f.cleanedWhileOpen = false }
                return f.cleanedWhileOpen
            }
        }

        func handles(of ino: Int64) -> some Sequence<(key: UInt64, value: Handle)> {
            handles.lazy.filter { $0.value.ino == ino }
        }

        /// The file's cache file is about to be unlinked under its descriptors: those `isOld`
        /// picks become old copies, and the kernel's pages of the file count as theirs. Nil,
        /// marking nothing, when a writer has the file open (it writes into that file); else
        /// how many it marked.
        mutating func markOldCopies(of ino: Int64, where isOld: (Handle) -> Bool) -> Int? {
            let ours = Array(handles(of: ino))
            if ours.contains(where: { $0.value.writable }) { return nil }
            let old = ours.filter { isOld($0.value) }
            for (id, _) in old { handles[id]?.oldCopy = true }
            if !old.isEmpty { update(ino) { $0.pagesOfOldCopy = true } }
            return old.count
        }
    }

    let table = Mutex(Table())

    public init() {}
}

// MARK: What the file system does

extension OpenFiles {
    /// What an open must know of the kernel's pages of the file.
    public struct Opening: Sendable {
        public var handle: UInt64
        /// The kernel's pages may hold a replaced version's bytes: the open must not keep them.
        public var pagesOfOldCopy: Bool
        /// A handle still reads that version: the new one bypasses the page cache, which the two would share.
        public var oldCopyOpen: Bool
    }

    /// Records an open descriptor. `beingWritten`: a file created by this open.
    public func open(_ h: Handle, beingWritten: BeingWritten? = nil) -> Opening {
        table.withLock { t in
            let id = t.nextHandle
            t.nextHandle += 1
            t.handles[id] = h
            let oldCopyOpen = t.handles(of: h.ino).contains { $0.value.oldCopy }
            let pages = t.update(h.ino) { f in
                f.opens += 1
                if h.writable { f.writers += 1 }
                if let beingWritten { f.beingWritten = beingWritten }
                defer { if !oldCopyOpen { f.pagesOfOldCopy = false } }
                // The last old copy closed: this open (which does not keep the cache) drops the pages.
                return f.pagesOfOldCopy
            }
            return Opening(handle: id, pagesOfOldCopy: pages, oldCopyOpen: pages && oldCopyOpen)
        }
    }

    public func handle(_ id: UInt64) -> Handle? { table.withLock { $0.handles[id] } }

    /// The write failure a descriptor's close must report in the file's state: its own, or
    /// another descriptor's of the same file.
    public func writeFailure(of h: Handle) -> Int32? {
        h.writeError ?? table.withLock { $0.files[h.ino]?.failedWrite }
    }

    /// A write landed: the file's new generation, size and time. True when the row must be
    /// marked as having local changes again (see `Table.wrote`). `size`: the size before the
    /// write, when no write since the open set one (the caller reads it from the database).
    public func wrote(_ ino: Int64, upTo end: Int64, at time: Timestamp, size: Int64) -> Bool {
        table.withLock { t in
            let markAgain = t.wrote(ino)
            t.update(ino) { f in
                var entry = f.beingWritten ?? BeingWritten(size: size, modified: time)
                entry.size = max(entry.size, end)
                entry.modified = time
                f.beingWritten = entry
            }
            return markAgain
        }
    }

    /// The file was cut to `size` (a truncating open, or `truncate`).
    public func truncated(_ ino: Int64, to size: Int64, at time: Timestamp) {
        table.withLock { t in
            _ = t.wrote(ino)
            t.update(ino) { $0.beingWritten = BeingWritten(size: size, modified: time) }
        }
    }

    /// A write through `handle` failed with `code`: the version is broken for every
    /// descriptor. True as for `wrote`: part of it may have landed.
    public func writeFailed(_ handle: UInt64, code: Int32) -> Bool {
        table.withLock { t in
            guard let ino = t.handles[handle]?.ino else { return false }
            t.handles[handle]?.writeError = code
            let markAgain = t.wrote(ino)
            t.update(ino) { $0.failedWrite = code }
            return markAgain
        }
    }

    /// The first write through a handle (or a truncate): its close records and queues the version.
    public func markWritten(_ handle: UInt64) -> Handle? {
        table.withLock { t in
            t.handles[handle]?.wrote = true
            return t.handles[handle]
        }
    }

    public func markKnownLocal(_ handle: UInt64) { table.withLock { $0.handles[handle]?.knownLocal = true } }

    /// The descriptor recorded the file's writes up to `generation` and queued them.
    public func recorded(_ handle: UInt64, generation: UInt64) {
        table.withLock { $0.handles[handle]?.savedGeneration = generation }
    }

    /// An fsync, or the release of a writer, saved the file's writes up to `generation`: that
    /// version may go up even while another writer keeps the file open.
    public func saved(_ ino: Int64, generation: UInt64) {
        table.withLock { t in t.update(ino) { f in f.savedGeneration = max(f.savedGeneration ?? 0, generation) } }
    }

    /// How many local writes the file has had (in this run of the mount).
    public func writeGeneration(_ ino: Int64) -> UInt64 { table.withLock { $0.generation(of: ino) } }

    public func beingWritten(_ ino: Int64) -> BeingWritten? { table.withLock { $0.files[ino]?.beingWritten } }

    /// A `touch` of a file being written: its time is the one given, not the last write's.
    public func setModified(_ ino: Int64, _ time: Timestamp) {
        table.withLock { t in
            guard t.files[ino]?.beingWritten != nil else { return }
            t.files[ino]?.beingWritten?.modified = time
        }
    }

    /// The descriptor a truncate belongs to: `preferred` when it writes (`ftruncate`), else
    /// any writer of the file (a truncate by path while another descriptor writes).
    public func writer(of ino: Int64, preferring preferred: UInt64?) -> UInt64? {
        table.withLock { t in
            if let preferred, t.handles[preferred]?.writable == true { return preferred }
            return t.handles(of: ino).first { $0.value.writable }?.key
        }
    }

    /// Takes the descriptor out of the table at its release; the file counts as open until `closed`.
    public func takeHandle(_ id: UInt64) -> Handle? { table.withLock { $0.handles.removeValue(forKey: id) } }

    /// What a release must do once the descriptor is closed.
    public struct AfterClose: Sendable, Equatable {
        /// The last writer closed and a server change waits for it.
        public var applyHeldChange = false
        /// The descriptor wrote (its version is queued), or the last writer closed (an upload
        /// waiting for it goes now).
        public var wakeOutbox = false
        /// The file was deleted while open and this was its last descriptor.
        public var removeCacheFile = false
        /// The disk filled up under a writer and this was the last descriptor: the partial
        /// version is dropped and the file is again the server's version.
        public var revertToServerVersion = false
        /// The descriptor read a replaced, longer version: a reader that read to its end made
        /// the kernel shrink the inode's size to where its read came up short. Asked again only
        /// now: asked during its reads, the kernel would take the new size and read zeros past
        /// the old end.
        public var kernelMustForget = false
    }

    /// The descriptor `h`, taken by `takeHandle`, is closed. `saved`: the generation its
    /// release saved, if any. `failure`: the write failure its release recorded.
    public func closed(_ h: Handle, saved: UInt64?, failure: Int32?) -> AfterClose {
        table.withLock { t in
            let lastHandle = !t.handles.values.contains { $0.ino == h.ino }
            return t.update(h.ino) { f in
                var after = AfterClose(wakeOutbox: h.wrote, kernelMustForget: h.oldCopy)
                if let saved { f.savedGeneration = max(f.savedGeneration ?? 0, saved) }
                f.opens = max(f.opens - 1, 0)
                if h.writable {
                    f.writers = max(f.writers - 1, 0)
                    if f.writers == 0 {
                        after.wakeOutbox = true
                        f.cleanedWhileOpen = false
                        // An upload under way compares its snapshot when it is done, and forgets them then.
                        if !f.uploading { f.forgetGenerations() }
                        after.applyHeldChange = f.changeHeldForWriters
                        f.changeHeldForWriters = false
                    }
                }
                if lastHandle {
                    f.beingWritten = nil
                    after.removeCacheFile = f.detached != nil
                    f.detached = nil
                    f.failedWrite = nil
                    if let failure, failure == ENOSPC || failure == EDQUOT { after.revertToServerVersion = true }
                }
                return after
            }
        }
    }

    /// Keeps a deleted item for the kernel while it is open. False when it is not open: the
    /// caller removes its cache file.
    public func detachIfOpen(_ item: LocalItem) -> Bool {
        table.withLock { t in
            guard t.files[item.ino].map({ $0.opens > 0 }) == true else { return false }
            t.files[item.ino]?.detached = item
            return true
        }
    }

    public func detached(_ ino: Int64) -> LocalItem? { table.withLock { $0.files[ino]?.detached } }

    /// The kernel forgot the inode: a detached item nobody holds open goes.
    public func forget(_ ino: Int64) {
        table.withLock { t in
            guard let f = t.files[ino], f.opens == 0, f.detached != nil else { return }
            t.update(ino) { $0.detached = nil }
        }
    }

    public func isOpen(_ ino: Int64) -> Bool { table.withLock { ($0.files[ino]?.opens ?? 0) > 0 } }
    public func isOpenForWriting(_ ino: Int64) -> Bool { table.withLock { ($0.files[ino]?.writers ?? 0) > 0 } }
}

// MARK: What downloads do

extension OpenFiles {
    /// The download of `digest` into `file` is complete and checked: descriptors that followed
    /// it hold it whole. Only those open on that very file: a descriptor of an earlier attempt
    /// at the same version may hold a file a later download replaced (`willRefill`). Also
    /// called for a download cancelled while its check ran: its descriptors hold it whole even
    /// though the item has moved on.
    public func downloadCompleted(_ ino: Int64, digest: ContentDigest, file: FileIdentity) {
        let followers = table.withLock { t in
            t.handles(of: ino).filter { $0.value.digest == digest && !$0.value.knownLocal }.map { (id: $0.key, fd: $0.value.fd) }
        }
        // fstat outside the lock (a leaf: no system calls under it). A descriptor released
        // meanwhile is no longer in the table, so marking its id does nothing.
        let holding = followers.filter { FileIdentity(of: $0.fd) == file }.map(\.id)
        guard !holding.isEmpty else { return }
        table.withLock { t in for id in holding { t.handles[id]?.knownLocal = true } }
    }

    /// A placeholder's cache file is about to be emptied for a download of `digest`. True when
    /// descriptors that follow another version's download (or hold a copy the item has left)
    /// are open on it: then they become old copies, the caller unlinks the file so that they
    /// keep what they have, and the new version goes into a file of its own. Without that, the
    /// new version's bytes would land under them, and a new open would fill the kernel's pages
    /// of the inode, which they read too, with the new version. False also when a writer has
    /// the file open (it writes into that file, and needs it whole before it opens).
    public func willRefill(_ ino: Int64, for digest: ContentDigest) -> Bool {
        table.withLock { t in (t.markOldCopies(of: ino) { !$0.oldCopy && $0.digest != digest } ?? 0) > 0 }
    }

    /// A stale copy's cache file is about to be unlinked and a new version downloaded into a
    /// new one: descriptors open on the old file keep reading it (old copies). False refuses:
    /// a writer has the file open, and writes into that cache file.
    public func willReplaceStaleCopy(_ ino: Int64) -> Bool {
        // The others followed a download that never completed: their reads fail, as they do
        // for any handle whose version was replaced.
        table.withLock { t in t.markOldCopies(of: ino, where: \.knownLocal) != nil }
    }
}

// MARK: What uploads and the change feed do

extension OpenFiles {
    /// The file's write generation when its content may be uploaded now; nil while a writer
    /// has it open and the file was written since the last release or fsync of a writer: the
    /// content may then be half-written (`cat v1 > f` queues v1; a writer that opens f with
    /// `O_TRUNC` right after must not send the empty file in its place). What goes up is
    /// always what a release or fsync saved; with no writer open, every write was followed by
    /// a release (a crash is handled at startup).
    public func uploadableGeneration(_ ino: Int64) -> UInt64? {
        table.withLock { t in
            let generation = t.generation(of: ino)
            guard let f = t.files[ino], f.writers > 0, f.savedGeneration != generation else { return generation }
            return nil
        }
    }

    /// The upload of `generation` was answered. True when the file is still that version
    /// (and `stillDirty`): it is clean now, its generations are forgotten, and a writer that
    /// keeps it open marks it dirty again at its next write.
    public func uploaded(_ ino: Int64, generation: UInt64, stillDirty: Bool) -> Bool {
        table.withLock { t in
            guard t.generation(of: ino) == generation && stillDirty else { return false }
            t.update(ino) { f in
                if f.writers > 0 { f.cleanedWhileOpen = true }
                f.forgetGenerations()
            }
            return true
        }
    }

    public func startedUploading(_ inos: [Int64]) {
        table.withLock { t in for ino in inos { t.update(ino) { $0.uploading = true } } }
    }

    public func finishedUploading(_ inos: [Int64]) {
        table.withLock { t in
            for ino in inos {
                t.update(ino) { f in
                    f.uploading = false
                    f.uploadProgress = nil
                }
            }
        }
    }

    public func uploadProgress(_ ino: Int64, sent: Int64, of total: Int64) {
        table.withLock { t in t.update(ino) { $0.uploadProgress = (sent, total) } }
    }

    /// Whether the file is uploading, and how far its content is (percent), for the status.
    public func upload(_ ino: Int64) -> (uploading: Bool, percent: Int?) {
        table.withLock { t in
            let f = t.files[ino]
            return (f?.uploading ?? false, f?.uploadProgress.map { $0.total == 0 ? 100 : Int($0.sent * 100 / $0.total) })
        }
    }

    /// A server change of the file arrived: true when a writer has it open, and the change is
    /// then held until the last writer closes (`AfterClose.applyHeldChange`).
    public func holdForWriters(_ ino: Int64) -> Bool {
        table.withLock { t in
            guard (t.files[ino]?.writers ?? 0) > 0 else { return false }
            t.files[ino]?.changeHeldForWriters = true
            return true
        }
    }

    /// How many files have write generations: those written or uploaded lately, not every
    /// file the mount ever wrote.
    public var filesWithWriteGenerations: Int { table.withLock { $0.files.values.count { $0.writeGeneration != nil } } }
}
