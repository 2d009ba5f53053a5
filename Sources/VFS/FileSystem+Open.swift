import Glibc
import ItemModel
import LocalState
import OpenFiles
import Synchronization

extension FileSystem {
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
        try refuseChange(in: parent, name: name)
        let n = try Self.name(name)
        let now = Self.now()
        let made = try commit(Rerunnable { [self] w in
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
        })
        let fd: Int32
        do { fd = try cache.open(made.item.ino, truncate: true) } catch { throw Self.fsError(error) }
        // A new file is a change even if nothing is written: its release queues the upload.
        let opening = openFiles.open(Handle(ino: made.item.ino, fd: fd, writable: true, wrote: true, excluded: made.excluded),
                                     beingWritten: OpenFiles.BeingWritten(size: 0, modified: now))
        return Opened(handle: opening.handle, keepCache: false, attributes: attributes(of: made.item))
    }

    public func open(_ ino: Int64, flags: Int32) async throws(FSError) -> Opened {
        // Again while a server change lands between the download and the open (see
        // `finishOpen`): each round fetches the newer version. A file changed faster than it
        // downloads, round after round, fails the open rather than hold it for ever.
        for _ in 0..<Self.opensAfterServerChanges {
            let item = try openable(ino)
            guard item.kind == .file else { throw .isADirectory }
            if Self.isWritable(flags) { try refuseChange(of: item) }
            let waited = Self.needsContent(item, flags: flags, openForWriting: openFiles.isOpenForWriting(ino))
            if waited {
                do {
                    if Self.isWritable(flags) {
                        // Writing into the middle of a file needs all of it here first.
                        try await content.waitForContent(item, range: 0..<item.size)
                    } else {
                        try await content.prepareForReading(item)
                    }
                } catch {
                    throw Self.fsError(error)
                }
            }
            let wasLocal = item.content.isWhole
            // After a download the row changed: read it again. Another version than the one
            // waited for: wait for that one.
            let now = waited ? try self.item(ino) : item
            if now.revision != item.revision || now.serverDigest != item.serverDigest { continue }
            if let opened = try finishOpen(now, flags: flags, wasLocal: wasLocal) { return opened }
        }
        throw .io
    }

    static let opensAfterServerChanges = 8

    /// The open, answered at once, when it needs no download first (content here, or a
    /// truncating open); nil when it does (then the caller uses `open`, in a task). Most opens
    /// take this path and never leave the FUSE thread.
    public func openIfLocal(_ ino: Int64, flags: Int32) throws(FSError) -> Opened? {
        let item = try openable(ino)
        guard item.kind == .file else { throw .isADirectory }
        if Self.isWritable(flags) { try refuseChange(of: item) }
        if Self.needsContent(item, flags: flags, openForWriting: openFiles.isOpenForWriting(ino)) { return nil }
        // nil also when a server change landed meanwhile: `open` then fetches it.
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
        if content.isConnected {
            // Started first: its request is on its way while the handle is made.
            content.downloadNow(item)
            answer(try finishReadOnlyOpen(item, flags: flags))
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
        content.whenFirstBytesLand(item) { landed in
            let opened = rendezvous.withLock { r -> Opened? in
                guard !r.failed else { return nil }
                r.landed = landed
                return r.opened
            }
            if let opened { finish(opened, landed) }
        }
        let opened: Opened
        do { opened = try finishReadOnlyOpen(item, flags: flags) } catch {
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

    /// `finishOpen` of an open for reading, which never has to start again.
    func finishReadOnlyOpen(_ item: LocalItem, flags: Int32) throws(FSError) -> Opened {
        guard let opened = try finishOpen(item, flags: flags, wasLocal: false) else { throw .io }
        return opened
    }

    /// The handle, once the content the open needs is here. Nil for an open that writes into
    /// the content (not truncating) when a server change replaced that content since `item`
    /// was read: the writer would edit an older version's bytes with the newer revision as
    /// its base, and its upload would go over the other device's edit. Such a writer is
    /// counted in one transaction with a last look at the row, because the feed applies a
    /// change in a transaction and holds it for every writer counted by then.
    func finishOpen(_ item: LocalItem, flags: Int32, wasLocal: Bool) throws(FSError) -> Opened? {
        let ino = item.ino
        let writable = Self.isWritable(flags)
        let truncate = writable && (flags & O_TRUNC) != 0
        // Its writes go to the end of the file as the daemon holds it (`write`).
        let appends = writable && (flags & O_APPEND) != 0
        let fd: Int32
        do { fd = try cache.open(ino) } catch { throw Self.fsError(error) }
        // A stale copy here is whole (a refresh makes the row a placeholder first).
        let local = item.content.isWhole || item.content == .stale
        // Only a writer's close queues an upload, which an excluded item must not: a reader's
        // open (most opens, and every placeholder's first) skips that database read.
        func handle(excluded: Bool) -> Handle {
            Handle(ino: ino, fd: fd, writable: writable, appends: appends, excluded: excluded, digest: local ? nil : item.serverDigest, knownLocal: local)
        }
        let opening: OpenFiles.Opening
        if writable && !truncate {
            let counted: OpenFiles.Opening?
            do {
                counted = try store.write { [openFiles] w -> OpenFiles.Opening? in
                    guard let row = try w.reader.item(ino), row.revision == item.revision, row.serverDigest == item.serverDigest else { return nil }
                    // Joining a writer of the old copy is what `needsContent` allowed.
                    if row.content == .stale && !openFiles.isOpenForWriting(ino) { return nil }
                    return openFiles.open(handle(excluded: (try? w.reader.isExcluded(ino)) ?? false))
                }
            } catch {
                close(fd)
                throw Self.fsError(error)
            }
            guard let counted else {
                close(fd)
                return nil
            }
            opening = counted
        } else {
            opening = openFiles.open(handle(excluded: writable ? ((try? store.read { try $0.isExcluded(ino) }) ?? false) : false))
        }
        let handleID = opening.handle
        // A download that completed between the read of `item` and this registration marked
        // no handle of it (`downloadCompleted` came first): this one holds a whole copy too.
        // Unmarked, it would not count as an old copy when a new version replaces the file, and
        // a later open's pages of that version would be read through it.
        if !local, let digest = item.serverDigest,
           let now = try? store.read({ try $0.item(ino) }), now.content.isWhole, now.serverDigest == digest {
            openFiles.markKnownLocal(handleID)
        }
        if truncate {
            do { try setSize(ino, 0, fd: fd) } catch {
                release(handleID)
                throw error
            }
            markWritten(handleID)
        }
        content.didAccess(ino)
        // Truncated: the row changed (read it again), and the kernel's cached pages are old.
        let shown = try truncate ? self.item(ino) : item
        return Opened(handle: handleID, keepCache: wasLocal && !truncate && !opening.pagesOfOldCopy, attributes: attributes(of: shown),
                      flushOnClose: writable, directIO: opening.oldCopyOpen)
    }
}
