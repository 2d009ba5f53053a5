import Foundation
import MountInfo

/// One "device": a real `ubiq mount` (the built executable, started as a user would) with its
/// own mountpoint, cache folder, device name and XDG folders, against a live `ubiq-server`.
///
/// Every filesystem command a test runs goes through `sh`, which puts a deadline on it: a hung
/// mount fails the test instead of hanging the run. `unmount()` always leaves nothing mounted.
public final class TestDevice: @unchecked Sendable {
    // Unchecked: fields are set once; tests use a device from one task.
    public let name: String
    public let mountpoint: String
    public let cache: String
    let home: TempDirectory
    public let serverURL: String
    let extraArguments: [String]

    public var environment: [String: String] {
        var env = ProcessInfo.processInfo.environment
        env["XDG_CONFIG_HOME"] = home.path + "/config"
        env["XDG_DATA_HOME"] = home.path + "/data"
        env["XDG_CACHE_HOME"] = home.path + "/cache"
        env["XDG_RUNTIME_DIR"] = home.path + "/run"
        env["LC_ALL"] = "C"
        return env
    }

    init(name: String, home: TempDirectory, serverURL: String, extraArguments: [String]) {
        self.name = name
        self.home = home
        self.mountpoint = home.path + "/mnt"
        self.cache = home.path + "/cache-dir"
        self.serverURL = serverURL
        self.extraArguments = extraArguments
    }

    /// Logs in as `user` and mounts. `cacheDirectory` replaces the default cache folder (for
    /// example a small tmpfs). `through` is another address of the server (a relay), for both.
    public static func mount(
        _ name: String, server: ServerProcess, through url: String? = nil, user: String, password: String,
        extraArguments: [String] = [], loginArguments: [String] = [], prepare: ((TestDevice) async throws -> Void)? = nil
    ) async throws -> TestDevice {
        let serverURL = url ?? server.nextDeviceReplica().baseURL
        let device = TestDevice(name: name, home: try TempDirectory("ubiq-device-\(name)"), serverURL: serverURL, extraArguments: extraArguments)
        try FileManager.default.createDirectory(atPath: device.mountpoint, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: device.cache, withIntermediateDirectories: true)
        if let prepare { try await prepare(device) }
        let login = try await device.ubiq(["login", "--server", serverURL, "--user", user, "--password-stdin"] + loginArguments, stdin: password + "\n")
        guard login.status == 0 else { throw TestSupportError("login failed: \(login.stderr)") }
        try await device.mountAgain()
        return device
    }

    public func mountAgain() async throws {
        let r = try await ubiq(["mount", mountpoint, "--server", serverURL, "--cache", cache, "--device", name] + extraArguments, timeout: .seconds(60))
        guard r.status == 0 else {
            let log = (try? String(contentsOfFile: cache + "/daemon.log", encoding: .utf8)) ?? ""
            throw TestSupportError("mount failed (\(r.status)): \(r.stderr)\n\(log.suffix(3000))")
        }
    }

    /// Runs `ubiq` (or `command`, another executable of the build: `ubiq-full`) with this
    /// device's environment.
    public func ubiq(
        _ arguments: [String], stdin: String? = nil, timeout: Duration = .seconds(60), command: String = "ubiq"
    ) async throws -> (status: Int32, stdout: String, stderr: String) {
        try await run(Binaries.path(command), arguments, stdin: stdin, timeout: timeout, environment: environment, directory: nil)
    }

    /// Runs a shell command with `M` set to the mountpoint, under a deadline.
    @discardableResult
    public func sh(_ command: String, timeout: Duration = .seconds(30)) async throws -> (status: Int32, stdout: String, stderr: String) {
        var env = environment
        env["M"] = mountpoint
        do {
            return try await run("/bin/bash", ["-c", command], timeout: timeout, environment: env, directory: nil)
        } catch var stuck as CommandTimedOut {
            stuck.description += "\n[\(name)] " + (await hangReport())
            throw stuck
        }
    }

    /// Where the daemon's threads are and how many FUSE requests wait, with the end of its log:
    /// what a command that hung on this mount was waiting for.
    public func hangReport() async -> String {
        let pid = (try? await daemonPID()).flatMap { $0 }
        let threads = pid.map { StuckProcesses.threads(of: $0) } ?? "no daemon"
        let log = ((try? String(contentsOfFile: cache + "/daemon.log", encoding: .utf8)) ?? "").split(separator: "\n").suffix(40).joined(separator: "\n")
        var report = "daemon threads:\n\(threads)\nFUSE requests:\n\(StuckProcesses.fuseRequestsWaiting())\nlog:\n\(log)"
        // The daemon's own stacks, where a debugger is at hand (root's run: an ordinary user
        // may not trace a process it did not start).
        if let pid, FileManager.default.isExecutableFile(atPath: "/usr/bin/gdb"),
           let traced = try? await run("/usr/bin/gdb", ["-p", "\(pid)", "-batch", "-ex", "thread apply all bt 25"], timeout: .seconds(60)) {
            report += "\ndaemon stacks:\n" + traced.stdout.split(separator: "\n").filter { $0.hasPrefix("#") || $0.hasPrefix("Thread") }.prefix(600).joined(separator: "\n")
        }
        return report
    }

    /// Like `sh`, but a non-zero exit fails the test with the command's stderr.
    @discardableResult
    public func must(_ command: String, timeout: Duration = .seconds(30)) async throws -> String {
        let r = try await sh(command, timeout: timeout)
        guard r.status == 0 else { throw TestSupportError("[\(name)] `\(command)` exited \(r.status): \(r.stderr)") }
        return r.stdout
    }

    public func xattr(_ relativePath: String, _ attribute: String) async throws -> String? {
        let r = try await sh("getfattr --only-values -n \(attribute) \"$M/\(relativePath)\"")
        return r.status == 0 ? r.stdout : nil
    }

    /// The daemon's pid, from the process table.
    public func daemonPID() async throws -> Int32? {
        let r = try await run("/usr/bin/pgrep", ["-f", "--", "--cache \(cache) "], timeout: .seconds(10))
        return r.stdout.split(separator: "\n").first.flatMap { Int32($0) }
    }

    /// What a failing test should show about this device: its status, listing with status
    /// attributes, and the end of the daemon's log.
    public func diagnostics() async -> String {
        let status = (try? await ubiq(["status", "--json", "--mount", mountpoint]))?.stdout ?? "?"
        let listing = (try? await sh(#"cd "$M" && ls -laR . 2>&1 | head -50; getfattr -R -d -m 'user.ubiq.(uploadingError|downloadingError|revision)' . 2>/dev/null | head -60"#))?.stdout ?? "?"
        let log = ((try? String(contentsOfFile: cache + "/daemon.log", encoding: .utf8)) ?? "").split(separator: "\n").suffix(15).joined(separator: "\n")
        let rows = (try? await sh("sqlite3 \(cache)/accounts/*/state.sqlite 'select ino, item_id, name, revision, server_digest, content, cached_bytes, upload_error, download_error from items; select * from outbox; select * from xattr_changes; select item_id, revision from held_changes' 2>&1"))?.stdout ?? ""
        return "[\(name)] status: \(status)\n\(listing)\nrows:\n\(rows)\nlog:\n\(log)"
    }

    /// The daemon's log lines that contain `text`.
    public func logLines(mentioning text: String) -> String {
        ((try? String(contentsOfFile: cache + "/daemon.log", encoding: .utf8)) ?? "").split(separator: "\n").filter { $0.contains(text) }.joined(separator: "\n")
    }

    /// `eventually`, with every device's diagnostics in the failure.
    public func expectEventually(_ what: @autoclosure () -> String, timeout: Duration = waitLimit, devices: [TestDevice], _ condition: () async throws -> Bool) async throws {
        do {
            try await TestSupport.eventually(timeout: timeout, "it", condition)
        } catch {
            var text = "\(error): \(what())"
            for d in devices { text += "\n" + (await d.diagnostics()) }
            throw TestSupportError(text)
        }
    }

    /// Read with the product's own parser (`getline` to the end): Foundation's
    /// `String(contentsOfFile:)` stops after the kernel's first answer, one page of the table
    /// (about 4 KiB), so with many tests' mounts a later mount was missing from it, and
    /// `unmount` then killed the daemon of a device it believed unmounted, leaving its mount dead.
    public var isMounted: Bool {
        MountInfo.table().contains { $0.mountpoint == mountpoint }
    }

    /// `kill -9` of the daemon: the mount is left dead (ENOTCONN).
    public func killDaemon() async throws {
        guard let pid = try await daemonPID() else { throw TestSupportError("no daemon for \(name)") }
        kill(pid, SIGKILL)
        try await eventually(timeout: .seconds(10), "the daemon to die") { kill(pid, 0) != 0 }
    }

    /// Unmounts (flushing what it can), then makes sure nothing is left mounted or running.
    /// Says on stderr what was tried when the mount stays: the test script's sweep removes it,
    /// and this line tells whose it was and why.
    public func unmount() async {
        var tried: [String] = []
        func attempt(_ what: String, _ command: () async throws -> (status: Int32, stdout: String, stderr: String)) async {
            do {
                let r = try await command()
                tried.append("\(what): exit \(r.status) \(r.stderr.trimmingCharacters(in: .whitespacesAndNewlines))")
            } catch {
                tried.append("\(what): \(error)")
            }
        }
        if isMounted { await attempt("ubiq unmount") { try await ubiq(["unmount", mountpoint, "--timeout", "10"], timeout: .seconds(40)) } }
        if isMounted { await attempt("fusermount3 -uz") { try await run("/bin/fusermount3", ["-uz", mountpoint], timeout: .seconds(10)) } }
        if let pid = try? await daemonPID() { kill(pid, SIGKILL) }
        if isMounted { FileHandle.standardError.write(Data("[\(name)] \(mountpoint) is still mounted; tried \(tried.joined(separator: "; "))\n".utf8)) }
    }

    public func remove() {
        _ = try? FileManager.default.removeItem(atPath: home.path)
    }
}

/// Mounts one more device on a running server for `body`, and always unmounts and removes it.
public func withMountedDevice<T>(
    _ name: String, server: ServerProcess, through url: String? = nil, user: String = "alice", password: String = "alice-pw",
    extraArguments: [String] = [], loginArguments: [String] = [], _ body: (TestDevice) async throws -> T
) async throws -> T {
    let device = try await TestDevice.mount(
        name, server: server, through: url, user: user, password: password, extraArguments: extraArguments, loginArguments: loginArguments)
    do {
        let result = try await body(device)
        await device.unmount()
        device.remove()
        return result
    } catch {
        await device.unmount()
        device.remove()
        throw error
    }
}

/// Runs `body` with a live server and mounted devices, and always unmounts and stops them.
public func withDevices<T>(
    _ names: [String], user: String = "alice", password: String = "alice-pw", serverArguments: [String] = [],
    mountArguments: [String] = [], _ body: (ServerProcess, [TestDevice]) async throws -> T
) async throws -> T {
    let server = try await ServerProcess.start(extraArguments: serverArguments)
    var devices: [TestDevice] = []
    do {
        try await server.addAccount(user, password: password)
        for name in names {
            devices.append(try await TestDevice.mount(name, server: server, user: user, password: password, extraArguments: mountArguments))
        }
        let result = try await body(server, devices)
        for d in devices { await d.unmount(); d.remove() }
        await server.stop()
        return result
    } catch {
        for d in devices { await d.unmount(); d.remove() }
        await server.stop()
        throw error
    }
}
