import Foundation
import MountInfo

/// An ordinary user of this machine, with a `HOME` of its own under the test run's folder: the
/// user a person would be, running `ubiq` with no root anywhere. Made by root (the test process
/// when it runs as root), which starts every command as that user with `setpriv`.
public final class SystemUser: @unchecked Sendable {
    // Unchecked: fields are set once.
    public let name: String
    public let uid: UInt32
    public let gid: UInt32
    public let home: String
    let folder: TempDirectory

    /// The users `scripts/test` creates for the tests that act as several users at once.
    public static let testUserNames = ["ubiq-test-1", "ubiq-test-2"]

    public init(_ name: String) throws {
        guard let entry = getpwnam(name) else {
            throw TestSupportError("no user \(name) on this machine: scripts/test creates it (useradd --system \(name))")
        }
        self.name = name
        uid = entry.pointee.pw_uid
        gid = entry.pointee.pw_gid
        folder = try TempDirectory("ubiq-user-\(name)")
        home = folder.path
        // 0755, as a home folder usually is: what keeps other users out of the user's server
        // must be ubiq's own folder modes, not this one's.
        guard chown(home, uid, gid) == 0, chmod(home, 0o755) == 0 else { throw TestSupportError("cannot give \(home) to \(name): errno \(errno)") }
    }

    /// What a login shell of this user has: its own `HOME`, and XDG folders left to their
    /// defaults below it, except the runtime folder (a login session would have made one).
    public var environment: [String: String] {
        [
            "HOME": home, "USER": name, "LOGNAME": name, "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "LC_ALL": "C", "XDG_RUNTIME_DIR": home + "/run", "UBIQ": Binaries.path("ubiq"),
            // scripts/test finds what a killed run left running by its TMPDIR.
            "TMPDIR": ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp",
        ]
    }

    /// Runs a shell command as this user, under a deadline, in `HOME`.
    @discardableResult
    public func sh(_ command: String, stdin: String? = nil, timeout: Duration = .seconds(60)) async throws -> (status: Int32, stdout: String, stderr: String) {
        try await run(
            "/usr/bin/setpriv", ["--reuid=\(uid)", "--regid=\(gid)", "--init-groups", "--", "/bin/bash", "-c", "mkdir -p -m 700 \"$XDG_RUNTIME_DIR\" && cd && " + command],
            stdin: stdin, timeout: timeout, environment: environment, directory: nil)
    }

    /// Like `sh`, but a non-zero exit throws with the command's output.
    @discardableResult
    public func must(_ command: String, timeout: Duration = .seconds(60)) async throws -> String {
        let r = try await sh(command, timeout: timeout)
        guard r.status == 0 else { throw TestSupportError("[\(name)] `\(command)` exited \(r.status): \(r.stderr)\(r.stdout)") }
        return r.stdout
    }

    /// Unmounts whatever of this user's is still mounted, stops every process of the user
    /// (daemons, embedded servers) and removes the `HOME`.
    public func clean() async {
        // Not Foundation's read of the table: it stops after the first page (see `TestDevice.isMounted`).
        for entry in MountInfo.table() where entry.mountpoint.hasPrefix(home + "/") {
            _ = try? await run("/bin/fusermount3", ["-uz", entry.mountpoint], timeout: .seconds(10))
        }
        _ = try? await run("/usr/bin/pkill", ["-KILL", "-u", "\(uid)"], timeout: .seconds(10))
        _ = try? await eventually(timeout: .seconds(10), "\(name)'s processes to end") {
            (try await run("/usr/bin/pgrep", ["-u", "\(uid)"], timeout: .seconds(10))).status != 0
        }
        folder.remove()
    }
}
