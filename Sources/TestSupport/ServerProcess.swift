import Foundation
import Testing

/// A real `ubiq-server` process on loopback, with its own data folder.
///
/// Starts the built executable (see `Binaries`), waits for its "listening on" line and reads
/// the port from it (it listens on port 0, so parallel tests never collide).
///
/// With `UBIQ_TEST_DEPLOYMENT=replicas` in the environment, a server started without storage
/// options of its own is two processes, replicas on a database of the tests' PostgreSQL cluster
/// and a bucket of their S3 server: `baseURL` (the HTTP API, the account commands) is the
/// first, the devices mount the two in turn (`nextDeviceReplica`), and `kill9`, `restart`, `halt` and
/// `stop` act on both. The suites run unchanged that way; docs/ARCHITECTURE.md, "Where the
/// tests live", says which look into a data folder and so run only as one server.
public final class ServerProcess: @unchecked Sendable {
    // Unchecked: `process` is replaced only by `restart`, which tests call from one task.
    public let dataDirectory: String
    let workDirectory: TempDirectory
    private(set) var extraArguments: [String]
    private(set) var process: Process
    public private(set) var port: Int
    /// The write end of the server's standard input, never written: it is open for as long
    /// as this test process lives, and the server (`--exit-with-stdin`) stops when it closes,
    /// so a test run that crashes or is killed leaves no server behind.
    private var lifeline: FileHandle

    /// `https://` when the server was started with `--tls-cert`.
    public var baseURL: String { "\(extraArguments.contains("--tls-cert") ? "https" : "http")://127.0.0.1:\(port)" }

    /// Whether this run's servers are replicas (see the type's comment).
    public static var replicated: Bool { ProcessInfo.processInfo.environment["UBIQ_TEST_DEPLOYMENT"] == "replicas" }

    /// The other replica, in a replicated run.
    private(set) var replica: ServerProcess?
    /// The database and bucket a replicated run made for this server, dropped by `stop`.
    var sharedStorage: ScaleOutStorage?
    /// Which replica the next device mounts (`nextDeviceReplica`).
    private var devicesMounted = 0

    public static func start(extraArguments: [String] = []) async throws -> ServerProcess {
        let ownStorage = extraArguments.contains { ["--metadata", "--blobs"].contains($0) }
        guard replicated && !ownStorage else { return try await startOne(extraArguments: extraArguments) }
        let storage = try await ScaleOutStorage.make(label: "replicas")
        do {
            let first = try await startOne(extraArguments: extraArguments + storage.serverArguments)
            first.sharedStorage = storage
            do {
                first.replica = try await startOne(extraArguments: extraArguments + storage.serverArguments)
            } catch {
                await first.stop()
                throw error
            }
            return first
        } catch {
            await storage.remove()
            throw error
        }
    }

    static func startOne(extraArguments: [String]) async throws -> ServerProcess {
        let work = try TempDirectory("ubiq-server")
        let (process, port, lifeline) = try await launch(data: work.path + "/data", log: work.path, port: 0, extra: extraArguments)
        return ServerProcess(work: work, process: process, port: port, lifeline: lifeline, extra: extraArguments)
    }

    /// The process the next device mounts: in a replicated run the replicas in turn, the
    /// first device on the first, so that two devices sync through two replicas.
    public func nextDeviceReplica() -> ServerProcess {
        guard let replica else { return self }
        defer { devicesMounted += 1 }
        return devicesMounted % 2 == 0 ? self : replica
    }

    init(work: TempDirectory, process: Process, port: Int, lifeline: FileHandle, extra: [String]) {
        self.lifeline = lifeline
        self.workDirectory = work
        self.dataDirectory = work.path + "/data"
        self.process = process
        self.port = port
        self.extraArguments = extra
    }

    static func launch(data: String, log: String, port listenPort: Int, extra: [String]) async throws -> (Process, Int, FileHandle) {
        let stdoutPath = log + "/stdout-\(UUID().uuidString)"
        _ = FileManager.default.createFile(atPath: stdoutPath, contents: nil)
        if !FileManager.default.fileExists(atPath: log + "/stderr") {
            _ = FileManager.default.createFile(atPath: log + "/stderr", contents: nil)
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Binaries.path("ubiq-server"))
        process.arguments = ["--data", data, "--listen", "127.0.0.1:\(listenPort)", "--log-level", "warning", "--exit-with-stdin"] + extra
        let lifeline = Pipe()
        // Close-on-exec, so that no other child (another server, a mount) keeps this server's
        // lifeline open; the server's own copy is its standard input, which exec keeps.
        _ = fcntl(lifeline.fileHandleForReading.fileDescriptor, F_SETFD, FD_CLOEXEC)
        _ = fcntl(lifeline.fileHandleForWriting.fileDescriptor, F_SETFD, FD_CLOEXEC)
        process.standardInput = lifeline
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: stdoutPath))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: log + "/stderr"))
        try process.run()
        var port: Int?
        try await eventually(timeout: .seconds(30), "ubiq-server to listen") {
            guard process.stillRunning else {
                let err = (try? String(contentsOfFile: log + "/stderr", encoding: .utf8)) ?? ""
                throw TestSupportError("ubiq-server exited with \(process.endStatus): \(err)")
            }
            let out = (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? ""
            guard let line = out.split(separator: "\n").first(where: { $0.contains("listening on") }),
                  let p = line.split(separator: ":").last.flatMap({ Int($0) }) else { return false }
            port = p
            return true
        }
        return (process, port!, lifeline.fileHandleForWriting)
    }

    /// What the server printed on standard output, every run of it in this folder.
    public func printed() -> String {
        let files = (try? FileManager.default.contentsOfDirectory(atPath: workDirectory.path)) ?? []
        return files.filter { $0.hasPrefix("stdout-") }.compactMap { try? String(contentsOfFile: workDirectory.path + "/" + $0, encoding: .utf8) }.joined()
    }

    /// Creates an account through the real CLI (`ubiq-server account add --password-stdin`).
    public func addAccount(_ name: String, password: String) async throws {
        try await account(["add", name, "--password-stdin"], stdin: password + "\n")
    }

    /// Removes an account through the real CLI, beside the running server, as an operator would.
    public func removeAccount(_ name: String) async throws {
        try await account(["remove", name])
    }

    /// The options of `extraArguments` that say where the storage is (`--metadata`, `--blobs`
    /// and the files of secrets), which the account commands need too.
    var storageArguments: [String] {
        var found: [String] = []
        var i = 0
        while i + 1 < extraArguments.count {
            if ["--metadata", "--blobs", "--postgres-password-file", "--s3-credentials-file"].contains(extraArguments[i]) {
                found += extraArguments[i...(i + 1)]
                i += 2
            } else {
                i += 1
            }
        }
        return found
    }

    /// `ubiq-server account ARGUMENTS` on this server's data folder; what it printed.
    @discardableResult
    public func account(_ arguments: [String], stdin: String? = nil) async throws -> String {
        let result = try await run(Binaries.path("ubiq-server"), ["account"] + arguments + ["--data", dataDirectory] + storageArguments, stdin: stdin)
        guard result.status == 0 else { throw TestSupportError("account \(arguments[0]) failed: \(result.stderr)") }
        return result.stdout
    }

    /// `kill -9`: no shutdown code runs.
    public func kill9() {
        kill(process.processIdentifier, SIGKILL)
        while process.stillRunning { usleep(1_000) }
        replica?.kill9()
    }

    /// Starts the server again on the same data folder: on the same port when `samePort` (so
    /// that mounts pointing at it reconnect), else on a new one; with `extraArguments` in place
    /// of the first start's when given (other storage, say).
    public func restart(samePort: Bool = false, extraArguments replaced: [String]? = nil) async throws {
        if process.stillRunning { kill9() }
        // A replicated run's storage stays the replicas' whatever else changes.
        let replaced = replaced.map { $0 + (sharedStorage?.serverArguments ?? []) }
        if let replaced { extraArguments = replaced }
        let (p, port, lifeline) = try await Self.launch(data: dataDirectory, log: workDirectory.path, port: samePort ? port : 0, extra: extraArguments)
        self.process = p
        self.port = port
        self.lifeline = lifeline
        try await replica?.restart(samePort: samePort, extraArguments: replaced)
    }

    /// SIGTERM, a bounded wait, then SIGKILL; the data folder stays.
    public func halt() async {
        await replica?.halt()
        guard process.stillRunning else { return }
        process.terminate()
        try? await eventually(timeout: .seconds(10), "ubiq-server to exit") { !self.process.stillRunning }
        if process.stillRunning { kill9() }
    }

    /// `halt`, and the data folder is removed (with a replicated run's database and bucket).
    public func stop() async {
        await halt()
        await replica?.stop()
        await sharedStorage?.remove()
        workDirectory.remove()
    }

    public var isRunning: Bool { process.stillRunning }
    public var pid: Int32 { process.processIdentifier }
    public var terminationStatus: Int32 { process.endStatus }

    /// Closes this process's end of the server's standard input, as the kernel does when a
    /// test process dies.
    public func dropLifeline() {
        try? lifeline.close()
    }
}

/// Runs `body` with a started server and always stops it.
public func withServer<T>(extraArguments: [String] = [], _ body: (ServerProcess) async throws -> T) async throws -> T {
    let server = try await ServerProcess.start(extraArguments: extraArguments)
    do {
        let result = try await body(server)
        await server.stop()
        return result
    } catch {
        await server.stop()
        throw error
    }
}

extension Trait where Self == ConditionTrait {
    /// For a test that looks into one server's SQLite data folder (its blob files, its account
    /// commands by `--data` alone, a second server on the folder): it does not run against
    /// replicas (`UBIQ_TEST_DEPLOYMENT=replicas`), whose storage is elsewhere.
    public static var oneServerOnly: Self {
        .disabled(if: ServerProcess.replicated, "looks into one server's SQLite data folder")
    }
}
