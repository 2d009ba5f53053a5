import Foundation

/// Where the built executables are: `UBIQ_BIN_DIR` (scripts/test sets it), else beside the
/// test bundle, which SwiftPM puts in the same build folder.
public enum Binaries {
    public static var directory: String {
        if let dir = ProcessInfo.processInfo.environment["UBIQ_BIN_DIR"], !dir.isEmpty { return dir }
        var url = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        // Inside `X.xctest/Contents/MacOS` on Darwin; directly in the build folder on Linux.
        while url.path.contains(".xctest") { url.deleteLastPathComponent() }
        return url.path
    }

    public static func path(_ name: String) -> String { directory + "/" + name }
}

/// Runs a command to completion with a deadline; returns its exit status and output.
public func run(
    _ executable: String, _ arguments: [String], stdin: String? = nil, timeout: Duration = .seconds(60),
    environment: [String: String]? = nil, directory: String? = nil
) async throws -> (status: Int32, stdout: String, stderr: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    if let environment { process.environment = environment }
    if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
    let out = Pipe(), err = Pipe(), inp = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = inp
    try process.run()
    if let stdin { inp.fileHandleForWriting.write(Data(stdin.utf8)) }
    try inp.fileHandleForWriting.close()
    let outData = PipeCollector(out.fileHandleForReading)
    let errData = PipeCollector(err.fileHandleForReading)
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    var status = process.statusIfEnded
    while status == nil {
        if clock.now >= deadline {
            let stuck = StuckProcesses.report(below: process.processIdentifier)
            kill(process.processIdentifier, SIGKILL)
            let stdout = await outData.collected(grace: .milliseconds(100))
            throw CommandTimedOut(description: """
                \(executable) \(arguments) did not finish within \(timeout); it printed:
                \(String(decoding: stdout, as: UTF8.self))
                where it and its children were:
                \(stuck)
                """)
        }
        try await Task.sleep(for: .milliseconds(5))
        status = process.statusIfEnded
    }
    let stdout = await outData.collected(grace: .seconds(2))
    let stderr = await errData.collected(grace: .seconds(2))
    return (status!, String(decoding: stdout, as: UTF8.self), String(decoding: stderr, as: UTF8.self))
}

/// Foundation's `Process` on Linux learns of an exit only when a socket it gives the child is
/// closed, and a process that another test spawned at the same moment can inherit that socket
/// and keep it open for as long as it lives: the child was then a zombie, and `isRunning` said
/// true until a deadline (or, in `waitUntilExit`, for ever). These ask the kernel as well.
extension Process {
    /// Its exit status (128 + the signal when a signal ended it) once it ended; nil while it
    /// runs. Also nil for a moment while Foundation reaps it, which asking `terminationStatus`
    /// then would trap on.
    public var statusIfEnded: Int32? {
        if let status = exitStatus(ofUnreaped: processIdentifier) { return status }
        return isRunning ? nil : terminationStatus
    }

    public var stillRunning: Bool { statusIfEnded == nil }

    /// The exit status of a process that has ended (`stillRunning` said false).
    public var endStatus: Int32 {
        while true {
            if let status = statusIfEnded { return status }
            usleep(1_000)
        }
    }
}

/// The exit status of a child that has ended and is not reaped yet (128 + the signal when a
/// signal ended it), without reaping it; nil while it runs, and once it is reaped.
func exitStatus(ofUnreaped pid: pid_t) -> Int32? {
    var info = siginfo_t()
    guard waitid(P_PID, id_t(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0, info._sifields._sigchld.si_pid == pid else { return nil }
    let status = info._sifields._sigchld.si_status
    return info.si_code == CLD_EXITED ? status : 128 + status
}

/// A command that missed its deadline, with what it printed and where it was stuck.
public struct CommandTimedOut: Error, CustomStringConvertible {
    public var description: String
}

/// One read of a pipe, blocking: what was there, empty at the end of the output (or on an error).
/// A read interrupted by a signal is made again: Foundation's `availableData` traps on EINTR,
/// and took a whole test run down with it.
func readSome(_ handle: FileHandle) -> Data {
    var buffer = [UInt8](repeating: 0, count: 65_536)
    while true {
        let n = read(handle.fileDescriptor, &buffer, buffer.count)
        if n >= 0 { return Data(buffer[0..<n]) }
        if errno != EINTR { return Data() }
    }
}

/// Collects what a child writes to a pipe, on a thread of its own.
///
/// Never a blocking read in a task: the cooperative pool has one thread per core, and when a
/// process spawned at the same moment by another test inherited a pipe's write end, the read
/// never saw its end, two such reads held both threads, and every task of the test run stopped,
/// deadlines included. So: a dedicated thread reads, and the caller waits for the end of the
/// output only for a grace period after the child exited.
final class PipeCollector: @unchecked Sendable {
    // `data` and `finished` are guarded by `lock`.
    private let lock = NSLock()
    private var data = Data()
    private var finished = false

    init(_ handle: FileHandle) {
        Thread.detachNewThread { [self] in
            while true {
                let chunk = readSome(handle)  // blocks; empty at the end of the output
                if chunk.isEmpty { break }
                lock.withLock { data.append(chunk) }
            }
            // Closed here, not left to the handle's deallocation: Foundation keeps these objects
            // alive, and a run of polling tests leaked thousands of pipes until spawning the
            // next child crashed.
            try? handle.close()
            lock.withLock { finished = true }
        }
    }

    /// Everything once the output ended, or what arrived within `grace` if it does not end
    /// (a descriptor inherited by another process keeps the pipe open).
    func collected(grace: Duration) async -> Data {
        let deadline = ContinuousClock.now + grace
        while !lock.withLock({ finished }) && ContinuousClock.now < deadline {
            try? await Task.sleep(for: .milliseconds(2))
        }
        return lock.withLock { data }
    }
}
