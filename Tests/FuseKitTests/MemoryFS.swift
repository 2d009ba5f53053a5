// A tiny in-memory FileSystemHandler for FuseKit's tests: a dictionary of inodes behind one
// Mutex. It answers most requests on the FUSE thread and some (read, write, readdirplus) from
// a Task, so both reply paths are exercised.
//
// Guards: `state` (one Mutex) guards every node and counter. It is never held while replying
// or while calling anything outside this file.

import FuseKit
import Glibc
import Synchronization

final class MemoryFS: FileSystemHandler {
    struct Node {
        var attributes: FileAttributes
        var data: [UInt8] = []
        var children: [[UInt8]: UInt64] = [:]
        var target: [UInt8] = []
        var xattrs: [[UInt8]: [UInt8]] = [:]
        /// Reads drop their reply token from another task: the caller must see EIO.
        var dropReads = false
        /// Reads are answered by splicing from this open file instead of `data`.
        var backingDescriptor: Int32?
        /// Opens are parked unanswered in `heldOpen` until the test takes them.
        var holdOpens = false
    }

    struct Counters: Sendable {
        var lookups = 0
        var readdirCalls = 0
        var readdirplusCalls = 0
        var creates = 0
        var renameFlags: [RenameFlags] = []
        var forgets: UInt64 = 0
    }

    struct State {
        var nodes: [UInt64: Node] = [:]
        var nextIno: UInt64 = 2
        var counters = Counters()
    }

    let state = Mutex(State())
    /// An open of a `holdOpens` file, not yet answered.
    let heldOpen = Mutex<OpenReply?>(nil)
    /// Long, so that tests can see the kernel cache and what invalidation does to it.
    let timeout: Duration = .seconds(3600)

    init() {
        let now = FileTime.now()
        let root = FileAttributes(
            ino: 1, mode: S_IFDIR | 0o755, nlink: 2, uid: getuid(), gid: getgid(),
            atime: now, mtime: now, ctime: now)
        state.withLock { $0.nodes[1] = Node(attributes: root) }
    }

    var counters: Counters { state.withLock { $0.counters } }

    // MARK: Setup and "remote" changes made behind the kernel's back

    @discardableResult
    func addFile(
        _ name: String, in parent: UInt64 = 1, contents: [UInt8] = [], dropReads: Bool = false, holdOpens: Bool = false
    ) -> UInt64 {
        state.withLock { state in
            let ino = Self.makeNode(&state, parent: parent, name: Array(name.utf8), mode: S_IFREG | 0o644, uid: getuid(), gid: getgid())
            state.nodes[ino]!.data = contents
            state.nodes[ino]!.attributes.size = Int64(contents.count)
            state.nodes[ino]!.attributes.blocks = (Int64(contents.count) + 511) / 512
            state.nodes[ino]!.dropReads = dropReads
            state.nodes[ino]!.holdOpens = holdOpens
            return ino
        }
    }

    @discardableResult
    func addBackedFile(_ name: String, descriptor: Int32, size: Int64) -> UInt64 {
        state.withLock { state in
            let ino = Self.makeNode(&state, parent: 1, name: Array(name.utf8), mode: S_IFREG | 0o644, uid: getuid(), gid: getgid())
            state.nodes[ino]!.backingDescriptor = descriptor
            state.nodes[ino]!.attributes.size = size
            return ino
        }
    }

    @discardableResult
    func addDirectory(_ name: String, in parent: UInt64 = 1) -> UInt64 {
        state.withLock { state in
            Self.makeNode(&state, parent: parent, name: Array(name.utf8), mode: S_IFDIR | 0o755, uid: getuid(), gid: getgid())
        }
    }

    /// Renames without telling the kernel, as a remote change would.
    func renameBehindKernel(_ name: String, to newName: String, in parent: UInt64 = 1) {
        state.withLock { state in
            let ino = state.nodes[parent]!.children.removeValue(forKey: Array(name.utf8))!
            state.nodes[parent]!.children[Array(newName.utf8)] = ino
        }
    }

    private static func makeNode(
        _ state: inout State, parent: UInt64, name: [UInt8], mode: UInt32, uid: UInt32, gid: UInt32
    ) -> UInt64 {
        let ino = state.nextIno
        state.nextIno += 1
        let now = FileTime.now()
        let isDirectory = mode & S_IFMT == S_IFDIR
        let attributes = FileAttributes(
            ino: ino, mode: mode, nlink: isDirectory ? 2 : 1, uid: uid, gid: gid,
            atime: now, mtime: now, ctime: now)
        state.nodes[ino] = Node(attributes: attributes)
        state.nodes[parent]!.children[name] = ino
        if isDirectory { state.nodes[parent]!.attributes.nlink += 1 }
        touch(&state, parent)
        return ino
    }

    private static func touch(_ state: inout State, _ ino: UInt64) {
        let now = FileTime.now()
        state.nodes[ino]?.attributes.mtime = now
        state.nodes[ino]?.attributes.ctime = now
    }

    private func entry(_ attributes: FileAttributes) -> FuseEntry {
        FuseEntry(attributes: attributes, attributeTimeout: timeout, entryTimeout: timeout)
    }

    /// Creates a node of `mode` under `parent`: its attributes, or an errno.
    private func create(parent: UInt64, name: [UInt8], mode: UInt32, context: RequestContext) -> Result<FileAttributes, Errno> {
        state.withLock { state in
            guard let dir = state.nodes[parent] else { return .failure(Errno(ENOENT)) }
            guard dir.attributes.type == .directory else { return .failure(Errno(ENOTDIR)) }
            guard dir.children[name] == nil else { return .failure(Errno(EEXIST)) }
            let ino = Self.makeNode(&state, parent: parent, name: name, mode: mode, uid: context.uid, gid: context.gid)
            return .success(state.nodes[ino]!.attributes)
        }
    }

    struct Errno: Error { let code: Int32; init(_ code: Int32) { self.code = code } }

    // MARK: FileSystemHandler

    func lookup(parent: UInt64, name: [UInt8], context: RequestContext, reply: consuming EntryReply) {
        let found: FileAttributes? = state.withLock { state in
            state.counters.lookups += 1
            return state.nodes[parent]?.children[name].flatMap { state.nodes[$0]?.attributes }
        }
        if let found {
            reply.entry(entry(found))
        } else {
            reply.negative(timeout: timeout)
        }
    }

    func forget(ino: UInt64, lookups: UInt64) {
        state.withLock { $0.counters.forgets += lookups }
    }

    func getattr(ino: UInt64, handle: UInt64?, context: RequestContext, reply: consuming AttrReply) {
        guard let attributes = state.withLock({ $0.nodes[ino]?.attributes }) else { return reply.error(ENOENT) }
        reply.attributes(attributes, timeout: timeout)
    }

    func setattr(ino: UInt64, changes: AttributeChanges, handle: UInt64?, context: RequestContext, reply: consuming AttrReply) {
        let updated: FileAttributes? = state.withLock { state in
            guard var node = state.nodes[ino] else { return nil }
            let now = FileTime.now()
            if let mode = changes.mode { node.attributes.mode = node.attributes.mode & S_IFMT | mode }
            if let uid = changes.uid { node.attributes.uid = uid }
            if let gid = changes.gid { node.attributes.gid = gid }
            if let size = changes.size {
                node.data = Array(node.data.prefix(Int(size))) + [UInt8](repeating: 0, count: max(0, Int(size) - node.data.count))
                node.attributes.size = size
                node.attributes.blocks = (size + 511) / 512
                node.attributes.mtime = now
            }
            switch changes.atime {
            case .now?: node.attributes.atime = now
            case .set(let time)?: node.attributes.atime = time
            case nil: break
            }
            switch changes.mtime {
            case .now?: node.attributes.mtime = now
            case .set(let time)?: node.attributes.mtime = time
            case nil: break
            }
            node.attributes.ctime = changes.ctime ?? now
            state.nodes[ino] = node
            return node.attributes
        }
        guard let updated else { return reply.error(ENOENT) }
        reply.attributes(updated, timeout: timeout)
    }

    func readlink(ino: UInt64, context: RequestContext, reply: consuming ReadlinkReply) {
        guard let node = state.withLock({ $0.nodes[ino] }) else { return reply.error(ENOENT) }
        guard node.attributes.type == .symlink else { return reply.error(EINVAL) }
        reply.target(node.target)
    }

    func mknod(parent: UInt64, name: [UInt8], type: FileType, mode: UInt32, context: RequestContext, reply: consuming EntryReply) {
        switch create(parent: parent, name: name, mode: type.modeBits | mode, context: context) {
        case .success(let attributes): reply.entry(entry(attributes))
        case .failure(let error): reply.error(error.code)
        }
    }

    func mkdir(parent: UInt64, name: [UInt8], mode: UInt32, context: RequestContext, reply: consuming EntryReply) {
        switch create(parent: parent, name: name, mode: S_IFDIR | mode, context: context) {
        case .success(let attributes): reply.entry(entry(attributes))
        case .failure(let error): reply.error(error.code)
        }
    }

    func unlink(parent: UInt64, name: [UInt8], context: RequestContext, reply: consuming StatusReply) {
        let result: Int32 = state.withLock { state in
            guard let ino = state.nodes[parent]?.children[name], let node = state.nodes[ino] else { return ENOENT }
            guard node.attributes.type != .directory else { return EISDIR }
            state.nodes[parent]!.children[name] = nil
            // Kept in `nodes` until forgotten would be right; tests never reuse inodes, so
            // dropping the link count is enough here.
            state.nodes[ino]!.attributes.nlink -= 1
            Self.touch(&state, parent)
            return 0
        }
        result == 0 ? reply.success() : reply.error(result)
    }

    func rmdir(parent: UInt64, name: [UInt8], context: RequestContext, reply: consuming StatusReply) {
        let result: Int32 = state.withLock { state in
            guard let ino = state.nodes[parent]?.children[name], let node = state.nodes[ino] else { return ENOENT }
            guard node.attributes.type == .directory else { return ENOTDIR }
            guard node.children.isEmpty else { return ENOTEMPTY }
            state.nodes[parent]!.children[name] = nil
            state.nodes[parent]!.attributes.nlink -= 1
            Self.touch(&state, parent)
            return 0
        }
        result == 0 ? reply.success() : reply.error(result)
    }

    func symlink(target: [UInt8], parent: UInt64, name: [UInt8], context: RequestContext, reply: consuming EntryReply) {
        let created: Result<FileAttributes, Errno> = state.withLock { state in
            guard let dir = state.nodes[parent], dir.attributes.type == .directory else { return .failure(Errno(ENOTDIR)) }
            guard dir.children[name] == nil else { return .failure(Errno(EEXIST)) }
            let ino = Self.makeNode(&state, parent: parent, name: name, mode: S_IFLNK | 0o777, uid: context.uid, gid: context.gid)
            state.nodes[ino]!.target = target
            state.nodes[ino]!.attributes.size = Int64(target.count)
            return .success(state.nodes[ino]!.attributes)
        }
        switch created {
        case .success(let attributes): reply.entry(entry(attributes))
        case .failure(let error): reply.error(error.code)
        }
    }

    func rename(
        parent: UInt64, name: [UInt8], newParent: UInt64, newName: [UInt8], flags: RenameFlags,
        context: RequestContext, reply: consuming StatusReply
    ) {
        let result: Int32 = state.withLock { state in
            state.counters.renameFlags.append(flags)
            guard let ino = state.nodes[parent]?.children[name] else { return ENOENT }
            guard state.nodes[newParent]?.attributes.type == .directory else { return ENOTDIR }
            let existing = state.nodes[newParent]!.children[newName]
            if flags.contains(.whiteout) { return EINVAL }
            if flags.contains(.exchange) {
                guard let existing else { return ENOENT }
                state.nodes[parent]!.children[name] = existing
                state.nodes[newParent]!.children[newName] = ino
                return 0
            }
            if let existing {
                if flags.contains(.noReplace) { return EEXIST }
                if let target = state.nodes[existing], target.attributes.type == .directory, !target.children.isEmpty {
                    return ENOTEMPTY
                }
            }
            state.nodes[parent]!.children[name] = nil
            state.nodes[newParent]!.children[newName] = ino
            Self.touch(&state, parent)
            Self.touch(&state, newParent)
            return 0
        }
        result == 0 ? reply.success() : reply.error(result)
    }

    func link(ino: UInt64, newParent: UInt64, newName: [UInt8], context: RequestContext, reply: consuming EntryReply) {
        // Refused, as ubiq does: hard links do not map onto the remote item model.
        reply.error(EPERM)
    }

    func open(ino: UInt64, flags: Int32, context: RequestContext, reply: consuming OpenReply) {
        if state.withLock({ $0.nodes[ino]?.holdOpens == true }) {
            var pending: OpenReply? = consume reply
            heldOpen.withLock { $0 = pending.take() }
            return
        }
        let found: Bool = state.withLock { state in
            guard state.nodes[ino] != nil else { return false }
            // FUSE_CAP_ATOMIC_O_TRUNC: O_TRUNC arrives here, not as setattr.
            if flags & O_TRUNC != 0 {
                state.nodes[ino]!.data = []
                state.nodes[ino]!.attributes.size = 0
                state.nodes[ino]!.attributes.blocks = 0
                Self.touch(&state, ino)
            }
            return true
        }
        guard found else { return reply.error(ENOENT) }
        reply.opened(handle: ino)
    }

    func create(
        parent: UInt64, name: [UInt8], mode: UInt32, flags: Int32, context: RequestContext,
        reply: consuming CreateReply
    ) {
        state.withLock { $0.counters.creates += 1 }
        switch create(parent: parent, name: name, mode: mode, context: context) {
        case .success(let attributes): reply.created(entry(attributes), handle: attributes.ino)
        case .failure(let error): reply.error(error.code)
        }
    }

    func read(
        ino: UInt64, handle: UInt64, offset: Int64, size: Int, context: RequestContext,
        reply: consuming ReadReply
    ) {
        guard let node = state.withLock({ $0.nodes[ino] }) else { return reply.error(ENOENT) }
        // Answer from another task, as the real file system does for anything not cached.
        var pending: ReadReply? = consume reply
        Task {
            guard !node.dropReads else {
                _ = pending.take()  // dropped without an answer: the deinit answers EIO
                return
            }
            if let descriptor = node.backingDescriptor {
                let count = max(0, min(Int64(size), node.attributes.size - offset))
                pending.take()!.file(descriptor: descriptor, offset: offset, count: Int(count))
                return
            }
            let start = min(Int(offset), node.data.count)
            let end = min(start + size, node.data.count)
            pending.take()!.data(Array(node.data[start..<end]))
        }
    }

    func write(
        ino: UInt64, handle: UInt64, offset: Int64, data: [UInt8], isWritepage: Bool,
        context: RequestContext, reply: consuming WriteReply
    ) {
        var pending: WriteReply? = consume reply
        Task {
            let written: Bool = state.withLock { state in
                guard var node = state.nodes[ino] else { return false }
                let end = Int(offset) + data.count
                if node.data.count < end { node.data += [UInt8](repeating: 0, count: end - node.data.count) }
                node.data.replaceSubrange(Int(offset)..<end, with: data)
                node.attributes.size = Int64(node.data.count)
                node.attributes.blocks = (node.attributes.size + 511) / 512
                state.nodes[ino] = node
                Self.touch(&state, ino)
                return true
            }
            written ? pending.take()!.written(data.count) : pending.take()!.error(ENOENT)
        }
    }

    func flush(ino: UInt64, handle: UInt64, lockOwner: UInt64, context: RequestContext, reply: consuming StatusReply) {
        reply.success()
    }

    func release(ino: UInt64, handle: UInt64, flags: Int32, context: RequestContext, reply: consuming StatusReply) {
        reply.success()
    }

    func fsync(ino: UInt64, handle: UInt64, dataOnly: Bool, context: RequestContext, reply: consuming StatusReply) {
        reply.success()
    }

    func opendir(ino: UInt64, flags: Int32, context: RequestContext, reply: consuming OpenReply) {
        guard state.withLock({ $0.nodes[ino]?.attributes.type == .directory }) else { return reply.error(ENOTDIR) }
        reply.opened(handle: ino)
    }

    /// ".", ".." and the children sorted by name; an entry's offset is its index + 1.
    private func listing(_ ino: UInt64) -> [(name: [UInt8], attributes: FileAttributes)]? {
        state.withLock { state in
            guard let dir = state.nodes[ino] else { return nil }
            var entries: [(name: [UInt8], attributes: FileAttributes)] = [
                (Array(".".utf8), dir.attributes), (Array("..".utf8), dir.attributes),
            ]
            for (name, child) in dir.children.sorted(by: { $0.key.lexicographicallyPrecedes($1.key) }) {
                if let attributes = state.nodes[child]?.attributes { entries.append((name, attributes)) }
            }
            return entries
        }
    }

    func readdir(ino: UInt64, handle: UInt64, offset: Int64, context: RequestContext, reply: consuming DirectoryReply) {
        state.withLock { $0.counters.readdirCalls += 1 }
        guard let entries = listing(ino) else { return reply.error(ENOENT) }
        var reply = reply
        for (index, item) in entries.enumerated().dropFirst(Int(offset)) {
            guard reply.add(name: item.name, ino: item.attributes.ino, type: item.attributes.type ?? .regular, nextOffset: Int64(index + 1)) else { break }
        }
        reply.send()
    }

    func readdirplus(ino: UInt64, handle: UInt64, offset: Int64, context: RequestContext, reply: consuming DirectoryPlusReply) {
        state.withLock { $0.counters.readdirplusCalls += 1 }
        guard let entries = listing(ino) else { return reply.error(ENOENT) }
        var pending: DirectoryPlusReply? = consume reply
        Task {
            var reply = pending.take()!
            for (index, item) in entries.enumerated().dropFirst(Int(offset)) {
                guard reply.add(name: item.name, entry: entry(item.attributes), nextOffset: Int64(index + 1)) else { break }
            }
            reply.send()
        }
    }

    func releasedir(ino: UInt64, handle: UInt64, context: RequestContext, reply: consuming StatusReply) {
        reply.success()
    }

    func fsyncdir(ino: UInt64, handle: UInt64, dataOnly: Bool, context: RequestContext, reply: consuming StatusReply) {
        reply.success()
    }

    func statfs(ino: UInt64, context: RequestContext, reply: consuming StatfsReply) {
        reply.statistics(FileSystemStatistics(blockSize: 4096, totalBlocks: 1 << 20, freeBlocks: 1 << 19, totalFiles: 1 << 16, freeFiles: 1 << 15))
    }

    func setxattr(
        ino: UInt64, name: [UInt8], value: [UInt8], flags: XattrSetFlags, context: RequestContext,
        reply: consuming StatusReply
    ) {
        let result: Int32 = state.withLock { state in
            guard let node = state.nodes[ino] else { return ENOENT }
            let exists = node.xattrs[name] != nil
            if flags.contains(.create) && exists { return EEXIST }
            if flags.contains(.replace) && !exists { return ENODATA }
            state.nodes[ino]!.xattrs[name] = value
            return 0
        }
        result == 0 ? reply.success() : reply.error(result)
    }

    func getxattr(ino: UInt64, name: [UInt8], context: RequestContext, reply: consuming XattrReply) {
        if name == Array("user.drop-reply".utf8) {
            return  // `reply` is destroyed unanswered here: its deinit answers EIO
        }
        guard let value = state.withLock({ $0.nodes[ino]?.xattrs[name] }) else { return reply.error(ENODATA) }
        reply.value(value)
    }

    func listxattr(ino: UInt64, context: RequestContext, reply: consuming XattrReply) {
        let names = state.withLock { state in
            (state.nodes[ino]?.xattrs.keys).map { $0.sorted { $0.lexicographicallyPrecedes($1) } } ?? []
        }
        reply.names(names)
    }

    func removexattr(ino: UInt64, name: [UInt8], context: RequestContext, reply: consuming StatusReply) {
        let removed = state.withLock { $0.nodes[ino]?.xattrs.removeValue(forKey: name) != nil }
        removed ? reply.success() : reply.error(ENODATA)
    }
}
