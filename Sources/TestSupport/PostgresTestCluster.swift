import Foundation
import PostgresStorage
import Synchronization

/// A throwaway PostgreSQL server for tests: its own cluster (`initdb`) in a folder under
/// `TMPDIR`, listening on 127.0.0.1 only, on a free port, with its Unix socket in that folder.
///
/// Run as root, the server runs as the user `postgres` (it refuses root), started with
/// `setpriv`; otherwise as the test's own user. `fsync` stays on: durability is part of what
/// the store promises. Each store under test gets a database of its own (`makeDatabase`).
///
/// `shared()` is one cluster for the whole test process, started at its first use and stopped
/// when the process exits (`atexit`). A test that stops and starts the server (a crash) makes
/// its own with `start()` and calls `remove()`. The server inherits `TMPDIR`, so that
/// `scripts/test` finds and stops one a killed run left behind.
public final class PostgresTestCluster: Sendable {
    public let port: Int
    /// The cluster's folder: `data/`, the socket, the password file and the log.
    public let folder: String
    let binaries: String
    let runAs: (uid: UInt32, gid: UInt32)?

    var dataDirectory: String { folder + "/data" }
    /// The superuser's password, on its first line: what a server given `--postgres-password-file` reads.
    public var passwordFile: String { folder + "/password" }
    var logFile: String { folder + "/server.log" }

    /// The cluster every test of this process shares.
    public static func shared() async throws -> PostgresTestCluster {
        try await SharedCluster.instance.cluster()
    }

    private actor SharedCluster {
        static let instance = SharedCluster()
        private var starting: Task<PostgresTestCluster, any Error>?

        func cluster() async throws -> PostgresTestCluster {
            if let starting { return try await starting.value }
            let task = Task { try await PostgresTestCluster.start() }
            starting = task
            return try await task.value
        }
    }

    /// Makes and starts a new cluster; it is stopped and removed by `remove()`, or at the
    /// latest when the test process exits.
    public static func start() async throws -> PostgresTestCluster {
        guard let binaries = ["/usr/lib/postgresql/15/bin"].first(where: { FileManager.default.isExecutableFile(atPath: $0 + "/initdb") }) else {
            throw TestSupportError("PostgreSQL 15 is not installed (/usr/lib/postgresql/15/bin): apt-get install postgresql (scripts/test does)")
        }
        let dir = try TempDirectory("ubiq-pg")
        var runAs: (uid: UInt32, gid: UInt32)?
        if geteuid() == 0 {
            guard let entry = getpwnam("postgres") else { throw TestSupportError("no user postgres: apt-get install postgresql makes it") }
            runAs = (entry.pointee.pw_uid, entry.pointee.pw_gid)
            guard chown(dir.path, entry.pointee.pw_uid, entry.pointee.pw_gid) == 0 else { throw TestSupportError("cannot give \(dir.path) to postgres: errno \(errno)") }
        }
        // A port nobody listens on now; another process may take it before the server binds,
        // and then the server fails to start and the next attempt takes another.
        var lastFailure: (any Error)?
        for _ in 0..<3 {
            let cluster = PostgresTestCluster(port: try freeLoopbackPort(), folder: dir.path, binaries: binaries, runAs: runAs)
            do {
                if !FileManager.default.fileExists(atPath: cluster.dataDirectory) { try await cluster.initialize() }
                try await cluster.startServer()
                ClustersToStop.add(cluster.dataDirectory)
                return cluster
            } catch {
                lastFailure = error
                // A start that timed out may have left its server running: the next attempt
                // must not find the data folder locked.
                try? await cluster.stopServer(mode: "immediate")
            }
        }
        dir.remove()
        throw lastFailure ?? TestSupportError("PostgreSQL did not start")
    }

    private init(port: Int, folder: String, binaries: String, runAs: (uid: UInt32, gid: UInt32)?) {
        self.port = port
        self.folder = folder
        self.binaries = binaries
        self.runAs = runAs
    }

    /// `initdb`: the superuser `postgres` with a random password, which a TCP connection must
    /// give (`scram-sha-256`), as a deployed server would ask; the Unix socket, in the
    /// cluster's own folder, trusts (the tests' admin commands go there).
    func initialize() async throws {
        let password = (0..<24).map { _ in String(UInt8.random(in: 0...255), radix: 16) }.joined()
        guard FileManager.default.createFile(atPath: passwordFile, contents: Data((password + "\n").utf8), attributes: [.posixPermissions: 0o600]) else {
            throw TestSupportError("cannot write \(passwordFile)")
        }
        if let runAs { chown(passwordFile, runAs.uid, runAs.gid) }
        // --no-sync: the cluster's creation need not survive a power loss; the server's own
        // fsync setting is left on.
        try await asServerUser("initdb", [
            "-D", dataDirectory, "--username=postgres", "--pwfile=\(passwordFile)", "--auth-local=trust", "--auth-host=scram-sha-256",
            "--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions",
        ])
    }

    /// Starts the server and waits, with a deadline, until it accepts connections: `pg_ctl -w`
    /// waits for this start's own postmaster, so a server that exits (its port taken
    /// meanwhile) fails the start instead of leaving another one to be mistaken for it.
    public func startServer() async throws {
        // Enough connections for the conformance suite's stores side by side (each pool holds
        // up to 20).
        let options = "-c listen_addresses=127.0.0.1 -p \(port) -k \(folder) -c fsync=on -c synchronous_commit=on -c max_connections=400"
        try await asServerUser("pg_ctl", ["start", "-D", dataDirectory, "-l", logFile, "-w", "-t", "60", "-o", options])
    }

    /// Stops the server: `immediate` is a crash as far as the database is concerned (no
    /// checkpoint; the next start replays the WAL), `fast` a clean shutdown.
    public func stopServer(mode: String = "fast") async throws {
        try await asServerUser("pg_ctl", ["stop", "-D", dataDirectory, "-m", mode, "-w", "-t", "60"])
    }

    /// Stops the server (at once) and removes the cluster's folder.
    public func remove() async {
        try? await stopServer(mode: "immediate")
        ClustersToStop.remove(dataDirectory)
        try? FileManager.default.removeItem(atPath: folder)
    }

    public func serverLog() -> String {
        (try? String(contentsOfFile: logFile, encoding: .utf8)).map { String($0.suffix(4_000)) } ?? "(no log)"
    }

    // MARK: Databases

    /// A new, empty database, and the configuration a store connects to it with: over TCP,
    /// with the password from the cluster's password file.
    public func makeDatabase() async throws -> PostgresConfiguration {
        let name = "ubiq_\(getpid())_\(DatabaseNames.next())"
        try await admin("CREATE DATABASE \(name)")
        return try PostgresConfiguration(url: "postgres://postgres@127.0.0.1:\(port)/\(name)", password: .file(passwordFile))
    }

    /// Drops a database `makeDatabase` made, closing the connections still open to it.
    public func dropDatabase(_ configuration: PostgresConfiguration) async throws {
        try await admin("DROP DATABASE IF EXISTS \(configuration.database) WITH (FORCE)")
    }

    /// One SQL command as the superuser, through the Unix socket (the names in it are the
    /// tests' own, never input).
    public func admin(_ sql: String, database: String = "postgres") async throws {
        let result = try await run(
            binaries + "/psql", ["-h", folder, "-p", String(port), "-U", "postgres", "-d", database, "-v", "ON_ERROR_STOP=1", "-X", "-q", "-c", sql],
            timeout: .seconds(60))
        guard result.status == 0 else { throw TestSupportError("psql \(sql): \(result.stderr)") }
    }

    // MARK: Processes

    /// Runs one of the server's programs as the server's user, with this process's
    /// environment (TMPDIR included).
    func asServerUser(_ program: String, _ arguments: [String]) async throws {
        let result: (status: Int32, stdout: String, stderr: String)
        if let runAs {
            result = try await run("/usr/bin/setpriv", [
                "--reuid=\(runAs.uid)", "--regid=\(runAs.gid)", "--clear-groups", "--", binaries + "/" + program,
            ] + arguments, timeout: .seconds(120), directory: folder)
        } else {
            result = try await run(binaries + "/" + program, arguments, timeout: .seconds(120), directory: folder)
        }
        guard result.status == 0 else {
            throw TestSupportError("\(program) \(arguments.joined(separator: " ")) failed (\(result.status)): \(result.stderr)\n\(serverLog())")
        }
    }
}

/// Numbers for the databases of this process.
private enum DatabaseNames {
    private static let counter = Mutex(0)
    static func next() -> Int { counter.withLock { $0 += 1; return $0 } }
}

/// The clusters still running, stopped when the test process exits: a server must not outlive
/// the tests that started it. `atexit` runs no Swift async code, so each is stopped with a
/// signal to its postmaster (SIGQUIT: immediate shutdown, its children end with it).
private enum ClustersToStop {
    private static let running = Mutex<Set<String>>([])
    private static let registered = Mutex(false)

    static func add(_ dataDirectory: String) {
        running.withLock { _ = $0.insert(dataDirectory) }
        registered.withLock { done in
            guard !done else { return }
            done = true
            atexit { ClustersToStop.stopAll() }
        }
    }

    static func remove(_ dataDirectory: String) {
        running.withLock { _ = $0.remove(dataDirectory) }
    }

    static func stopAll() {
        for dataDirectory in running.withLock({ $0 }) {
            guard let pidFile = try? String(contentsOfFile: dataDirectory + "/postmaster.pid", encoding: .utf8),
                  let pid = pidFile.split(separator: "\n").first.flatMap({ pid_t($0) })
            else { continue }
            kill(pid, SIGQUIT)
            // The folder goes once the postmaster is gone (it writes there until then).
            for _ in 0..<500 where kill(pid, 0) == 0 { usleep(10_000) }
            try? FileManager.default.removeItem(atPath: URL(fileURLWithPath: dataDirectory).deletingLastPathComponent().path)
        }
    }
}
