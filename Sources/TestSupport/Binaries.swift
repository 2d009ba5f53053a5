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
    async let outData = Task.detached { out.fileHandleForReading.readDataToEndOfFile() }.value
    async let errData = Task.detached { err.fileHandleForReading.readDataToEndOfFile() }.value
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while process.isRunning {
        if clock.now >= deadline {
            kill(process.processIdentifier, SIGKILL)
            throw TestSupportError("\(executable) \(arguments) did not finish within \(timeout)")
        }
        try await Task.sleep(for: .milliseconds(5))
    }
    return (process.terminationStatus, String(decoding: await outData, as: UTF8.self), String(decoding: await errData, as: UTF8.self))
}
