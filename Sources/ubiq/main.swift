#if canImport(Glibc)
import Glibc
#endif

// `ubiq`: the command users type. A query (`ubiq query`), which scripts run often and which the
// daemon answers in about a millisecond, is answered here, by a small executable without
// Foundation that starts in about 2 ms; every other command, and any query this one does not
// read exactly as the full parser would (`QuickQuery`), goes to `ubiq-full`, beside it, with the
// same arguments. Exit codes (docs/CLI.md): 0 success, 1 a user-facing failure, 2 bad usage.

let arguments = CommandLine.arguments
if arguments.count > 1, arguments[1] == "query", let query = QuickQuery(arguments.dropFirst(2)), let (output, toStandardError, status) = query.run() {
    write(all: output, to: toStandardError ? STDERR_FILENO : STDOUT_FILENO)
    exit(status)
}

/// Writes every byte (a pipe takes a long output in pieces); stops at an error, as a closed pipe.
func write(all bytes: [UInt8], to fd: Int32) {
    var done = 0
    while done < bytes.count {
        let n = bytes[done...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        if n < 0 && errno == EINTR { continue }
        guard n > 0 else { return }
        done += n
    }
}

/// `ubiq-full` in this executable's folder (links resolved: `ubiq` may be a link to it).
func fullCommand() -> String {
    guard let resolved = realpath("/proc/self/exe", nil) else { return "ubiq-full" }
    defer { free(resolved) }
    let path = String(cString: resolved)
    return String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)]) + "/ubiq-full"
}

let full = fullCommand()
var argv = arguments.map { strdup($0) } + [nil]
execv(full, &argv)
write(all: Array("ubiq: cannot run \(full): \(String(cString: strerror(errno)))\n".utf8), to: STDERR_FILENO)
exit(1)
