import Glibc
import Logging
import ServiceLifecycle

/// The daemon's log file, kept to a bounded size. `ubiq mount` starts the daemon with its
/// standard output and error on `MountConfiguration.logFile`; once the file passes `limit`,
/// it becomes `daemon.log.1` (older ones move up to `.3`; the oldest goes) and a new file
/// takes its place on both descriptors, so that later lines, and a crash's last words, go
/// there. A daemon run by hand with `--foreground` logs to whatever its standard error is,
/// and nothing is rotated.
public struct DaemonLog: Service {
    let path: String
    /// The size past which the file is set aside.
    let limit: Int64
    public static let defaultSize: Int64 = 10 << 20
    static let kept = 3
    static let checkEvery: Duration = .seconds(5)

    init(path: String, limit: Int64 = DaemonLog.defaultSize) {
        self.path = path
        self.limit = limit
    }

    /// The log file when standard output is it, else nil.
    var file: String? { standardOutputSize == nil ? nil : path }

    /// The size of the log file when standard output is it, else nil.
    var standardOutputSize: Int64? {
        var out = stat(), onDisk = stat()
        guard fstat(STDOUT_FILENO, &out) == 0, stat(path, &onDisk) == 0, out.st_dev == onDisk.st_dev, out.st_ino == onDisk.st_ino else { return nil }
        return Int64(out.st_size)
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try? await Task.sleep(for: Self.checkEvery)
                rotateIfLarge()
            }
        }
    }

    func rotateIfLarge() {
        guard let size = standardOutputSize, size > limit else { return }
        fflush(nil)
        for n in stride(from: Self.kept - 1, through: 1, by: -1) { rename("\(path).\(n)", "\(path).\(n + 1)") }
        rename(path, path + ".1")
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        dup2(fd, STDOUT_FILENO)
        dup2(fd, STDERR_FILENO)
        close(fd)
    }
}
