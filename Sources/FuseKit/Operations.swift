// The `fuse_lowlevel_ops` table: C-callable trampolines that copy libfuse's arguments into
// Swift values, wrap the request in a reply token and call the `FileSystemHandler`.
//
// No public API. Runs on libfuse's worker threads (and `init` on one of them, before any other
// request).
//
// Why this file looks the way it does:
//   - The table is built in a nonisolated function of a library file. Closures written in
//     top-level code of a `main.swift` are inferred @MainActor and crash
//     (dispatch_assert_queue_fail) when libfuse calls them from its own threads.
//   - The closures capture nothing, so Swift can pass them as C function pointers; they find
//     the session through `fuse_req_userdata`.
//   - Every pointer argument (`name`, write `buf`, `fi`) dies when the callback returns: it is
//     copied here, before the handler gets a chance to suspend.
//   - Operations left nil get ENOSYS from libfuse, which the kernel takes as "use the generic
//     behaviour": access (default_permissions checks instead), fallocate, copy_file_range,
//     lseek, locks (node-local locking), ioctl, poll, bmap.

import CFuse3
import Glibc

extension SessionCore {
    /// The session that owns `req`. Unretained: the loop holds the session for as long as
    /// requests arrive.
    static func of(_ req: fuse_req_t?) -> SessionCore {
        Unmanaged<SessionCore>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
    }
}

extension RequestContext {
    init(_ req: fuse_req_t?) {
        let ctx = fuse_req_ctx(req)!.pointee
        self.init(uid: UInt32(ctx.uid), gid: UInt32(ctx.gid), pid: Int32(ctx.pid), umask: UInt32(ctx.umask))
    }
}

/// Copies a NUL-terminated name out of libfuse's request buffer.
private func copyName(_ name: UnsafePointer<CChar>?) -> [UInt8] {
    guard let name else { return [] }
    return Array(UnsafeRawBufferPointer(start: name, count: strlen(name)))
}

private func copyBytes(_ bytes: UnsafePointer<CChar>?, _ count: Int) -> [UInt8] {
    guard let bytes, count > 0 else { return [] }
    return Array(UnsafeRawBufferPointer(start: bytes, count: count))
}

/// True for names in the `security.` namespace.
private func isSecurityName(_ name: UnsafePointer<CChar>?) -> Bool {
    guard let name else { return false }
    return strncmp(name, "security.", 9) == 0
}

/// The answer to reading a `security.*` name under `SecurityXattrPolicy.unsupported`.
/// `security.selinux` gets EOPNOTSUPP, "this file system has no security labels", as on a
/// file system without label support: `ls -l` asks for it on every file and stops asking for
/// the rest of the device after that answer, where ENODATA costs a round trip per file.
/// Every other name (the kernel's `security.capability` before each write) gets ENODATA.
private func securityGetError(_ name: UnsafePointer<CChar>) -> Int32 {
    strcmp(name, "security.selinux") == 0 ? EOPNOTSUPP : ENODATA
}

func makeOperations() -> fuse_lowlevel_ops {
    var ops = fuse_lowlevel_ops()

    ops.`init` = { userdata, conn in
        guard let userdata, let conn else { return }
        Unmanaged<SessionCore>.fromOpaque(userdata).takeUnretainedValue().negotiate(conn)
    }

    ops.lookup = { req, parent, name in
        let core = SessionCore.of(req)
        core.handler.lookup(
            parent: parent, name: copyName(name), context: RequestContext(req),
            reply: EntryReply(PendingRequest(req!, core, .lookup)))
    }

    ops.forget = { req, ino, nlookup in
        SessionCore.of(req).handler.forget(ino: ino, lookups: nlookup)
        fuse_reply_none(req)
    }

    ops.forget_multi = { req, count, forgets in
        let handler = SessionCore.of(req).handler
        if let forgets {
            for item in UnsafeBufferPointer(start: forgets, count: count) {
                handler.forget(ino: item.ino, lookups: item.nlookup)
            }
        }
        fuse_reply_none(req)
    }

    ops.getattr = { req, ino, fi in
        let core = SessionCore.of(req)
        core.handler.getattr(
            ino: ino, handle: fi?.pointee.fh, context: RequestContext(req),
            reply: AttrReply(PendingRequest(req!, core, .getattr)))
    }

    ops.setattr = { req, ino, attr, toSet, fi in
        let core = SessionCore.of(req)
        let changes = attr.map { AttributeChanges($0.pointee, toSet: toSet) } ?? AttributeChanges()
        core.handler.setattr(
            ino: ino, changes: changes, handle: fi?.pointee.fh, context: RequestContext(req),
            reply: AttrReply(PendingRequest(req!, core, .setattr)))
    }

    ops.readlink = { req, ino in
        let core = SessionCore.of(req)
        core.handler.readlink(ino: ino, context: RequestContext(req), reply: ReadlinkReply(PendingRequest(req!, core, .readlink)))
    }

    ops.mknod = { req, parent, name, mode, _ in
        // EPERM is mknod(2)'s "the file system does not support the type of node requested".
        guard let type = FileType(mode: UInt32(mode)) else {
            fuse_reply_err(req, EPERM)
            return
        }
        let core = SessionCore.of(req)
        core.handler.mknod(
            parent: parent, name: copyName(name), type: type, mode: UInt32(mode) & 0o7777, context: RequestContext(req),
            reply: EntryReply(PendingRequest(req!, core, .mknod)))
    }

    ops.mkdir = { req, parent, name, mode in
        let core = SessionCore.of(req)
        core.handler.mkdir(
            parent: parent, name: copyName(name), mode: UInt32(mode) & 0o7777, context: RequestContext(req),
            reply: EntryReply(PendingRequest(req!, core, .mkdir)))
    }

    ops.unlink = { req, parent, name in
        let core = SessionCore.of(req)
        core.handler.unlink(
            parent: parent, name: copyName(name), context: RequestContext(req),
            reply: StatusReply(PendingRequest(req!, core, .unlink)))
    }

    ops.rmdir = { req, parent, name in
        let core = SessionCore.of(req)
        core.handler.rmdir(
            parent: parent, name: copyName(name), context: RequestContext(req),
            reply: StatusReply(PendingRequest(req!, core, .rmdir)))
    }

    ops.symlink = { req, link, parent, name in
        let core = SessionCore.of(req)
        core.handler.symlink(
            target: copyName(link), parent: parent, name: copyName(name), context: RequestContext(req),
            reply: EntryReply(PendingRequest(req!, core, .symlink)))
    }

    ops.rename = { req, parent, name, newParent, newName, flags in
        let core = SessionCore.of(req)
        core.handler.rename(
            parent: parent, name: copyName(name), newParent: newParent, newName: copyName(newName),
            flags: RenameFlags(rawValue: flags), context: RequestContext(req),
            reply: StatusReply(PendingRequest(req!, core, .rename)))
    }

    ops.link = { req, ino, newParent, newName in
        let core = SessionCore.of(req)
        core.handler.link(
            ino: ino, newParent: newParent, newName: copyName(newName), context: RequestContext(req),
            reply: EntryReply(PendingRequest(req!, core, .link)))
    }

    ops.open = { req, ino, fi in
        let core = SessionCore.of(req)
        core.handler.open(
            ino: ino, flags: fi?.pointee.flags ?? 0, context: RequestContext(req),
            reply: OpenReply(PendingRequest(req!, core, .open)))
    }

    ops.create = { req, parent, name, mode, fi in
        let core = SessionCore.of(req)
        core.handler.create(
            parent: parent, name: copyName(name), mode: UInt32(mode), flags: fi?.pointee.flags ?? 0,
            context: RequestContext(req), reply: CreateReply(PendingRequest(req!, core, .create)))
    }

    ops.read = { req, ino, size, offset, fi in
        let core = SessionCore.of(req)
        core.handler.read(
            ino: ino, handle: fi?.pointee.fh ?? 0, offset: Int64(offset), size: size,
            context: RequestContext(req), reply: ReadReply(PendingRequest(req!, core, .read)))
    }

    ops.write = { req, ino, buf, size, offset, fi in
        let core = SessionCore.of(req)
        core.handler.write(
            ino: ino, handle: fi?.pointee.fh ?? 0, offset: Int64(offset), data: copyBytes(buf, size),
            isWritepage: fi?.pointee.writepage == 1, context: RequestContext(req),
            reply: WriteReply(PendingRequest(req!, core, .write)))
    }

    ops.flush = { req, ino, fi in
        let core = SessionCore.of(req)
        core.handler.flush(
            ino: ino, handle: fi?.pointee.fh ?? 0, lockOwner: fi?.pointee.lock_owner ?? 0,
            context: RequestContext(req), reply: StatusReply(PendingRequest(req!, core, .flush)))
    }

    ops.release = { req, ino, fi in
        let core = SessionCore.of(req)
        core.handler.release(
            ino: ino, handle: fi?.pointee.fh ?? 0, flags: fi?.pointee.flags ?? 0,
            context: RequestContext(req), reply: StatusReply(PendingRequest(req!, core, .release)))
    }

    ops.fsync = { req, ino, datasync, fi in
        let core = SessionCore.of(req)
        core.handler.fsync(
            ino: ino, handle: fi?.pointee.fh ?? 0, dataOnly: datasync != 0, context: RequestContext(req),
            reply: StatusReply(PendingRequest(req!, core, .fsync)))
    }

    ops.opendir = { req, ino, fi in
        let core = SessionCore.of(req)
        core.handler.opendir(
            ino: ino, flags: fi?.pointee.flags ?? 0, context: RequestContext(req),
            reply: OpenReply(PendingRequest(req!, core, .opendir)))
    }

    ops.readdir = { req, ino, size, offset, fi in
        let core = SessionCore.of(req)
        core.handler.readdir(
            ino: ino, handle: fi?.pointee.fh ?? 0, offset: Int64(offset), context: RequestContext(req),
            reply: DirectoryReply(PendingRequest(req!, core, .readdir), size: size))
    }

    ops.readdirplus = { req, ino, size, offset, fi in
        let core = SessionCore.of(req)
        core.handler.readdirplus(
            ino: ino, handle: fi?.pointee.fh ?? 0, offset: Int64(offset), context: RequestContext(req),
            reply: DirectoryPlusReply(PendingRequest(req!, core, .readdirplus), size: size))
    }

    ops.releasedir = { req, ino, fi in
        let core = SessionCore.of(req)
        core.handler.releasedir(
            ino: ino, handle: fi?.pointee.fh ?? 0, context: RequestContext(req),
            reply: StatusReply(PendingRequest(req!, core, .releasedir)))
    }

    ops.fsyncdir = { req, ino, datasync, fi in
        let core = SessionCore.of(req)
        core.handler.fsyncdir(
            ino: ino, handle: fi?.pointee.fh ?? 0, dataOnly: datasync != 0, context: RequestContext(req),
            reply: StatusReply(PendingRequest(req!, core, .fsyncdir)))
    }

    ops.statfs = { req, ino in
        let core = SessionCore.of(req)
        core.handler.statfs(ino: ino, context: RequestContext(req), reply: StatfsReply(PendingRequest(req!, core, .statfs)))
    }

    ops.setxattr = { req, ino, name, value, size, flags in
        let core = SessionCore.of(req)
        if core.options.securityXattrs == .unsupported && isSecurityName(name) {
            fuse_reply_err(req, EOPNOTSUPP)
            return
        }
        core.handler.setxattr(
            ino: ino, name: copyName(name), value: copyBytes(value, size), flags: XattrSetFlags(rawValue: flags),
            context: RequestContext(req), reply: StatusReply(PendingRequest(req!, core, .setxattr, isXattr: true)))
    }

    ops.getxattr = { req, ino, name, size in
        let core = SessionCore.of(req)
        // First thing, before any copy or lock: the kernel asks for security.capability
        // before every write(2).
        if core.options.securityXattrs == .unsupported && isSecurityName(name) {
            fuse_reply_err(req, securityGetError(name!))
            return
        }
        core.handler.getxattr(
            ino: ino, name: copyName(name), context: RequestContext(req),
            reply: XattrReply(PendingRequest(req!, core, .getxattr, isXattr: true), requestedSize: size))
    }

    ops.listxattr = { req, ino, size in
        let core = SessionCore.of(req)
        core.handler.listxattr(
            ino: ino, context: RequestContext(req),
            reply: XattrReply(PendingRequest(req!, core, .listxattr, isXattr: true), requestedSize: size))
    }

    ops.removexattr = { req, ino, name in
        let core = SessionCore.of(req)
        if core.options.securityXattrs == .unsupported && isSecurityName(name) {
            fuse_reply_err(req, ENODATA)
            return
        }
        core.handler.removexattr(
            ino: ino, name: copyName(name), context: RequestContext(req),
            reply: StatusReply(PendingRequest(req!, core, .removexattr, isXattr: true)))
    }

    return ops
}
