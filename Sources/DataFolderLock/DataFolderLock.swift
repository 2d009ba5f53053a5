#if canImport(Glibc)
import Glibc
#endif

/// The lock a serving `ubiq-server` holds on its data folder (`DATA/server.lock`, `flock`), with
/// its process ID inside. One server per data folder: two would both bind the folder's socket
/// (the second unlinking the first's) and share one database. `ubiq` reads it to find out
/// whether a user's embedded server runs, and which process to stop.
public enum DataFolderLock {
    public static func path(in dataDirectory: String) -> String { dataDirectory + "/server.lock" }

    public enum Outcome: Sendable, Equatable {
        /// Held by this process until it exits (the descriptor stays open).
        case acquired
        /// Another process serves the folder; its ID once it has written it.
        case heldBy(pid_t?)
        case failed(errno: Int32)
    }

    /// Takes the lock for this process's lifetime.
    public static func acquire(dataDirectory: String) -> Outcome {
        let fd = open(path(in: dataDirectory), O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return .failed(errno: errno) }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            let failure = errno
            defer { close(fd) }
            return failure == EWOULDBLOCK ? .heldBy(readPID(fd)) : .failed(errno: failure)
        }
        let text = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = text.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        // Never closed: the lock ends with the process, however it ends.
        return .acquired
    }

    /// The process serving the folder: nil when none does; `.some(nil)` while one is starting
    /// and has not written its ID yet.
    public static func holder(dataDirectory: String) -> pid_t?? {
        let fd = open(path(in: dataDirectory), O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        if flock(fd, LOCK_SH | LOCK_NB) == 0 { return nil }
        return .some(readPID(fd))
    }

    static func readPID(_ fd: Int32) -> pid_t? {
        var buffer = [UInt8](repeating: 0, count: 32)
        let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard n > 0 else { return nil }
        let text = String(decoding: buffer[..<n], as: UTF8.self).split(separator: "\n").first.map(String.init) ?? ""
        return pid_t(text).flatMap { $0 > 0 ? $0 : nil }
    }
}
