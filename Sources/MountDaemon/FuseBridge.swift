import FuseKit
import Glibc
import ItemModel
import PageCache
import Synchronization
import VFS

/// FuseKit ⇄ VFS: each handler converts the request, makes one VFS call and converts its
/// answer to the reply. No file-system rules live here.
///
/// Metadata requests are answered on the FUSE thread (local database, no network). Requests
/// that may wait for the network (open, read, setattr) hand VFS a pending reply, which VFS
/// answers from whichever thread has the answer (see `FileSystem`'s answering entry points).
struct FuseBridge: FileSystemHandler {
    let fs: FileSystem
    let failures: FailureLog

    /// Long kernel caches make `stat` and `ls` run at native speed; remote changes invalidate
    /// the affected entries explicitly (KernelInvalidator).
    static let entryTimeout: Duration = .seconds(3600)
    static let attributeTimeout: Duration = .seconds(3600)

    func fileAttributes(_ a: NodeAttributes) -> FileAttributes {
        FileAttributes(
            ino: UInt64(a.ino), mode: Self.fileType(a.kind).modeBits | a.mode, nlink: a.nlink, uid: a.uid, gid: a.gid,
            size: a.size, blocks: a.blocks, blockSize: 4096, atime: Self.time(a.atime), mtime: Self.time(a.mtime), ctime: Self.time(a.ctime))
    }

    static func fileType(_ kind: ItemKind) -> FileType {
        switch kind {
        case .file: .regular
        case .folder: .directory
        case .symlink: .symlink
        case .fifo: .fifo
        case .socket: .socket
        }
    }

    static func time(_ t: Timestamp) -> FileTime {
        FileTime(seconds: t / 1_000_000_000, nanoseconds: Int32(t % 1_000_000_000))
    }

    func entry(_ a: NodeAttributes) -> FuseEntry {
        FuseEntry(attributes: fileAttributes(a), generation: 0, attributeTimeout: Self.attributeTimeout, entryTimeout: Self.entryTimeout)
    }

    static func nanoseconds(_ change: TimeChange?) -> Timestamp? {
        switch change {
        case nil: nil
        case .now: WallClock.now()
        case .set(let t): t.seconds * 1_000_000_000 + Int64(t.nanoseconds)
        }
    }

    func lookup(parent: UInt64, name: [UInt8], context: RequestContext, reply: consuming EntryReply) {
        do {
            if let a = try fs.lookup(parent: Int64(parent), name: name) {
                reply.entry(entry(a))
            } else {
                reply.negative(timeout: Self.entryTimeout)
            }
        } catch { reply.error(failures.errno(.lookup, parent, error)) }
    }

    func forget(ino: UInt64, lookups: UInt64) { fs.forget(Int64(ino)) }

    func getattr(ino: UInt64, handle: UInt64?, context: RequestContext, reply: consuming AttrReply) {
        do { reply.attributes(fileAttributes(try fs.attributes(Int64(ino))), timeout: Self.attributeTimeout) } catch { reply.error(failures.errno(.getattr, ino, error)) }
    }

    func setattr(ino: UInt64, changes: AttributeChanges, handle: UInt64?, context: RequestContext, reply: consuming AttrReply) {
        let vfsChanges = FileSystem.AttributeChanges(
            mode: changes.mode, uid: changes.uid, gid: changes.gid, size: changes.size,
            atime: Self.nanoseconds(changes.atime), mtime: Self.nanoseconds(changes.mtime))
        let pending = PendingAttributes(reply)
        let bridge = self
        fs.setAttributes(Int64(ino), vfsChanges, handle: handle) { result in
            guard let reply = pending.take() else { return }
            switch result {
            case .success(let a): reply.attributes(bridge.fileAttributes(a), timeout: Self.attributeTimeout)
            case .failure(let error): reply.error(failures.errno(.setattr, ino, error))
            }
        }
    }

    func readlink(ino: UInt64, context: RequestContext, reply: consuming ReadlinkReply) {
        do { reply.target(try fs.readlink(Int64(ino))) } catch { reply.error(failures.errno(.readlink, ino, error)) }
    }

    func mknod(parent: UInt64, name: [UInt8], type: FileType, mode: UInt32, context: RequestContext, reply: consuming EntryReply) {
        let node: FileSystem.NodeType = switch type {
        case .regular: .regular
        case .fifo: .fifo
        case .socket: .socket
        case .directory, .symlink, .characterDevice, .blockDevice: .device
        }
        do {
            reply.entry(entry(try fs.makeNode(parent: Int64(parent), name: name, type: node, mode: mode, uid: context.uid, gid: context.gid)))
        } catch { reply.error(failures.errno(.mknod, parent, error)) }
    }

    func mkdir(parent: UInt64, name: [UInt8], mode: UInt32, context: RequestContext, reply: consuming EntryReply) {
        do {
            reply.entry(entry(try fs.makeDirectory(parent: Int64(parent), name: name, mode: mode, uid: context.uid, gid: context.gid)))
        } catch { reply.error(failures.errno(.mkdir, parent, error)) }
    }

    func unlink(parent: UInt64, name: [UInt8], context: RequestContext, reply: consuming StatusReply) {
        do { try fs.unlink(parent: Int64(parent), name: name); reply.success() } catch { reply.error(failures.errno(.unlink, parent, error)) }
    }

    func rmdir(parent: UInt64, name: [UInt8], context: RequestContext, reply: consuming StatusReply) {
        do { try fs.removeDirectory(parent: Int64(parent), name: name); reply.success() } catch { reply.error(failures.errno(.rmdir, parent, error)) }
    }

    func symlink(target: [UInt8], parent: UInt64, name: [UInt8], context: RequestContext, reply: consuming EntryReply) {
        do { reply.entry(entry(try fs.symlink(target: target, parent: Int64(parent), name: name, uid: context.uid, gid: context.gid))) } catch { reply.error(failures.errno(.symlink, parent, error)) }
    }

    func rename(parent: UInt64, name: [UInt8], newParent: UInt64, newName: [UInt8], flags: RenameFlags, context: RequestContext, reply: consuming StatusReply) {
        do {
            try fs.rename(parent: Int64(parent), name: name, newParent: Int64(newParent), newName: newName,
                          noReplace: flags.contains(.noReplace), exchange: flags.contains(.exchange), whiteout: flags.contains(.whiteout))
            reply.success()
        } catch { reply.error(failures.errno(.rename, parent, error)) }
    }

    func link(ino: UInt64, newParent: UInt64, newName: [UInt8], context: RequestContext, reply: consuming EntryReply) {
        do { reply.entry(entry(try fs.link(Int64(ino), newParent: Int64(newParent), newName: newName))) } catch { reply.error(failures.errno(.link, ino, error)) }
    }

    func open(ino: UInt64, flags: Int32, context: RequestContext, reply: consuming OpenReply) {
        let pending = PendingOpen(reply)
        let fs = self.fs
        let failures = self.failures
        fs.open(Int64(ino), flags: flags) { pending.answer($0, fs, failures.for(.open, ino)) }
    }

    static func answer(_ reply: consuming OpenReply, _ opened: FileSystem.Opened, _ fs: FileSystem) {
        var options: OpenOptions = opened.keepCache ? [.keepCache] : []
        if !opened.flushOnClose { options.insert(.noFlush) }
        if opened.directIO { options.insert(.directIO) }
        if !reply.opened(handle: opened.handle, options: options) {
            fs.release(opened.handle)  // the caller was interrupted: no release will come
        }
    }

    func create(parent: UInt64, name: [UInt8], mode: UInt32, flags: Int32, context: RequestContext, reply: consuming CreateReply) {
        do {
            let opened = try fs.createFile(parent: Int64(parent), name: name, mode: mode, flags: flags, uid: context.uid, gid: context.gid)
            if !reply.created(entry(opened.attributes), handle: opened.handle) { fs.release(opened.handle) }
        } catch { reply.error(failures.errno(.create, parent, error)) }
    }

    func read(ino: UInt64, handle: UInt64, offset: Int64, size: Int, context: RequestContext, reply: consuming ReadReply) {
        let pending = PendingRead(reply)
        let failures = self.failures
        fs.read(handle, offset: offset, size: size) { pending.answer($0, failures.for(.read, ino)) }
    }

    static func answer(_ reply: consuming ReadReply, _ result: FileSystem.ReadResult) {
        switch result {
        case .bytes(let b): reply.data(b)
        case .file(let fd, let off, let count):
            if reply.file(descriptor: fd, offset: off, count: count) { servedFromCache(fd, off, count) }
        }
    }

    /// The kernel keeps what it read in the mount's own page cache (open with keep_cache), so
    /// the cache file's copy of a file read through is dropped behind the reader (DropBehind).
    static func servedFromCache(_ fd: Int32, _ offset: Int64, _ count: Int) {
        DropBehind.afterRead(fd: fd, range: offset..<(offset + Int64(count)))
    }

    func write(ino: UInt64, handle: UInt64, offset: Int64, data: [UInt8], isWritepage: Bool, context: RequestContext, reply: consuming WriteReply) {
        do { reply.written(try fs.write(handle, offset: offset, data: data, fromPages: isWritepage)) } catch { reply.error(failures.errno(.write, ino, error)) }
    }

    func flush(ino: UInt64, handle: UInt64, lockOwner: UInt64, context: RequestContext, reply: consuming StatusReply) {
        do { try fs.flush(handle); reply.success() } catch { reply.error(failures.errno(.flush, ino, error)) }
    }

    func release(ino: UInt64, handle: UInt64, flags: Int32, context: RequestContext, reply: consuming StatusReply) {
        fs.release(handle)
        reply.success()
    }

    func fsync(ino: UInt64, handle: UInt64, dataOnly: Bool, context: RequestContext, reply: consuming StatusReply) {
        do { try fs.fsync(handle); reply.success() } catch { reply.error(failures.errno(.fsync, ino, error)) }
    }

    func opendir(ino: UInt64, flags: Int32, context: RequestContext, reply: consuming OpenReply) {
        // The kernel keeps the listing (FOPEN_CACHE_DIR, and KEEP_CACHE so that an open does not
        // drop it): a second `ls` costs an open and a release, no query. Local changes through
        // the mount reset it in the kernel; changes the daemon makes (remote ones, conflicted
        // copies) move the folder's mtime and invalidate it (KernelInvalidator), and the kernel
        // then lists the folder afresh.
        do {
            let handle = try fs.openDirectory(Int64(ino))
            if !reply.opened(handle: handle, options: [.cacheDirectory, .keepCache]) { fs.closeDirectory(handle) }
        } catch { reply.error(failures.errno(.opendir, ino, error)) }
    }

    func readdir(ino: UInt64, handle: UInt64, offset: Int64, context: RequestContext, reply: consuming DirectoryReply) {
        do {
            var index = Int(offset)
            let entries = try fs.readDirectory(handle, from: index)
            for e in entries {
                index += 1
                if !reply.add(name: Array(e.name.utf8), ino: UInt64(e.attributes.ino), type: Self.fileType(e.attributes.kind), nextOffset: Int64(index)) { break }
            }
            reply.send()
        } catch { reply.error(failures.errno(.readdir, ino, error)) }
    }

    func readdirplus(ino: UInt64, handle: UInt64, offset: Int64, context: RequestContext, reply: consuming DirectoryPlusReply) {
        do {
            var index = Int(offset)
            let entries = try fs.readDirectory(handle, from: index)
            for e in entries {
                index += 1
                if !reply.add(name: Array(e.name.utf8), entry: entry(e.attributes), nextOffset: Int64(index)) { break }
            }
            reply.send()
        } catch { reply.error(failures.errno(.readdirplus, ino, error)) }
    }

    func releasedir(ino: UInt64, handle: UInt64, context: RequestContext, reply: consuming StatusReply) {
        fs.closeDirectory(handle)
        reply.success()
    }

    func fsyncdir(ino: UInt64, handle: UInt64, dataOnly: Bool, context: RequestContext, reply: consuming StatusReply) {
        reply.success()
    }

    func statfs(ino: UInt64, context: RequestContext, reply: consuming StatfsReply) {
        let s = fs.statistics()
        reply.statistics(FileSystemStatistics(
            blockSize: s.blockSize, totalBlocks: s.blocks, freeBlocks: s.blocksFree, availableBlocks: s.blocksAvailable,
            totalFiles: s.files, freeFiles: s.filesFree, maxNameLength: s.nameMax))
    }

    func setxattr(ino: UInt64, name: [UInt8], value: [UInt8], flags: XattrSetFlags, context: RequestContext, reply: consuming StatusReply) {
        guard let n = String(validating: name, as: UTF8.self) else { return reply.error(EINVAL) }
        do {
            try fs.setXattr(Int64(ino), name: n, value: value, create: flags.contains(.create), replace: flags.contains(.replace))
            reply.success()
        } catch { reply.error(failures.errno(.setxattr, ino, error)) }
    }

    func getxattr(ino: UInt64, name: [UInt8], context: RequestContext, reply: consuming XattrReply) {
        guard let n = String(validating: name, as: UTF8.self) else { return reply.error(ENODATA) }
        do { reply.value(try fs.getXattr(Int64(ino), name: n)) } catch { reply.error(failures.errno(.getxattr, ino, error)) }
    }

    func listxattr(ino: UInt64, context: RequestContext, reply: consuming XattrReply) {
        do { reply.names(try fs.listXattrs(Int64(ino)).map { Array($0.utf8) }) } catch { reply.error(failures.errno(.listxattr, ino, error)) }
    }

    func removexattr(ino: UInt64, name: [UInt8], context: RequestContext, reply: consuming StatusReply) {
        guard let n = String(validating: name, as: UTF8.self) else { return reply.error(ENODATA) }
        do { try fs.removeXattr(Int64(ino), name: n); reply.success() } catch { reply.error(failures.errno(.removexattr, ino, error)) }
    }
}

/// A reply answered later from whichever thread gets there first: the others find it taken.
final class PendingReply<Reply: ~Copyable & Sendable>: Sendable {
    let reply: Mutex<Reply?>

    init(_ reply: consuming Reply) { self.reply = Mutex(reply) }

    func take() -> Reply? { reply.withLock { $0.take() } }
}

typealias PendingRead = PendingReply<ReadReply>
typealias PendingOpen = PendingReply<OpenReply>
typealias PendingAttributes = PendingReply<AttrReply>

extension PendingReply where Reply == ReadReply {
    func answer(_ result: Result<FileSystem.ReadResult, FSError>, _ failed: (FSError) -> Int32) {
        guard let reply = take() else { return }
        switch result {
        case .success(let ready): FuseBridge.answer(reply, ready)
        case .failure(let error): reply.error(failed(error))
        }
    }
}

extension PendingReply where Reply == OpenReply {
    func answer(_ result: Result<FileSystem.Opened, FSError>, _ fs: FileSystem, _ failed: (FSError) -> Int32) {
        guard let reply = take() else { return }
        switch result {
        case .success(let opened): FuseBridge.answer(reply, opened, fs)
        case .failure(let error): reply.error(failed(error))
        }
    }
}
