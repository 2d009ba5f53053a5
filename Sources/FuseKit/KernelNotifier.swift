// Telling the kernel that something changed behind its back (a remote change), so that long
// entry and attribute timeouts stay correct.
//
// Public API (every method returns 0 or an errno; all are @discardableResult):
//   struct KernelNotifier
//     invalidateEntry(parent:name:)            forget a cached name (and a cached miss)
//     invalidateInode(_:offset:length:)        drop cached attributes and page-cache data
//     invalidateAttributes(_:)                 drop cached attributes only
//     delete(parent:child:name:)               a name is gone; also tells inotify watchers
//     store(_:offset:data:)                    put data into the page cache
//
// Threads: safe to call from any thread, concurrently. Each call writes one message to
// /dev/fuse and may block while the kernel takes the inode or directory lock it needs.
// Therefore NEVER call it from inside a `FileSystemHandler` method, nor while holding a lock
// that a handler method needs: the kernel may be waiting for that very request, and the two
// deadlock (SeaDrive did). Reply first, then notify from a separate service (a task or
// thread fed by a queue), like libfuse's notify_inval_entry.c example does.
//
// Once the loop has ended, the calls return ENOTCONN without touching the session (which
// is freed when the last reply token is answered).

import CFuse3
import Glibc

public struct KernelNotifier: Sendable {
    let core: SessionCore

    /// Runs `body` with the live session, holding a use so it cannot be freed meanwhile.
    private func withSession(_ body: (OpaquePointer) -> Int32) -> Int32 {
        guard core.notificationStarted() else { return ENOTCONN }
        defer { core.useEnded() }
        // A loop that has ended leaves the session alive until its last use is over; libfuse's
        // answer for it then depends on how far the teardown got (a test under load saw
        // ENOSYS), so the answer is ENOTCONN from the moment the loop ended.
        guard core.end == nil, let session = core.session else { return ENOTCONN }
        // libfuse returns -errno.
        return -body(session)
    }

    /// Forget the kernel's cached `name` in directory `parent`, positive or negative. The next
    /// access does a fresh lookup. ENOENT means the kernel had nothing cached: harmless.
    @discardableResult
    public func invalidateEntry(parent: UInt64, name: [UInt8]) -> Int32 {
        withSession { session in
            withCName(name) { cName in
                fuse_lowlevel_notify_inval_entry(session, parent, cName, name.count)
            }
        }
    }

    /// Drop cached attributes of `ino` and its cached data in `offset ..< offset + length`
    /// (`length` 0: to the end of the file). ENOENT means the inode is not cached: harmless.
    @discardableResult
    public func invalidateInode(_ ino: UInt64, offset: Int64 = 0, length: Int64 = 0) -> Int32 {
        withSession { session in
            fuse_lowlevel_notify_inval_inode(session, ino, off_t(offset), off_t(length))
        }
    }

    /// Drop only the cached attributes of `ino`; the page cache stays (libfuse's negative
    /// offset convention).
    @discardableResult
    public func invalidateAttributes(_ ino: UInt64) -> Int32 {
        invalidateInode(ino, offset: -1, length: 0)
    }

    /// `name` in `parent`, which was `child`, is gone: invalidates the entry and, unlike
    /// `invalidateEntry`, raises IN_DELETE_SELF for inotify watchers of `child`.
    @discardableResult
    public func delete(parent: UInt64, child: UInt64, name: [UInt8]) -> Int32 {
        withSession { session in
            withCName(name) { cName in
                fuse_lowlevel_notify_delete(session, parent, child, cName, name.count)
            }
        }
    }

    /// Put `data` into the page cache of `ino` at `offset` (extending the cached size if
    /// needed), so later reads need no request.
    @discardableResult
    public func store(_ ino: UInt64, offset: Int64, data: [UInt8]) -> Int32 {
        withSession { session in
            data.withUnsafeBytes { raw in
                var bufv = fuse_bufvec()
                bufv.count = 1
                bufv.buf.size = raw.count
                bufv.buf.mem = UnsafeMutableRawPointer(mutating: raw.baseAddress)
                return fuse_lowlevel_notify_store(session, ino, off_t(offset), &bufv, fuse_buf_copy_flags(rawValue: 0))
            }
        }
    }
}
