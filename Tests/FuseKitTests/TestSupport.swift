// Helpers for tests that use a real mount.
//
// Rules they enforce:
//   - The test process never makes a file system call on the mount itself: a hung daemon
//     would hang the test runner. Tools run in child processes under `timeout -s KILL`, and
//     the wait for them is async, so no cooperative thread blocks while the handler (which
//     answers some requests from Tasks) needs one.
//   - Every mount is unmounted, even when the test body throws or an expectation fails.
//   - No sleeping and hoping: conditions are polled until a deadline.

import Foundation
@testable import FuseKit
import MountInfo
import Testing

struct ToolResult: Sendable {
    var status: Int32
    var stdout: String
    var stderr: String
    var succeeded: Bool { status == 0 }
}

/// Runs `arguments` (a program from PATH and its arguments), killed after `seconds`.
///
/// 30 s, not less: some handlers answer from tasks, and at the start of a full test run the
/// cooperative pool (one thread per core) is shared with every suite starting at once. An
/// `ls` of three entries was killed at 10 s there once, while the same test alone takes
/// milliseconds. A hung handler still fails the test, just later.
func run(_ arguments: [String], seconds: Int = 30) async throws -> ToolResult {
    let directory = FileManager.default.temporaryDirectory
    let outURL = directory.appendingPathComponent("fusekit-out-\(UUID().uuidString)")
    let errURL = directory.appendingPathComponent("fusekit-err-\(UUID().uuidString)")
    _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
    _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
    defer {
        try? FileManager.default.removeItem(at: outURL)
        try? FileManager.default.removeItem(at: errURL)
    }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/timeout")
    process.arguments = ["-s", "KILL", String(seconds)] + arguments
    // Files rather than pipes: a full pipe could stall the tool while nobody reads it.
    let out = try FileHandle(forWritingTo: outURL)
    let err = try FileHandle(forWritingTo: errURL)
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    let status: Int32 = try await withCheckedThrowingContinuation { continuation in
        process.terminationHandler = { process in continuation.resume(returning: process.terminationStatus) }
        do {
            try process.run()
        } catch {
            process.terminationHandler = nil
            continuation.resume(throwing: error)
        }
    }
    try out.close()
    try err.close()
    return ToolResult(
        status: status,
        stdout: (try? String(contentsOf: outURL, encoding: .utf8)) ?? "",
        stderr: (try? String(contentsOf: errURL, encoding: .utf8)) ?? "")
}

/// Runs a shell command line.
func sh(_ command: String, seconds: Int = 30) async throws -> ToolResult {
    try await run(["sh", "-c", command], seconds: seconds)
}

/// Polls `condition` every 20 ms until it holds or `timeout` passes; returns whether it held.
/// The deadline is a guard against a hang, not a measure: the whole suite shares two cores, and
/// at its start the open of a `cat`, at once when alone, once took over 10 s to arrive.
func poll(timeout: Duration = .seconds(30), _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return try await condition()
}

struct Mounted {
    let mount: FuseMount
    let fs: MemoryFS
    /// The mountpoint.
    let path: String
    func at(_ name: String) -> String { path + "/" + name }
}

/// A fresh empty directory under /tmp.
func makeTemporaryDirectory(_ prefix: String = "fusekit-test") throws -> String {
    var template = Array("/tmp/\(prefix)-XXXXXX".utf8CString)
    guard let created = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
        throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
    }
    return String(cString: created)
}

/// Mounts `fs` on a new temporary directory, runs `body`, then unmounts through the API and
/// checks that the loop ended. If anything fails on the way, the `defer` still detaches the
/// mount with `fusermount3 -u -z` and removes the directory.
func withMount(
    _ fs: MemoryFS, options: MountOptions = MountOptions(), observer: (any RequestObserver)? = nil, _ body: (Mounted) async throws -> Void
) async throws {
    _ = staleMountsCleared
    let directory = try makeTemporaryDirectory()
    defer { rmdir(directory) }
    var options = options
    options.fsName = "fusekit-test"
    options.subtype = "fusekittest"
    let mount = try FuseMount.mount(at: directory, options: options, handler: fs, observer: observer)
    defer {
        if MountRecovery.mountedFileSystemType(at: mount.mountpoint) != nil {
            _ = Unmounter.runProcess(["timeout", "-s", "KILL", "10", "fusermount3", "-u", "-z", "--", mount.mountpoint])
        }
    }
    try await body(Mounted(mount: mount, fs: fs, path: mount.mountpoint))

    try mount.unmount()
    #expect(MountRecovery.mountedFileSystemType(at: mount.mountpoint) == nil)
    let ended = await poll { mount.end != nil }
    #expect(ended, "the request loop did not end after unmount")
    #expect(mount.end == .unmounted)
}

/// Mounts left by an earlier test run that crashed (its /dev/fuse descriptor closed with the
/// process, so they answer ENOTCONN) are cleared once per run. Live mounts of a test run going
/// on in parallel answer statfs and are left alone.
let staleMountsCleared: Void = {
    for entry in MountInfo.table() where entry.type == "fuse.fusekittest" && entry.mountpoint.hasPrefix("/tmp/fusekit-") {
        let mountpoint = entry.mountpoint
        if (try? MountRecovery.clearDeadMount(at: mountpoint)) == .clearedDeadMount {
            rmdir(mountpoint)
        }
    }
}()
