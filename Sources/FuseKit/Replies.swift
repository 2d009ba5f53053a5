// Reply tokens: one `~Copyable` type per kind of answer a FUSE request can take.
//
// Public API (every token also has `consuming func error(_ errno: Int32)`):
//   EntryReply          entry(_:) -> Bool, negative(timeout:)         lookup mkdir mknod symlink link
//   AttrReply           attributes(_:timeout:)                         getattr setattr
//   ReadlinkReply       target(_:)                                     readlink
//   OpenReply           opened(handle:options:) -> Bool               open opendir
//   CreateReply         created(_:handle:options:) -> Bool            create
//   ReadReply           data(_:) (array or raw buffer),
//                       file(descriptor:offset:count:) -> Bool (splice) read
//   WriteReply          written(_:)                                    write
//   StatusReply         success()                                      unlink rmdir rename flush
//                                                                      release fsync releasedir
//                                                                      fsyncdir setxattr removexattr
//   StatfsReply         statistics(_:)                                 statfs
//   XattrReply          value(_:), names(_:), requestedSize            getxattr listxattr
//   DirectoryReply      add(name:ino:type:nextOffset:) -> Bool, send() readdir
//   DirectoryPlusReply  add(name:entry:nextOffset:) -> Bool, send()    readdirplus
//   struct OpenOptions  keepCache, directIO, nonSeekable, cacheDirectory, noFlush
//
// Rules: a token must be answered exactly once (the compiler enforces "at most once";
// `deinit` answers EIO for "never"). Any thread may answer: libfuse's reply functions are
// thread-safe, and FuseKit keeps the session alive until every token is answered.
// Methods that return Bool report whether the kernel took the answer. `false` means the
// caller was interrupted or the mount is gone: the kernel never saw the entry or handle, so no
// forget or release will come for it — do not count the lookup and drop the handle.
//
// Why the tokens hold only trivially destroyed fields (an `Unmanaged` core, raw pointers):
// Swift allows `discard self` only in such types, and `discard self` is what keeps `deinit`
// from sending a second (EIO) reply after a real one.

import CFuse3
import Glibc

/// How the kernel should treat an open file or directory.
public struct OpenOptions: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }
    /// Keep the page cache from earlier opens: set it when the content did not change since
    /// (re-reads run at page-cache speed instead of going through the daemon).
    public static let keepCache = OpenOptions(rawValue: 1 << 0)
    /// Bypass the page cache. Do not use for normal files: shared mmap then fails with ENODEV.
    public static let directIO = OpenOptions(rawValue: 1 << 1)
    public static let nonSeekable = OpenOptions(rawValue: 1 << 2)
    /// opendir only: let the kernel cache the directory listing.
    public static let cacheDirectory = OpenOptions(rawValue: 1 << 3)
    /// The kernel need not send flush on close.
    public static let noFlush = OpenOptions(rawValue: 1 << 4)

    func fileInfo(handle: UInt64) -> fuse_file_info {
        // fill_open() in libfuse reads only fh and these bits, so a fresh struct is complete.
        var fi = fuse_file_info()
        fi.fh = handle
        fi.keep_cache = contains(.keepCache) ? 1 : 0
        fi.direct_io = contains(.directIO) ? 1 : 0
        fi.nonseekable = contains(.nonSeekable) ? 1 : 0
        fi.cache_readdir = contains(.cacheDirectory) ? 1 : 0
        fi.noflush = contains(.noFlush) ? 1 : 0
        return fi
    }
}

/// One kernel request that still needs its answer. Holds the session open (see
/// `SessionCore.users`) until `finish` runs. Trivially destroyed, so tokens can `discard self`.
struct PendingRequest: @unchecked Sendable {
    // @unchecked: `req` is an opaque handle that libfuse lets any thread answer, once; the
    // token that owns this value is ~Copyable, so only one thread can hold it.
    let req: OpaquePointer
    let core: Unmanaged<SessionCore>
    /// getxattr/setxattr/listxattr/removexattr: ENOSYS there makes the kernel disable xattrs
    /// for the whole mount, so it is turned into EOPNOTSUPP.
    let isXattr: Bool
    let kind: RequestKind
    /// When the callback began, for the session's `RequestObserver` (0 without one).
    let started: UInt64

    /// Called on the FUSE thread while the request's callback runs (the loop is alive).
    init(_ req: OpaquePointer, _ core: SessionCore, _ kind: RequestKind, isXattr: Bool = false) {
        core.requestStarted()
        self.req = req
        self.core = .passRetained(core)
        self.isXattr = isXattr
        self.kind = kind
        started = core.observer == nil ? 0 : monotonicNanoseconds()
    }

    /// Sends the reply, then lets go of the session. Returns whether libfuse delivered it.
    @discardableResult
    func finish(errno code: Int32 = 0, _ send: (OpaquePointer) -> Int32) -> Bool {
        let result = send(req)
        let session = core.takeRetainedValue()
        session.observer?.answered(kind, nanoseconds: monotonicNanoseconds() &- started, errno: code)
        session.useEnded()
        return result == 0
    }

    func finishWithError(_ errno: Int32) {
        // 0 would read as success and a negative value is a caller bug: both become EIO.
        var code = errno > 0 ? errno : EIO
        if isXattr && code == ENOSYS { code = EOPNOTSUPP }
        finish(errno: code) { fuse_reply_err($0, code) }
    }
}

/// Answer to lookup, mkdir, mknod, symlink and link.
public struct EntryReply: ~Copyable, Sendable {
    let request: PendingRequest
    init(_ request: PendingRequest) { self.request = request }

    /// Returns false if the kernel did not take the entry (then it adds no lookup count).
    @discardableResult
    public consuming func entry(_ entry: FuseEntry) -> Bool {
        var e = entry.param
        let sent = request.finish { fuse_reply_entry($0, &e) }
        discard self
        return sent
    }

    /// "No such name", cached by the kernel for `timeout` (an entry with ino 0). Prefer this to
    /// ENOENT for lookups: repeated misses (shells probing PATH, editors probing backups) then
    /// never reach the daemon.
    public consuming func negative(timeout: Duration) {
        var e = fuse_entry_param()
        e.ino = 0
        e.entry_timeout = timeout.seconds
        request.finish { fuse_reply_entry($0, &e) }
        discard self
    }

    public consuming func error(_ errno: Int32) {
        request.finishWithError(errno)
        discard self
    }

    deinit { request.finishWithError(EIO) }
}

/// Answer to getattr and setattr.
public struct AttrReply: ~Copyable, Sendable {
    let request: PendingRequest
    init(_ request: PendingRequest) { self.request = request }

    public consuming func attributes(_ attributes: FileAttributes, timeout: Duration) {
        var st = attributes.stat()
        request.finish { fuse_reply_attr($0, &st, timeout.seconds) }
        discard self
    }

    public consuming func error(_ errno: Int32) {
        request.finishWithError(errno)
        discard self
    }

    deinit { request.finishWithError(EIO) }
}

/// Answer to readlink.
public struct ReadlinkReply: ~Copyable, Sendable {
    let request: PendingRequest
    init(_ request: PendingRequest) { self.request = request }

    public consuming func target(_ target: [UInt8]) {
        _ = withCName(target) { name in request.finish { fuse_reply_readlink($0, name) } }
        discard self
    }

    public consuming func error(_ errno: Int32) {
        request.finishWithError(errno)
        discard self
    }

    deinit { request.finishWithError(EIO) }
}

/// Answer to open and opendir.
public struct OpenReply: ~Copyable, Sendable {
    let request: PendingRequest
    init(_ request: PendingRequest) { self.request = request }

    /// Returns false when the caller was interrupted meanwhile (libfuse reports -ENOENT): no
    /// release will ever come for `handle`, so the caller must drop it.
    @discardableResult
    public consuming func opened(handle: UInt64, options: OpenOptions = []) -> Bool {
        var fi = options.fileInfo(handle: handle)
        let sent = request.finish { fuse_reply_open($0, &fi) }
        discard self
        return sent
    }

    public consuming func error(_ errno: Int32) {
        request.finishWithError(errno)
        discard self
    }

    deinit { request.finishWithError(EIO) }
}

/// Answer to create.
public struct CreateReply: ~Copyable, Sendable {
    let request: PendingRequest
    init(_ request: PendingRequest) { self.request = request }

    /// Returns false when the caller was interrupted meanwhile: the kernel has neither the
    /// entry (no lookup count) nor the handle (no release will come) — drop both.
    @discardableResult
    public consuming func created(_ entry: FuseEntry, handle: UInt64, options: OpenOptions = []) -> Bool {
        var e = entry.param
        var fi = options.fileInfo(handle: handle)
        let sent = request.finish { fuse_reply_create($0, &e, &fi) }
        discard self
        return sent
    }

    public consuming func error(_ errno: Int32) {
        request.finishWithError(errno)
        discard self
    }

    deinit { request.finishWithError(EIO) }
}

/// Answer to read. Fewer bytes than requested means end of file.
public struct ReadReply: ~Copyable, Sendable {
    let request: PendingRequest
    init(_ request: PendingRequest) { self.request = request }

    public consuming func data(_ bytes: [UInt8]) {
        _ = bytes.withUnsafeBytes { raw in
            request.finish { fuse_reply_buf($0, raw.baseAddress?.assumingMemoryBound(to: CChar.self), raw.count) }
        }
        discard self
    }

    /// Sends bytes the caller owns; they are copied before this returns.
    public consuming func data(_ bytes: UnsafeRawBufferPointer) {
        request.finish { fuse_reply_buf($0, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), bytes.count) }
        discard self
    }

    /// Sends `count` bytes of the open file `descriptor` starting at `offset`, spliced into
    /// /dev/fuse without passing through user space (the fastest way to serve a cache file).
    /// `descriptor` only needs to stay open until this returns. A read error on `descriptor`
    /// is answered to the kernel as that error. Returns whether the kernel got an answer.
    @discardableResult
    public consuming func file(descriptor: Int32, offset: Int64, count: Int) -> Bool {
        let sent = request.finish { cfuse3_reply_fd($0, descriptor, off_t(offset), count) }
        discard self
        return sent
    }

    public consuming func error(_ errno: Int32) {
        request.finishWithError(errno)
        discard self
    }

    deinit { request.finishWithError(EIO) }
}

/// Answer to write.
public struct WriteReply: ~Copyable, Sendable {
    let request: PendingRequest
    init(_ request: PendingRequest) { self.request = request }

    /// The number of bytes written; less than offered makes `write(2)` return a short count.
    public consuming func written(_ count: Int) {
        request.finish { fuse_reply_write($0, count) }
        discard self
    }

    public consuming func error(_ errno: Int32) {
        request.finishWithError(errno)
        discard self
    }

    deinit { request.finishWithError(EIO) }
}

/// Answer carrying only success or an errno.
public struct StatusReply: ~Copyable, Sendable {
    let request: PendingRequest
    init(_ request: PendingRequest) { self.request = request }

    public consuming func success() {
        request.finish { fuse_reply_err($0, 0) }
        discard self
    }

    public consuming func error(_ errno: Int32) {
        request.finishWithError(errno)
        discard self
    }

    deinit { request.finishWithError(EIO) }
}

/// Answer to statfs.
public struct StatfsReply: ~Copyable, Sendable {
    let request: PendingRequest
    init(_ request: PendingRequest) { self.request = request }

    public consuming func statistics(_ statistics: FileSystemStatistics) {
        var s = statistics.statvfs
        request.finish { fuse_reply_statfs($0, &s) }
        discard self
    }

    public consuming func error(_ errno: Int32) {
        request.finishWithError(errno)
        discard self
    }

    deinit { request.finishWithError(EIO) }
}

/// Answer to getxattr and listxattr. The caller first asks with size 0 for the length, then
/// with a buffer; `value` and `names` handle both.
public struct XattrReply: ~Copyable, Sendable {
    let request: PendingRequest
    /// The caller's buffer size; 0 asks for the length only.
    public let requestedSize: Int

    init(_ request: PendingRequest, requestedSize: Int) {
        self.request = request
        self.requestedSize = requestedSize
    }

    /// Size 0 → the length; a buffer too small → ERANGE; otherwise the bytes.
    public consuming func value(_ bytes: [UInt8]) {
        let size = requestedSize
        if size == 0 {
            request.finish { fuse_reply_xattr($0, bytes.count) }
        } else if bytes.count > size {
            request.finishWithError(ERANGE)
        } else {
            _ = bytes.withUnsafeBytes { raw in
                request.finish { fuse_reply_buf($0, raw.baseAddress?.assumingMemoryBound(to: CChar.self), raw.count) }
            }
        }
        discard self
    }

    /// listxattr: the names, each followed by a NUL, as `value`.
    public consuming func names(_ names: [[UInt8]]) {
        var list: [UInt8] = []
        list.reserveCapacity(names.reduce(0) { $0 + $1.count + 1 })
        for name in names {
            list.append(contentsOf: name)
            list.append(0)
        }
        value(list)
    }

    /// Missing attribute: ENODATA (never ENOSYS, which FuseKit turns into EOPNOTSUPP).
    public consuming func error(_ errno: Int32) {
        request.finishWithError(errno)
        discard self
    }

    deinit { request.finishWithError(EIO) }
}

/// Memory for one readdir answer, sized by the kernel's request. Freed explicitly (by `send`,
/// `error` or `deinit`) so that the tokens holding it stay trivially destroyed.
struct DirentBuffer: @unchecked Sendable {
    // @unchecked: owned by exactly one ~Copyable token.
    let base: UnsafeMutablePointer<CChar>
    let capacity: Int
    var used = 0

    init(capacity: Int) {
        self.capacity = capacity
        base = .allocate(capacity: Swift.max(capacity, 1))
    }

    var remaining: Int { capacity - used }
    var cursor: UnsafeMutablePointer<CChar> { base + used }
    func free() { base.deallocate() }
}

/// How one kind of listing writes an entry into the reply buffer: readdir's name, inode and
/// type, or readdirplus's full entry.
public protocol DirectoryEntryFormat: Sendable {
    associatedtype Entry
    /// fuse_add_direntry or fuse_add_direntry_plus: the bytes the entry needs, written only if
    /// they fit in `remaining`.
    static func add(_ req: fuse_req_t, _ cursor: UnsafeMutablePointer<CChar>, _ remaining: Int,
                    _ name: UnsafePointer<CChar>, _ entry: Entry, _ nextOffset: Int64) -> Int
}

/// readdir's entries: name, inode and type.
public enum PlainEntries: DirectoryEntryFormat {
    public static func add(_ req: fuse_req_t, _ cursor: UnsafeMutablePointer<CChar>, _ remaining: Int,
                           _ name: UnsafePointer<CChar>, _ entry: (ino: UInt64, type: FileType), _ nextOffset: Int64) -> Int {
        // fuse_add_direntry reads only st_ino and the type bits of st_mode.
        var st = Glibc.stat()
        st.st_ino = ino_t(entry.ino)
        st.st_mode = mode_t(entry.type.modeBits)
        return fuse_add_direntry(req, cursor, remaining, name, &st, off_t(nextOffset))
    }
}

/// readdirplus's entries: a full lookup answer per name. Every accepted entry other than `.`
/// and `..` adds one lookup count — if `send()` returns true.
public enum PlusEntries: DirectoryEntryFormat {
    public static func add(_ req: fuse_req_t, _ cursor: UnsafeMutablePointer<CChar>, _ remaining: Int,
                           _ name: UnsafePointer<CChar>, _ entry: FuseEntry, _ nextOffset: Int64) -> Int {
        var e = entry.param
        return fuse_add_direntry_plus(req, cursor, remaining, name, &e, off_t(nextOffset))
    }
}

/// Answer to readdir (`DirectoryReply`) and readdirplus (`DirectoryPlusReply`): fill with `add`
/// until it returns false or the directory ends, then `send`. Each entry's `nextOffset` is what
/// the kernel passes back as `offset` to continue after it.
public struct ListingReply<Format: DirectoryEntryFormat>: ~Copyable, Sendable {
    let request: PendingRequest
    var buffer: DirentBuffer

    init(_ request: PendingRequest, size: Int) {
        self.request = request
        buffer = DirentBuffer(capacity: size)
    }

    /// True if nothing was added yet: sending an empty reply tells the kernel the directory
    /// ended.
    public var isEmpty: Bool { buffer.used == 0 }

    /// Adds one entry; false (and nothing added, no lookup counted) when it does not fit —
    /// send what you have.
    public mutating func add(name: [UInt8], entry: Format.Entry, nextOffset: Int64) -> Bool {
        let buffer = self.buffer
        let needed = withCName(name) { cName in
            Format.add(request.req, buffer.cursor, buffer.remaining, cName, entry, nextOffset)
        }
        guard needed <= buffer.remaining else { return false }
        self.buffer.used += needed
        return true
    }

    @discardableResult
    public consuming func send() -> Bool {
        let buffer = self.buffer
        let sent = request.finish { fuse_reply_buf($0, buffer.base, buffer.used) }
        buffer.free()
        discard self
        return sent
    }

    public consuming func error(_ errno: Int32) {
        buffer.free()
        request.finishWithError(errno)
        discard self
    }

    deinit {
        buffer.free()
        request.finishWithError(EIO)
    }
}

public typealias DirectoryReply = ListingReply<PlainEntries>
public typealias DirectoryPlusReply = ListingReply<PlusEntries>

extension ListingReply where Format == PlainEntries {
    public mutating func add(name: [UInt8], ino: UInt64, type: FileType, nextOffset: Int64) -> Bool {
        add(name: name, entry: (ino, type), nextOffset: nextOffset)
    }
}

/// Runs `body` with `bytes` as a NUL-terminated C string.
func withCName<R>(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) -> R) -> R {
    withUnsafeTemporaryAllocation(of: CChar.self, capacity: bytes.count + 1) { buffer in
        bytes.withUnsafeBytes { source in
            UnsafeMutableRawBufferPointer(buffer).copyMemory(from: source)
        }
        buffer[bytes.count] = 0
        return body(buffer.baseAddress!)
    }
}
