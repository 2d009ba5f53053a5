// Plain Swift values for what FUSE exchanges as C structs: `struct stat` (FileAttributes),
// setattr's `struct stat` + `to_set` mask (AttributeChanges), `struct statvfs`
// (FileSystemStatistics) and `struct fuse_entry_param` (FuseEntry).
//
// Public API:
//   struct FileTime              seconds + nanoseconds since the epoch; FileTime.now()
//   enum   FileType              regular, directory, symlink, … ; init?(mode:), modeBits
//   struct FileAttributes        ino, mode (type bits included), nlink, uid, gid, size, blocks,
//                                blockSize, atime/mtime/ctime; init(stat), stat()
//   struct AttributeChanges      the fields a setattr request changes (nil = unchanged)
//   enum   TimeChange            .now (UTIME_NOW) or .set(FileTime)
//   struct FileSystemStatistics  statfs reply
//   struct FuseEntry             lookup/create reply: attributes, generation, two timeouts
//
// Threading: all values, no shared state.

import CFuse3
import Glibc

/// A timestamp with nanosecond precision, as in `struct timespec`.
public struct FileTime: Sendable, Hashable, Comparable {
    public var seconds: Int64
    /// 0 ..< 1_000_000_000.
    public var nanoseconds: Int32

    public init(seconds: Int64, nanoseconds: Int32 = 0) {
        self.seconds = seconds
        self.nanoseconds = nanoseconds
    }

    /// The wall clock (CLOCK_REALTIME), which is what file times are measured against.
    public static func now() -> FileTime {
        var ts = Glibc.timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return FileTime(ts)
    }

    public static func < (a: FileTime, b: FileTime) -> Bool {
        (a.seconds, a.nanoseconds) < (b.seconds, b.nanoseconds)
    }

    init(_ ts: timespec) {
        self.init(seconds: Int64(ts.tv_sec), nanoseconds: Int32(ts.tv_nsec))
    }

    var timespecValue: Glibc.timespec {
        Glibc.timespec(tv_sec: Int(seconds), tv_nsec: Int(nanoseconds))
    }
}

/// The file type encoded in the `S_IFMT` bits of a mode.
public enum FileType: Sendable, Hashable {
    case regular, directory, symlink, fifo, socket, characterDevice, blockDevice

    public init?(mode: UInt32) {
        switch mode & S_IFMT {
        case S_IFREG: self = .regular
        case S_IFDIR: self = .directory
        case S_IFLNK: self = .symlink
        case S_IFIFO: self = .fifo
        case S_IFSOCK: self = .socket
        case S_IFCHR: self = .characterDevice
        case S_IFBLK: self = .blockDevice
        default: return nil
        }
    }

    /// The `S_IFMT` bits for this type, to be or-ed with permission bits.
    public var modeBits: UInt32 {
        switch self {
        case .regular: S_IFREG
        case .directory: S_IFDIR
        case .symlink: S_IFLNK
        case .fifo: S_IFIFO
        case .socket: S_IFSOCK
        case .characterDevice: S_IFCHR
        case .blockDevice: S_IFBLK
        }
    }
}

/// What `stat(2)` shows for a file.
public struct FileAttributes: Sendable, Hashable {
    /// The inode number the kernel uses to address this file (`fuse_ino_t`; 1 is the root).
    public var ino: UInt64
    /// Type bits (`S_IFDIR`, `S_IFREG`, …) or-ed with permission bits, exactly as `st_mode`.
    public var mode: UInt32
    public var nlink: UInt32
    public var uid: UInt32
    public var gid: UInt32
    public var size: Int64
    /// Allocated size in 512-byte units (`st_blocks` is always counted in 512-byte units,
    /// whatever the block size); `du` shows this.
    public var blocks: Int64
    /// Preferred I/O size (`st_blksize`); `cp` and `cat` size their buffers from it. 0 lets the
    /// kernel report its default (the page size).
    public var blockSize: UInt32
    public var atime: FileTime
    public var mtime: FileTime
    public var ctime: FileTime

    /// `blocks` defaults to the size rounded up to whole 512-byte units, which is what a
    /// non-sparse file on a local disk would report.
    public init(
        ino: UInt64, mode: UInt32, nlink: UInt32 = 1, uid: UInt32, gid: UInt32,
        size: Int64 = 0, blocks: Int64? = nil, blockSize: UInt32 = 0,
        atime: FileTime, mtime: FileTime, ctime: FileTime
    ) {
        self.ino = ino
        self.mode = mode
        self.nlink = nlink
        self.uid = uid
        self.gid = gid
        self.size = size
        self.blocks = blocks ?? (size + 511) / 512
        self.blockSize = blockSize
        self.atime = atime
        self.mtime = mtime
        self.ctime = ctime
    }

    public var type: FileType? { FileType(mode: mode) }

    /// Reads a `struct stat`. `st_ino` (`ino_t`) and `fuse_ino_t` are different integer types
    /// in C; both are 64 bits here, so the conversion is exact.
    public init(_ st: stat) {
        self.init(
            ino: UInt64(st.st_ino), mode: UInt32(st.st_mode), nlink: UInt32(truncatingIfNeeded: st.st_nlink),
            uid: UInt32(st.st_uid), gid: UInt32(st.st_gid), size: Int64(st.st_size),
            blocks: Int64(st.st_blocks), blockSize: UInt32(truncatingIfNeeded: st.st_blksize),
            atime: FileTime(st.st_atim), mtime: FileTime(st.st_mtim), ctime: FileTime(st.st_ctim))
    }

    /// The `struct stat` libfuse sends to the kernel.
    public func stat() -> Glibc.stat {
        var st = Glibc.stat()
        st.st_ino = ino_t(ino)
        st.st_mode = mode_t(mode)
        st.st_nlink = nlink_t(nlink)
        st.st_uid = uid_t(uid)
        st.st_gid = gid_t(gid)
        st.st_size = off_t(size)
        st.st_blocks = blkcnt_t(blocks)
        st.st_blksize = blksize_t(blockSize)
        st.st_atim = atime.timespecValue
        st.st_mtim = mtime.timespecValue
        st.st_ctim = ctime.timespecValue
        return st
    }
}

/// How a setattr request sets a timestamp.
public enum TimeChange: Sendable, Hashable {
    /// `UTIME_NOW` (e.g. `touch f`): use the file system's own clock.
    case now
    /// An explicit time (e.g. `touch -d`, `utimensat` with a value, `cp -p`).
    case set(FileTime)
}

/// The fields one setattr request changes; `nil` means "leave as is".
/// `chmod`, `chown`, `truncate`, `utimensat` and `open(O_TRUNC)` without atomic truncation all
/// arrive as setattr.
public struct AttributeChanges: Sendable, Hashable {
    /// Permission bits only (`07777`); the file type cannot change.
    public var mode: UInt32?
    public var uid: UInt32?
    public var gid: UInt32?
    /// New size (`truncate`, `ftruncate`).
    public var size: Int64?
    public var atime: TimeChange?
    public var mtime: TimeChange?
    /// Sent by the kernel only with writeback caching, which FuseKit does not enable.
    public var ctime: FileTime?

    public init(
        mode: UInt32? = nil, uid: UInt32? = nil, gid: UInt32? = nil, size: Int64? = nil,
        atime: TimeChange? = nil, mtime: TimeChange? = nil, ctime: FileTime? = nil
    ) {
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.size = size
        self.atime = atime
        self.mtime = mtime
        self.ctime = ctime
    }

    /// Decodes libfuse's setattr arguments. With `UTIME_NOW` the kernel sets both
    /// `FUSE_SET_ATTR_ATIME` and `FUSE_SET_ATTR_ATIME_NOW` (and fills in its own clock), so the
    /// `_NOW` bit is tested first.
    init(_ st: stat, toSet: Int32) {
        self.init()
        if toSet & FUSE_SET_ATTR_MODE != 0 { mode = UInt32(st.st_mode) & 0o7777 }
        if toSet & FUSE_SET_ATTR_UID != 0 { uid = UInt32(st.st_uid) }
        if toSet & FUSE_SET_ATTR_GID != 0 { gid = UInt32(st.st_gid) }
        if toSet & FUSE_SET_ATTR_SIZE != 0 { size = Int64(st.st_size) }
        if toSet & FUSE_SET_ATTR_ATIME_NOW != 0 {
            atime = .now
        } else if toSet & FUSE_SET_ATTR_ATIME != 0 {
            atime = .set(FileTime(st.st_atim))
        }
        if toSet & FUSE_SET_ATTR_MTIME_NOW != 0 {
            mtime = .now
        } else if toSet & FUSE_SET_ATTR_MTIME != 0 {
            mtime = .set(FileTime(st.st_mtim))
        }
        if toSet & FUSE_SET_ATTR_CTIME != 0 { ctime = FileTime(st.st_ctim) }
    }
}

/// The answer to `statfs(2)` (`df`).
public struct FileSystemStatistics: Sendable, Hashable {
    /// `f_bsize`: preferred I/O size.
    public var blockSize: UInt64
    /// `f_frsize`: the unit of the block counts below.
    public var fragmentSize: UInt64
    public var totalBlocks: UInt64
    public var freeBlocks: UInt64
    /// Free blocks available to unprivileged users.
    public var availableBlocks: UInt64
    public var totalFiles: UInt64
    public var freeFiles: UInt64
    public var availableFiles: UInt64
    /// 255 is the Linux `NAME_MAX`, the longest name any tool expects.
    public var maxNameLength: UInt64

    public init(
        blockSize: UInt64, fragmentSize: UInt64? = nil, totalBlocks: UInt64, freeBlocks: UInt64,
        availableBlocks: UInt64? = nil, totalFiles: UInt64, freeFiles: UInt64,
        availableFiles: UInt64? = nil, maxNameLength: UInt64 = 255
    ) {
        self.blockSize = blockSize
        self.fragmentSize = fragmentSize ?? blockSize
        self.totalBlocks = totalBlocks
        self.freeBlocks = freeBlocks
        self.availableBlocks = availableBlocks ?? freeBlocks
        self.totalFiles = totalFiles
        self.freeFiles = freeFiles
        self.availableFiles = availableFiles ?? freeFiles
        self.maxNameLength = maxNameLength
    }

    var statvfs: Glibc.statvfs {
        var s = Glibc.statvfs()
        s.f_bsize = UInt(blockSize)
        s.f_frsize = UInt(fragmentSize)
        s.f_blocks = fsblkcnt_t(totalBlocks)
        s.f_bfree = fsblkcnt_t(freeBlocks)
        s.f_bavail = fsblkcnt_t(availableBlocks)
        s.f_files = fsfilcnt_t(totalFiles)
        s.f_ffree = fsfilcnt_t(freeFiles)
        s.f_favail = fsfilcnt_t(availableFiles)
        s.f_namemax = UInt(maxNameLength)
        return s
    }
}

/// A name the kernel may cache: the answer to lookup, mkdir, mknod, symlink, link and create.
///
/// Every entry the kernel accepts adds one to the kernel's lookup count of
/// `attributes.ino`; `FileSystemHandler.forget` subtracts.
public struct FuseEntry: Sendable, Hashable {
    public var attributes: FileAttributes
    /// With `attributes.ino`, identifies the file over the file system's lifetime; bump it when
    /// an inode number is reused (only matters for NFS export).
    public var generation: UInt64
    /// How long the kernel may use `attributes` without asking again (getattr).
    public var attributeTimeout: Duration
    /// How long the kernel may use the name → inode mapping without asking again (lookup).
    /// Long timeouts make `stat` run at native speed; invalidate with `KernelNotifier` when
    /// something changes behind the kernel's back.
    public var entryTimeout: Duration

    public init(
        attributes: FileAttributes, generation: UInt64 = 0,
        attributeTimeout: Duration, entryTimeout: Duration
    ) {
        self.attributes = attributes
        self.generation = generation
        self.attributeTimeout = attributeTimeout
        self.entryTimeout = entryTimeout
    }

    var param: fuse_entry_param {
        var e = fuse_entry_param()
        e.ino = fuse_ino_t(attributes.ino)
        e.generation = generation
        e.attr = attributes.stat()
        e.attr_timeout = attributeTimeout.seconds
        e.entry_timeout = entryTimeout.seconds
        return e
    }
}

extension Duration {
    /// libfuse takes timeouts as `double` seconds.
    var seconds: Double {
        let (s, atto) = components
        return Double(s) + Double(atto) * 1e-18
    }
}
