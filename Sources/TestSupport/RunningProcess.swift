import Foundation

/// A child that runs while the test goes on (`ubiq monitor`), its output read line by line.
/// `stop()` (from a `defer`) kills it if it still runs, so that no child outlives its test.
public final class RunningProcess: @unchecked Sendable {
    // `lines`, `stderr` and `ended` are guarded by `lock`; the rest is set once.
    private let lock = NSLock()
    private var lines: [String] = []
    /// When each line was read, for latencies measured from the test's side.
    private var arrivals: [ContinuousClock.Instant] = []
    private var errors = Data()
    private var ended = false
    let process = Process()

    /// `standardInput`: a pipe whose write end the caller keeps (a child that stops when its
    /// input ends then stops with this process); nothing to read by default.
    public init(_ executable: String, _ arguments: [String], environment: [String: String]? = nil, standardInput: Pipe? = nil) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let environment { process.environment = environment }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = standardInput ?? FileHandle.nullDevice
        try process.run()
        // Each pipe on a thread of its own, never a blocking read in a task (see `PipeCollector`).
        let stdout = out.fileHandleForReading, stderr = err.fileHandleForReading
        Thread.detachNewThread { [self] in
            var pending = Data()
            while true {
                let chunk = readSome(stdout)
                if chunk.isEmpty { break }
                pending.append(chunk)
                while let nl = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    let line = String(decoding: pending[pending.startIndex..<nl], as: UTF8.self)
                    pending.removeSubrange(pending.startIndex...nl)
                    let now = ContinuousClock.now
                    lock.withLock {
                        lines.append(line)
                        arrivals.append(now)
                    }
                }
            }
            try? stdout.close()
            lock.withLock { ended = true }
        }
        Thread.detachNewThread { [self] in
            while true {
                let chunk = readSome(stderr)
                if chunk.isEmpty { break }
                lock.withLock { errors.append(chunk) }
            }
            try? stderr.close()
        }
    }

    /// Every complete line printed so far.
    public var output: [String] { lock.withLock { lines } }
    /// When line `index` was read from the pipe.
    public func arrival(of index: Int) -> ContinuousClock.Instant { lock.withLock { arrivals[index] } }
    public var errorOutput: String { lock.withLock { String(decoding: errors, as: UTF8.self) } }

    /// Waits until a line satisfies `condition`, looking at lines from index `from` on; returns
    /// its index. Fails when the deadline passes or the output ends first.
    @discardableResult
    public func line(
        from: Int = 0, _ what: @autoclosure () -> String, timeout: Duration = .seconds(30), where condition: (String) -> Bool
    ) async throws -> Int {
        let deadline = ContinuousClock.now + timeout
        while true {
            let (seen, done) = lock.withLock { (lines, ended) }
            if seen.count > from, let i = seen[from...].firstIndex(where: condition) { return i }
            if done { throw TestSupportError("the output ended before \(what()); it was:\n\(seen.joined(separator: "\n"))\n\(errorOutput)") }
            if ContinuousClock.now >= deadline {
                throw TestSupportError("no line for \(what()) within \(timeout); the output was:\n\(seen.joined(separator: "\n"))")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    public func signal(_ number: Int32) { kill(process.processIdentifier, number) }

    /// The exit status, once it exited within `timeout` (killed, and failing, otherwise).
    public func exitStatus(within timeout: Duration = .seconds(30)) async throws -> Int32 {
        let deadline = ContinuousClock.now + timeout
        while true {
            if let status = process.statusIfEnded { return status }
            if ContinuousClock.now >= deadline {
                stop()
                throw TestSupportError("\(process.executableURL?.path ?? "?") did not exit within \(timeout)")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
    }

    public func stop() {
        if process.stillRunning { kill(process.processIdentifier, SIGKILL) }
    }
}
