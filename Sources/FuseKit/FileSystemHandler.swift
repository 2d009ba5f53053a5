// The interface between FuseKit and the file system above it.
//
// Public API:
//   protocol FileSystemHandler   one method per FUSE operation; implemented by the upper layer
//   struct   RequestContext      uid, gid, pid, umask of the calling process
//   struct   RenameFlags         .noReplace, .exchange, .whiteout (renameat2 flags)
//   struct   XattrSetFlags       .create, .replace (setxattr flags)
//   enum     SecurityXattrPolicy what FuseKit does with `security.*` xattrs itself
//
// Threading and lifetime rules (the contract every method follows):
//   - Methods are called on libfuse's worker threads (at most `MountOptions.maxThreads` at
//     once), never on the main actor and never on a Swift concurrency executor.
//   - Every argument is already a Swift value: FuseKit copied names, link targets, xattr values
//     and write data out of libfuse's per-thread buffer, which is reused as soon as the method
//     returns. Copy C arguments before the first suspension point; reply exactly once.
//   - Each method receives a `~Copyable` reply token. It must be answered exactly once; dropping
//     it answers EIO. It may be answered before the method returns (cheap, cached answers) or
//     later from any thread or Task: do not block a FUSE thread on the network, a database
//     transaction or another request — move the token into a Task instead:
//
//         func read(…, reply: consuming ReadReply) {
//             var pending: ReadReply? = consume reply   // Optional of ~Copyable can be moved
//             Task { let data = await cache.bytes(…); pending.take()!.data(data) }
//         }
//
//   - Never call into the mount itself (open/stat a path under the mountpoint) and never use
//     `KernelNotifier` from inside a method: both can wait for the very request being handled.
//
// Names are raw bytes as the kernel sent them (no NUL, no "/", not necessarily UTF-8); the
// upper layer validates them. Inode numbers are FUSE node ids (`fuse_ino_t`; 1 is the root).

import Glibc

/// The process that made a request, from `fuse_req_ctx`. A file created through the mount
/// belongs to `uid`/`gid`.
public struct RequestContext: Sendable, Hashable {
    public var uid: UInt32
    public var gid: UInt32
    /// Thread id of the caller; 0 for requests the kernel makes on its own (writeback, forget).
    public var pid: Int32
    /// Already applied by the kernel to the `mode` of mkdir, mknod and create (FuseKit does not
    /// ask for FUSE_CAP_DONT_MASK); provided for completeness.
    public var umask: UInt32

    public init(uid: UInt32, gid: UInt32, pid: Int32, umask: UInt32) {
        self.uid = uid
        self.gid = gid
        self.pid = pid
        self.umask = umask
    }
}

/// `renameat2(2)` flags. Values from <linux/fs.h>.
public struct RenameFlags: OptionSet, Sendable, Hashable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    /// Fail with EEXIST if the target exists.
    public static let noReplace = RenameFlags(rawValue: 1)
    /// Swap source and target atomically; reply EINVAL if unsupported.
    public static let exchange = RenameFlags(rawValue: 2)
    /// Overlayfs whiteout; reply EINVAL.
    public static let whiteout = RenameFlags(rawValue: 4)
}

/// `setxattr(2)` flags. Values from <sys/xattr.h>.
public struct XattrSetFlags: OptionSet, Sendable, Hashable {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    /// Fail with EEXIST if the attribute exists.
    public static let create = XattrSetFlags(rawValue: 1)
    /// Fail with ENODATA if the attribute does not exist.
    public static let replace = XattrSetFlags(rawValue: 2)
}

/// What FuseKit does with extended attributes in the `security.` namespace.
public enum SecurityXattrPolicy: Sendable, Hashable {
    /// Answer on the FUSE thread without calling the handler: getxattr and removexattr ENODATA
    /// (getxattr of `security.selinux` EOPNOTSUPP: no labels here, which `ls -l` remembers for
    /// the whole device), setxattr EOPNOTSUPP. The kernel asks for `security.capability` before every `write()`,
    /// so this keeps that question off every lock and database.
    case unsupported
    /// Pass `security.*` to the handler like any other name.
    case forwarded
}

/// The file system served through FUSE. See the top of this file for the threading contract.
///
/// Lookup counts: every `EntryReply.entry`, `CreateReply.created` and accepted readdirplus entry
/// (except `.` and `..`) whose reply method returned `true` adds one to the kernel's count for
/// that inode; `forget` subtracts. Keep an inode (and its data) until its count is 0 and no
/// handle is open, even after unlink. Forgets are not guaranteed at unmount.
public protocol FileSystemHandler: Sendable {
    /// Resolve `name` in directory `parent`. Answer `negative(timeout:)` rather than ENOENT so
    /// the kernel caches the miss.
    func lookup(parent: UInt64, name: [UInt8], context: RequestContext, reply: consuming EntryReply)

    /// The kernel dropped `lookups` references to `ino` (forget and batch forget). Called on
    /// the FUSE thread; FuseKit answers the kernel itself right after this returns, so do not
    /// block here.
    func forget(ino: UInt64, lookups: UInt64)

    /// `handle` is the open file's handle when the caller used `fstat`, otherwise nil.
    func getattr(ino: UInt64, handle: UInt64?, context: RequestContext, reply: consuming AttrReply)

    /// chmod, chown, truncate, utimensat. Answer with the attributes after the change.
    func setattr(
        ino: UInt64, changes: AttributeChanges, handle: UInt64?, context: RequestContext,
        reply: consuming AttrReply)

    func readlink(ino: UInt64, context: RequestContext, reply: consuming ReadlinkReply)

    /// `type` is the node's file type (the device number is not passed: a handler that makes
    /// devices needs it added); `mode` is the permission bits after the caller's umask.
    func mknod(
        parent: UInt64, name: [UInt8], type: FileType, mode: UInt32, context: RequestContext,
        reply: consuming EntryReply)

    /// `mode` is the permission bits after the caller's umask.
    func mkdir(
        parent: UInt64, name: [UInt8], mode: UInt32, context: RequestContext,
        reply: consuming EntryReply)

    func unlink(parent: UInt64, name: [UInt8], context: RequestContext, reply: consuming StatusReply)

    func rmdir(parent: UInt64, name: [UInt8], context: RequestContext, reply: consuming StatusReply)

    /// Create a symbolic link `name` in `parent` pointing at `target`.
    func symlink(
        target: [UInt8], parent: UInt64, name: [UInt8], context: RequestContext,
        reply: consuming EntryReply)

    /// `.noReplace` → EEXIST if the target exists; `.exchange` → swap or EINVAL.
    func rename(
        parent: UInt64, name: [UInt8], newParent: UInt64, newName: [UInt8], flags: RenameFlags,
        context: RequestContext, reply: consuming StatusReply)

    /// Hard link; answer an error (e.g. EPERM) to refuse.
    func link(
        ino: UInt64, newParent: UInt64, newName: [UInt8], context: RequestContext,
        reply: consuming EntryReply)

    /// `flags` are the open(2) flags. FUSE_CAP_ATOMIC_O_TRUNC is on, so `O_TRUNC` arrives here
    /// (not as a setattr) and the handler must truncate.
    func open(ino: UInt64, flags: Int32, context: RequestContext, reply: consuming OpenReply)

    /// Create and open a regular file. `mode` includes `S_IFREG` and the caller's umask is
    /// already applied.
    func create(
        parent: UInt64, name: [UInt8], mode: UInt32, flags: Int32, context: RequestContext,
        reply: consuming CreateReply)

    /// Read up to `size` bytes at `offset`; a short answer means end of file.
    func read(
        ino: UInt64, handle: UInt64, offset: Int64, size: Int, context: RequestContext,
        reply: consuming ReadReply)

    /// `isWritepage`: dirty mmap pages written back by the kernel, possibly after release; the
    /// context is then not the writer's and `handle` may be any open handle of the file.
    func write(
        ino: UInt64, handle: UInt64, offset: Int64, data: [UInt8], isWritepage: Bool,
        context: RequestContext, reply: consuming WriteReply)

    /// Called on every `close()` of every descriptor (dup, fork) and `close()` waits for it:
    /// keep it quick; do not upload here.
    func flush(
        ino: UInt64, handle: UInt64, lockOwner: UInt64, context: RequestContext,
        reply: consuming StatusReply)

    /// The last descriptor of an open file went away; comes once, asynchronously. The kernel
    /// ignores the status.
    func release(
        ino: UInt64, handle: UInt64, flags: Int32, context: RequestContext,
        reply: consuming StatusReply)

    func fsync(
        ino: UInt64, handle: UInt64, dataOnly: Bool, context: RequestContext,
        reply: consuming StatusReply)

    func opendir(ino: UInt64, flags: Int32, context: RequestContext, reply: consuming OpenReply)

    /// Fill the reply with entries after `offset` (0 = from the start; otherwise a
    /// `nextOffset` this handler gave an earlier entry) and send it; an empty reply means the
    /// end of the directory.
    func readdir(
        ino: UInt64, handle: UInt64, offset: Int64, context: RequestContext,
        reply: consuming DirectoryReply)

    /// As `readdir`, with full entries: saves the kernel one lookup per entry on `ls -l`.
    func readdirplus(
        ino: UInt64, handle: UInt64, offset: Int64, context: RequestContext,
        reply: consuming DirectoryPlusReply)

    func releasedir(ino: UInt64, handle: UInt64, context: RequestContext, reply: consuming StatusReply)

    func fsyncdir(
        ino: UInt64, handle: UInt64, dataOnly: Bool, context: RequestContext,
        reply: consuming StatusReply)

    func statfs(ino: UInt64, context: RequestContext, reply: consuming StatfsReply)

    /// `.create` on an existing name → EEXIST; `.replace` on a missing one → ENODATA.
    func setxattr(
        ino: UInt64, name: [UInt8], value: [UInt8], flags: XattrSetFlags, context: RequestContext,
        reply: consuming StatusReply)

    /// Answer `reply.value(bytes)`, which handles the size probe and ERANGE; missing → ENODATA.
    func getxattr(ino: UInt64, name: [UInt8], context: RequestContext, reply: consuming XattrReply)

    /// Answer `reply.names([...])`.
    func listxattr(ino: UInt64, context: RequestContext, reply: consuming XattrReply)

    /// Missing → ENODATA.
    func removexattr(ino: UInt64, name: [UInt8], context: RequestContext, reply: consuming StatusReply)
}
