import Glibc

/// The kernel requests FuseKit answers, by the name of their libfuse operation.
public enum RequestKind: String, Sendable, CaseIterable {
    case lookup, getattr, setattr, readlink, mknod, mkdir, unlink, rmdir, symlink, rename, link
    case open, create, read, write, flush, release, fsync, opendir, readdir, readdirplus, releasedir, fsyncdir, statfs
    case setxattr, getxattr, listxattr, removexattr
}

/// Hears each request once it is answered: how long it took from the callback to the reply,
/// and its errno (0 for success). Called on the thread that answered; must be quick.
public protocol RequestObserver: Sendable {
    func answered(_ kind: RequestKind, nanoseconds: UInt64, errno: Int32)
}

func monotonicNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}
