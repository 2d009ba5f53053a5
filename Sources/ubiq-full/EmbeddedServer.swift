import ControlSocket
import DataFolderLock
import Foundation
import MountDaemon
import SyncAPI
import SyncClient

/// The embedded default: with no server and no login, `ubiq mount` uses the user's own local
/// `ubiq-server` (started when needed) on a data folder of theirs, with a local account whose
/// random password and token are kept in `$XDG_CONFIG_HOME/ubiq/embedded.json` (mode 0600).
///
/// The server listens on a Unix socket inside its data folder (mode 0700): each user's server
/// has an address of its own that never changes (a mount's cache is keyed by its server's
/// address), no two users' servers compete for a port, and no other user can reach it.
enum EmbeddedServer {
    static let account = "local"
    static var stateFile: String { Paths.config + "/embedded.json" }
    static var dataDirectory: String { Paths.data + "/server" }
    static var socketPath: String { dataDirectory + "/server.sock" }
    static var url: String { UnixSocketAddress.address(of: socketPath) }
    static var log: String { Paths.data + "/server.log" }
    /// The address every user's embedded server had before it moved to a socket of its own;
    /// a cache made then is carried over (`MountConfiguration.formerServerURL`).
    static let formerURL = "http://127.0.0.1:8420"

    struct State: Codable {
        var password: String
        var token: String?
    }

    static func ensure() async throws -> StoredLogin {
        try FileManager.default.createDirectory(atPath: Paths.config, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        // One at a time: two first mounts at once would each make an account `local` with a
        // password of its own, and the second's would be refused. Close-on-exec, so that the
        // server started here does not hold it.
        let lock = open(Paths.config + "/embedded.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard lock >= 0 else { throw Failure("cannot open \(Paths.config)/embedded.lock: \(String(cString: strerror(errno)))") }
        defer { close(lock) }
        while flock(lock, LOCK_EX) != 0 {
            guard errno == EINTR else { throw Failure("cannot lock \(Paths.config)/embedded.lock: \(String(cString: strerror(errno)))") }
        }
        try await start()
        var state: State
        if let data = FileManager.default.contents(atPath: stateFile), let s = try? JSONDecoder().decode(State.self, from: data) {
            state = s
        } else {
            state = State(password: randomPassword(), token: nil)
            try addAccount(password: state.password)
        }
        if let token = state.token { return StoredLogin(server: url, user: account, token: token) }
        let response: TokenResponse
        do {
            response = try await SyncHTTPClient.login(server: url, user: account, password: state.password)
        } catch {
            throw Failure("cannot log in to the embedded server at \(url): \(error)")
        }
        state.token = response.token
        try write(state)
        return StoredLogin(server: url, user: account, token: response.token)
    }

    static func serverBinary() throws -> String {
        let path = Paths.binaryDirectory + "/ubiq-server"
        guard access(path, X_OK) == 0 else { throw Failure("ubiq-server is not beside ubiq (\(path)); build it or pass --server") }
        return path
    }

    static func isAnswering() async -> Bool {
        (try? await SyncHTTPClient.health(server: url)) != nil
    }

    /// The serving process, from the data folder's lock: nil when none runs.
    static var runningPID: pid_t? { DataFolderLock.holder(dataDirectory: dataDirectory) }

    /// Starts the server unless it answers already. Two `ubiq mount`s at once may both start
    /// one: the data folder's lock lets one serve, and both wait for it to answer.
    static func start() async throws {
        if await isAnswering() { return }
        guard socketPath.utf8.count <= UnixSocketAddress.longestPath else {
            throw Failure("the embedded server's socket path \(socketPath) is longer than \(UnixSocketAddress.longestPath) bytes; set XDG_DATA_HOME to a shorter folder, or run ubiq-server yourself and mount with --server")
        }
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        // The socket is reached through this folder: it stays the user's alone, whatever mode
        // it was made with.
        guard chmod(dataDirectory, 0o700) == 0 else { throw Failure("cannot make \(dataDirectory) private: \(String(cString: strerror(errno)))") }
        try await stopFormerServer()
        var started: pid_t?
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(20)
        while clock.now < deadline {
            if await isAnswering() { return }
            // While none holds the lock: start one, once. A server that loses the race for the
            // lock to another `ubiq mount`'s exits at once, and this one waits for the winner;
            // one that exits while none holds it has failed.
            if runningPID == nil {
                if let pid = started, !Spawn.isAlive(pid) {
                    throw Failure("the embedded server did not start: \(lastLogFailure() ?? "no reason in its log") (see \(log))")
                }
                if started == nil {
                    // Only this user reaches its socket: the token guards nothing the folder's
                    // mode does not, and an embedded mount left unused for months must still work.
                    started = try Spawn.detached(
                        executable: try serverBinary(), arguments: ["ubiq-server", "--data", dataDirectory, "--listen", url, "--token-lifetime", "36500d"],
                        log: log)
                }
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw Failure("the embedded server did not answer within 20 s; see \(log)")
    }

    /// The last failure line of the server's log.
    static func lastLogFailure() -> String? {
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").last(where: { $0.hasPrefix("ubiq-server:") }).map { $0.replacingOccurrences(of: "ubiq-server: ", with: "") }
    }

    /// An embedded server of a version that listened on 127.0.0.1:8420 for every user and held
    /// no lock may still run on this data folder: it is stopped first, or two servers would
    /// share one database (and the old one serve the user's data on a port everyone reaches).
    static func stopFormerServer() async throws {
        let wanted = ["--data", dataDirectory, "--listen", "127.0.0.1:8420"]
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return }
        for name in names {
            guard let pid = pid_t(name), pid != getpid(),
                  let raw = FileManager.default.contents(atPath: "/proc/\(name)/cmdline") else { continue }
            let argv = raw.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
            guard argv.count >= 5, argv[0].hasSuffix("ubiq-server"), Array(argv[1...4]) == wanted else { continue }
            var st = stat()
            guard stat("/proc/\(name)", &st) == 0, st.st_uid == getuid() else { continue }
            // A server of this version holds the lock: started by hand on that address, it is
            // the user's, and it is left alone (`start` then waits for it, and says so).
            guard runningPID != pid else { continue }
            kill(pid, SIGTERM)
            let clock = ContinuousClock()
            let deadline = clock.now + .seconds(15)
            while kill(pid, 0) == 0, !isZombie(pid) {
                guard clock.now < deadline else { throw Failure("a ubiq-server of an earlier version (pid \(pid)) still serves \(dataDirectory) and did not stop; stop it, then mount again") }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
    }

    static func isZombie(_ pid: pid_t) -> Bool {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
        // The state follows the command name in parentheses, which may itself hold spaces.
        guard let close = status.lastIndex(of: ")") else { return true }
        return status[status.index(after: close)...].trimmingCharacters(in: .whitespaces).hasPrefix("Z")
    }

    /// SIGTERM, then waits (bounded) for the lock to go with the process.
    static func stop() async throws -> pid_t? {
        guard let pid = runningPID else { return nil }
        guard kill(pid, SIGTERM) == 0 else { throw Failure("cannot stop the embedded server (pid \(pid)): \(String(cString: strerror(errno)))") }
        let clock = ContinuousClock()
        // The server's own graceful shutdown ends within 10 s.
        let deadline = clock.now + .seconds(15)
        while runningPID != nil {
            guard clock.now < deadline else { throw Failure("the embedded server (pid \(pid)) did not stop within 15 s") }
            try await Task.sleep(for: .milliseconds(20))
        }
        return pid
    }

    /// This user's running mounts that use the embedded server, by mountpoint.
    static func mountsUsingIt(except excluded: String? = nil) async -> [String] {
        var result: [String] = []
        for entry in MountRegistry.entries() {
            guard let pid = entry.daemon, kill(pid, 0) == 0 else { continue }
            let control = ControlClient(socketPath: entry.cacheDirectory + "/control.sock")
            guard let report: MountStatusReport = try? await control.get(ControlPath.status, timeout: .seconds(3)) else { continue }
            if report.server == url && report.mountpoint != excluded { result.append(report.mountpoint) }
        }
        return result.sorted()
    }

    static func addAccount(password: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try serverBinary())
        process.arguments = ["account", "add", account, "--password-stdin", "--data", dataDirectory]
        let input = Pipe()
        process.standardInput = input
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        input.fileHandleForWriting.write(Data((password + "\n").utf8))
        try input.fileHandleForWriting.close()
        process.waitUntilExit()
        // An account left by an earlier embedded.json that was removed: start over with a new one.
        if process.terminationStatus != 0 {
            throw Failure("cannot create the local account; remove \(dataDirectory) or pass --server")
        }
        try write(State(password: password, token: nil))
    }

    static func write(_ state: State) throws {
        let data = try JSONEncoder().encode(state)
        let fd = open(stateFile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Failure("cannot write \(stateFile)") }
        _ = data.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        fsync(fd)
        close(fd)
    }

    static func randomPassword() -> String {
        var g = SystemRandomNumberGenerator()
        return (0..<4).map { _ in String(g.next() as UInt64, radix: 36) }.joined()
    }
}
