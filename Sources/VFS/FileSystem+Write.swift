import Glibc
import ItemModel
import LocalState
import Logging
import OpenFiles

extension FileSystem {
    /// `fromPages`: dirty pages of a shared mapping, written back by the kernel through any
    /// open handle of the file; they go where they are, even through an appending handle.
    public func write(_ handle: UInt64, offset: Int64, data: [UInt8], fromPages: Bool = false) throws(FSError) -> Int {
        guard let h = openFiles.handle(handle) else { throw .badHandle }
        // The file's version is broken (a write failed): later writes fail at once. The kernel
        // reports the first failure of a large write() as a short write, and the writer goes
        // on; writing on would fill the space the reserve just freed for recording the failure.
        if let code = openFiles.writeFailure(of: h) { throw FSError(writeFailure: code) }
        // An append goes to the end of the file as the daemon holds it. The kernel names the
        // size it last heard of, and an open that waited for a newer version (a download, a
        // server change meanwhile) answers without telling it the new one: at the kernel's
        // offset the append would go over that version's end. The kernel holds the file's
        // lock for the whole write, so no other write moves the end meanwhile.
        var position = offset
        if h.appends && !fromPages {
            var st = stat()
            guard fstat(h.fd, &st) == 0 else { throw .io }
            position = Int64(st.st_size)
        }
        var done = 0
        while done < data.count {
            let n = data.withUnsafeBytes { pwrite(h.fd, $0.baseAddress! + done, data.count - done, off_t(position + Int64(done))) }
            if n < 0 {
                let code = errno
                if code == EINTR { continue }
                // Part of it may have landed: a snapshot taken meanwhile is not sent, and a file
                // an fsync's upload recorded as clean has local changes again.
                if openFiles.writeFailed(handle, code: code) { markWritten(handle) }
                cache.digests.forget(h.ino)
                // Disk full is ENOSPC to the writer, never EIO, and this version is not uploaded.
                // Free the reserve so that the close can still record that.
                if code == ENOSPC || code == EDQUOT { cache.dropReserve() }
                throw FSError(writeFailure: code)
            }
            done += n
        }
        let end = position + Int64(done)
        // A local-only file is never uploaded: no use hashing it.
        if !h.excluded { cache.digests.wrote(h.ino, at: position, bytes: data, fd: h.fd) }
        // The kernel put the bytes in its pages where it thought the file ended.
        if position != offset { content.kernelPagesAreStale(h.ino) }
        // The size the database holds is needed only by the first write since the open; later
        // writes (and every write to a file created here) find it in the table.
        let base = openFiles.beingWritten(h.ino) == nil ? (try? item(h.ino).size) ?? 0 : 0
        let markAgain = openFiles.wrote(h.ino, upTo: end, at: Self.now(), size: base)
        if !h.wrote || markAgain { markWritten(handle) }
        return done
    }

    /// The first write through a handle makes the item dirty (its base revision stays).
    func markWritten(_ handle: UInt64) {
        guard let h = openFiles.markWritten(handle) else { return }
        try? store.write { w in
            guard var row = try w.reader.item(h.ino), row.content != .dirty else { return }
            row.content = .dirty
            try w.update(row)
        }
    }

    /// Every close(2) of a descriptor that wrote records the writes and queues their upload
    /// before it returns: the release after the last close comes later, on its own, and a
    /// daemon killed in between would otherwise find a file its writer had closed without a
    /// queued upload, and keep it back as half-written.
    ///
    /// It is not a save, though: the upload still waits for the release (or an fsync). A
    /// close is also the shell's `cmd > f`, which opens f, truncates it, dup2s the descriptor
    /// to 1 and closes the original before `cmd` writes a byte. After a crash, a file that
    /// grew past the size its last close recorded is kept back as half-written (see
    /// `SyncEngine.recoverUnclosedWrites`).
    public func flush(_ handle: UInt64) throws(FSError) {
        guard let h = openFiles.handle(handle) else { throw .badHandle }
        if let code = h.writeError { throw FSError(writeFailure: code) }
        _ = try recordWrites(handle, h)
    }

    /// Makes the written content durable and queues its upload, as a close does. The upload goes
    /// even while the file stays open: the writer said this version is whole.
    public func fsync(_ handle: UInt64) throws(FSError) {
        guard let h = openFiles.handle(handle) else { throw .badHandle }
        if let code = h.writeError { throw FSError(writeFailure: code) }
        guard Glibc.fsync(h.fd) == 0 else { throw errno == ENOSPC ? .noSpace : .io }
        if let generation = try recordWrites(handle, h) {
            openFiles.saved(h.ino, generation: generation)
            content.outboxChanged()
        }
        // The content is on disk: so must be the record that it is to be uploaded.
        do { try store.makeDurable() } catch { throw .io }
    }

    /// Records the handle's writes and queues their upload, unless nothing was written since
    /// it last did. The write generation recorded; nil when the handle never wrote.
    func recordWrites(_ handle: UInt64, _ h: Handle) throws(FSError) -> UInt64? {
        guard h.wrote else { return nil }
        if let code = openFiles.writeFailure(of: h) {
            // Another descriptor's write failed: recorded as such, never queued.
            var broken = h
            broken.writeError = code
            try persistWrites(broken, queueUpload: false)
            return nil
        }
        // Read first: a write landing during the commit bumps it, and the next save records it.
        let generation = openFiles.writeGeneration(h.ino)
        guard h.savedGeneration != generation else { return generation }
        try persistWrites(h, queueUpload: true)
        openFiles.recorded(handle, generation: generation)
        return generation
    }

    public func release(_ handle: UInt64) {
        guard let h = openFiles.takeHandle(handle) else { return }
        // A failed first write leaves `wrote` false, but part of it may have landed: the
        // failure is recorded (and the queued uploads dropped) all the same.
        let failure = openFiles.writeFailure(of: h)
        var saved: UInt64?
        if h.wrote || h.writeError != nil {
            let generation = openFiles.writeGeneration(h.ino)
            var recorded = h
            recorded.writeError = failure
            do {
                // Mostly recorded by the close (flush) already.
                if failure != nil || h.savedGeneration != generation { try persistWrites(recorded, queueUpload: failure == nil) }
                // The writer is done: its version may go up even while another writer has the file open.
                if failure == nil { saved = generation }
            } catch {
                logger.error("cannot record a closed file", metadata: ["item.ino": "\(h.ino)", "error": "\(error)"])
            }
        }
        close(h.fd)
        let after = openFiles.closed(h, saved: saved, failure: failure)
        if h.writable && !openFiles.isOpenForWriting(h.ino) { cache.digests.writersClosed(h.ino) }
        if after.removeCacheFile { cache.remove(h.ino) }
        content.fileClosed(h.ino, then: after)
    }

    /// Writes the file's new size and time, and (unless the write failed) queues the upload,
    /// in one transaction: a closed file's upload survives a crash.
    func persistWrites(_ h: Handle, queueUpload: Bool) throws(FSError) {
        let l = openFiles.beingWritten(h.ino)
        let size = cache.size(h.ino) ?? l?.size ?? 0
        try commit(Rerunnable { w in
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
        })
        content.contentChangedLocally()
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
        try refuseChange(of: item)
        if let size = changes.size {
            guard item.kind == .file else { throw .isADirectory }
            if size != 0 && item.content.needsDownload {
                do { try await content.waitForContent(item, range: 0..<item.size) } catch { throw Self.fsError(error) }
            }
            let fd: Int32
            do { fd = try cache.open(ino) } catch { throw Self.fsError(error) }
            defer { close(fd) }
            try setSize(ino, size, fd: fd)
            // The truncate belongs to the descriptor it came through (`ftruncate`, as truncate(1)
            // does), whose close then saves it; a truncate by path, while another descriptor
            // writes, to one of those (any: the file's upload waits for a save either way).
            if let writer = openFiles.writer(of: ino, preferring: handle) {
                markWritten(writer)
            } else {
                let generation = openFiles.writeGeneration(ino)
                try persistWrites(Handle(ino: ino, fd: fd, writable: true, wrote: true, excluded: (try? store.read { try $0.isExcluded(ino) }) ?? false), queueUpload: true)
                // No writer holds it: this truncate is the whole change, saved.
                openFiles.saved(ino, generation: generation)
                content.outboxChanged()
            }
            item = try self.item(ino)
        }
        if changes.mode != nil || changes.mtime != nil || changes.uid != nil || changes.gid != nil || changes.atime != nil {
            let synced = changes.mode != nil || changes.mtime != nil
            try commit(Rerunnable { w in
                guard var row = try w.reader.item(ino) else { throw FSError.notFound }
                if let mode = changes.mode { row.mode = mode & 0o7777 }
                if let uid = changes.uid { row.uid = uid }
                if let gid = changes.gid { row.gid = gid }
                if let mtime = changes.mtime { row.modified = mtime }
                if let atime = changes.atime { row.lastAccess = atime }
                row.changed = Self.now()
                try w.update(row)
                if try synced && row.revision != nil && !w.reader.isExcluded(ino) { try w.enqueue(.attributes, ino: ino) }
            })
            if let mtime = changes.mtime { openFiles.setModified(ino, mtime) }
            if changes.atime != nil { content.forgetUnsavedAccess(ino) }
            content.outboxChanged()
        }
        return attributes(of: try self.item(ino))
    }

    func setSize(_ ino: Int64, _ size: Int64, fd: Int32) throws(FSError) {
        guard ftruncate(fd, off_t(size)) == 0 else {
            let code = errno
            if code == ENOSPC { cache.dropReserve() }
            throw FSError(writeFailure: code)
        }
        // After the cut: a write landing before it would otherwise be hashed as still there.
        cache.digests.forget(ino)
        let now = Self.now()
        openFiles.truncated(ino, to: size, at: now)
        try commit(Rerunnable { w in
            guard var item = try w.reader.item(ino) else { return }
            item.size = size
            item.modified = now
            item.content = .dirty
            try w.update(item)
            // The version an earlier close queued is gone from the cache file: its upload would
            // send this cut file. The truncating writer's close (or the caller, for a truncate
            // by path) queues the next; a crash before that keeps the file back.
            try w.dropUploads(of: ino)
        })
    }
}
