#if canImport(Glibc)
import Glibc
#endif

/// The lock a serving `ubiq-server` holds on its data folder (`DATA/server.lock`). One server
/// per data folder: two would both bind the folder's socket (the second unlinking the first's)
/// and share one database. `ubiq` asks it whether a user's embedded server runs, and which
/// process to stop.
///
/// A POSIX record lock (`fcntl`), not `flock`: asking who holds it (`F_GETLK`) takes nothing,
/// so a question can never make a starting server think the folder is taken, and the answer
/// is the holder's process ID from the kernel, never a stale one from the file.
public enum DataFolderLock {
    public static func path(in dataDirectory: String) -> String { dataDirectory + "/server.lock" }

    public enum Outcome: Sendable, Equatable {
        /// Held by this process until it exits (the descriptor stays open).
        case acquired
        /// Another process serves the folder.
        case heldBy(pid_t)
        case failed(errno: Int32)
    }

    /// Takes the lock for this process's lifetime.
    public static func acquire(dataDirectory: String) -> Outcome {
        let fd = open(path(in: dataDirectory), O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return .failed(errno: errno) }
        var lock = wholeFile(F_WRLCK)
        guard fcntl(fd, F_SETLK, &lock) == 0 else {
            let failure = errno
            defer { close(fd) }
            guard failure == EAGAIN || failure == EACCES else { return .failed(errno: failure) }
            return holder(fd).map { .heldBy($0) } ?? .failed(errno: failure)
        }
        // The process ID, for people reading the file; `holder` asks the kernel.
        let text = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = text.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        // Never closed: the lock ends with the process, however it ends.
        return .acquired
    }

    /// The process serving the folder, or nil when none does.
    public static func holder(dataDirectory: String) -> pid_t? {
        let fd = open(path(in: dataDirectory), O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        return holder(fd)
    }

    static func holder(_ fd: Int32) -> pid_t? {
        var lock = wholeFile(F_WRLCK)
        guard fcntl(fd, F_GETLK, &lock) == 0, lock.l_type != Int16(F_UNLCK) else { return nil }
        return lock.l_pid
    }

    static func wholeFile(_ type: Int32) -> flock {
        var lock = flock()
        lock.l_type = Int16(type)
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = 0
        lock.l_len = 0
        return lock
    }
}
