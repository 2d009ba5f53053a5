import ArgumentParser
import DataFolderLock
import Foundation
import ItemModel
import Logging
import Metrics
import Prometheus
import ServerStorage
import ServiceLifecycle
import UnixSignals
import SyncAPI
import SyncServer
import SyncService

struct UbiqServer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ubiq-server",
        abstract: "The ubiq sync server: keeps cloud containers and serves them over HTTP.",
        subcommands: [Serve.self, Account.self, Migrate.self],
        defaultSubcommand: Serve.self)
}

/// A failure the user should read: one line on stderr, exit 1.
struct Failure: Error, CustomStringConvertible {
    let description: String
    init(_ message: String) { description = message }

    static func exitCode(for error: Error, command: any ParsableCommand.Type) -> Int32 {
        if let failure = error as? Failure {
            FileHandle.standardError.write(Data("ubiq-server: \(failure.description)\n".utf8))
            return 1
        }
        let code = command.exitCode(for: error)
        if code == .success {
            print(command.fullMessage(for: error))
            return 0
        }
        if code == .validationFailure {
            FileHandle.standardError.write(Data((command.fullMessage(for: error) + "\n").utf8))
            return 2
        }
        let message: String
        switch error {
        case let e as StorageError: message = describe(e)
        case let e as BlobStoreError: message = "storage: \(e)"
        default: message = command.fullMessage(for: error)
        }
        FileHandle.standardError.write(Data("ubiq-server: \(message)\n".utf8))
        return 1
    }

    static func describe(_ error: StorageError) -> String {
        switch error {
        case .accountExists(let n): "account '\(n)' already exists"
        case .accountNotFound(let n): "no account '\(n)'"
        case .invalidAccountName(let n): "'\(n)' is not a valid account name (1-64 of A-Z a-z 0-9 . _ - @)"
        default: "\(error)"
        }
    }
}

struct DataOption: ParsableArguments {
    @Option(name: .long, help: "Data folder (default: $XDG_DATA_HOME/ubiq/server). It may also come before the subcommand.")
    var data: String?

    @Option(name: .long, help: "Where metadata is kept: sqlite:DIR (default: the data folder) or postgres://USER@HOST[:PORT]/DATABASE[?sslmode=disable|prefer|require&pool_max=N], which several servers may share (replicas). The password comes from PGPASSWORD or --postgres-password-file, never from here.")
    var metadata: String?

    @Option(name: .long, help: "The first line of this file is the PostgreSQL password (instead of PGPASSWORD).")
    var postgresPasswordFile: String?

    @Option(name: .long, help: "Where contents are kept: dir:DIR (default: the data folder's blobs), or s3://BUCKET?endpoint=http(s)://HOST[:PORT][&region=R][&path-style=true|false][&prefix=P], an S3-compatible bucket several servers may share. The keys come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN) or --s3-credentials-file, never from here.")
    var blobs: String?

    @Option(name: .long, help: "A file in the AWS credentials form (aws_access_key_id = …, aws_secret_access_key = …) with the S3 keys, instead of the environment.")
    var s3CredentialsFile: String?

    func validate() throws {
        do {
            let (metadata, blobs) = try locations()
            if case .postgres(let url) = metadata { _ = try postgresConfiguration(url) }
            if case .s3(let location) = blobs { _ = try s3Configuration(location) }
        } catch {
            throw ValidationError("\(error)")
        }
    }

    /// The arguments with a leading `--data DIR` (or `--data=DIR`) moved to the end, so that
    /// `ubiq-server --data DIR account add NAME` reads as `git -C DIR …` does: the parser
    /// takes options before a subcommand as the top command's, and only the subcommands have
    /// a data folder. Only a leading one moves: anything later is the subcommand's already.
    static func movedAfterSubcommand(_ arguments: [String]) -> [String] {
        var rest = arguments
        var moved: [String] = []
        while let first = rest.first {
            if first == "--data", rest.count >= 2 {
                moved += rest.prefix(2)
                rest.removeFirst(2)
            } else if first.hasPrefix("--data=") {
                moved.append(first)
                rest.removeFirst()
            } else {
                break
            }
        }
        guard !moved.isEmpty else { return arguments }
        // Before a `--`, whose followers are all positional.
        let end = rest.firstIndex(of: "--") ?? rest.endIndex
        rest.insert(contentsOf: moved, at: end)
        return rest
    }

    var directory: String {
        if let data { return data }
        let env = ProcessInfo.processInfo.environment
        let base = env["XDG_DATA_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? ((env["HOME"] ?? "/root") + "/.local/share")
        return base + "/ubiq/server"
    }

    func createDirectory() throws {
        do {
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw Failure("cannot create data folder \(directory): \(error.localizedDescription)")
        }
    }

    /// Runs `body` with the storage open, and closes it after (a PostgreSQL pool's task ends).
    func withStorage<T>(_ body: (OpenedStorage) async throws -> T) async throws -> T {
        let opened = try await openStorage()
        do {
            let result = try await body(opened)
            await opened.close()
            return result
        } catch {
            await opened.close()
            throw error
        }
    }
}

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "serve", abstract: "Run the server (the default command).")

    @OptionGroup var data: DataOption

    @Option(name: .long, help: "Address to listen on: HOST:PORT (port 0 picks a free one), or unix:PATH for a Unix socket.")
    var listen: String = "127.0.0.1:8420"

    @Option(name: .long, help: "Largest content upload accepted, in bytes.")
    var maxUploadBytes: Int64 = 64 << 30

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "info"

    @Option(name: .long, help: "Seconds a checked token is remembered without a database read; a removed account's tokens work that long. 0: check every request.")
    var authCacheSeconds: Int = 10

    @Option(name: .long, help: "How long earlier contents of files are kept, for `ubiq versions --all` and `ubiq restore`: a number and s, m, h or d (30d, 12h).")
    var keepVersions: String = "30d"

    @Option(name: .long, help: "Serve /metrics on this address (HOST:PORT or unix:PATH) instead of --listen's: the API may face the world while its metrics stay private.")
    var metricsListen: String?

    @Option(name: .long, help: "Share fetches (/s/…) one client address may make a minute, in bursts of as many; more get 429. 0: no limit.")
    var shareRate: Int = 600

    @Option(name: .long, help: "How long a login token lives after its last use: a number and s, m, h or d.")
    var tokenLifetime: String = "90d"

    @Option(name: .long, help: "Largest JSON request body, in bytes (a batch of creates may be four times as large).")
    var maxJsonBytes: Int = 1 << 20

    @Option(name: .long, help: "Largest request head (its header lines together), in bytes; past it 431.")
    var maxHeaderBytes: Int = 16 << 10

    @Option(name: .long, help: "Connections open at once; more wait in the listen backlog.")
    var maxConnections: Int = 2048

    @Option(name: .long, help: "Close a connection idle this long, or whose request stops arriving for this long: a number and s, m, h or d.")
    var idleTimeout: String = "120s"

    @Option(name: .long, help: "Close a connection whose client has not read a byte of its answer for this long: a number and s, m, h or d.")
    var writeTimeout: String = "120s"

    @Option(name: .long, help: "Requests one account may make a minute, in bursts of as many; more get 429. 0: no limit.")
    var accountRate: Int = 0

    @Option(name: .long, help: "Serve HTTPS with this certificate chain (PEM, the server's certificate first); read again on SIGHUP.")
    var tlsCert: String?

    @Option(name: .long, help: "The private key (PEM) of --tls-cert.")
    var tlsKey: String?

    @Option(name: .long, help: "Failed logins an account may have a minute (a client address: four times as many); then logins are refused with 429 for a while. 0: no limit.")
    var loginFailures: Int = 5

    @Flag(name: .long, help: "Stop, as on SIGTERM, when standard input reaches its end: a parent that holds the other end of a pipe takes the server with it however it exits.")
    var exitWithStdin = false

    func validate() throws {
        guard ListenAddress(listen) != nil else {
            throw ValidationError("--listen takes HOST:PORT (for example 127.0.0.1:8420) or unix:PATH (an absolute path of at most \(UnixSocketAddress.longestPath) bytes)")
        }
        if let metricsListen, ListenAddress(metricsListen) == nil {
            throw ValidationError("--metrics-listen takes HOST:PORT or unix:PATH, as --listen does")
        }
        guard shareRate >= 0 else { throw ValidationError("--share-rate must be 0 (no limit) or more") }
        guard maxJsonBytes >= 1024 else { throw ValidationError("--max-json-bytes must be at least 1024") }
        guard maxHeaderBytes >= 1024 else { throw ValidationError("--max-header-bytes must be at least 1024") }
        guard maxConnections >= 1 else { throw ValidationError("--max-connections must be at least 1") }
        guard accountRate >= 0 else { throw ValidationError("--account-rate must be 0 (no limit) or more") }
        for (name, value) in [("--idle-timeout", idleTimeout), ("--write-timeout", writeTimeout)] {
            guard let d = DurationText.parse(value), d >= .seconds(1) else {
                throw ValidationError("\(name) takes a number and s, m, h or d of at least 1s (for example 120s), not '\(value)'")
            }
        }
        guard (tlsCert == nil) == (tlsKey == nil) else { throw ValidationError("--tls-cert and --tls-key go together") }
        guard loginFailures >= 0 else { throw ValidationError("--login-failures must be 0 (no limit) or more") }
        guard DurationText.parse(tokenLifetime) != nil else { throw ValidationError("--token-lifetime takes a number and s, m, h or d (for example 90d), not '\(tokenLifetime)'") }
        guard maxUploadBytes > 0 else { throw ValidationError("--max-upload-bytes must be positive") }
        guard Logger.Level(rawValue: logLevel) != nil else { throw ValidationError("unknown log level '\(logLevel)'") }
        guard (0...3600).contains(authCacheSeconds) else { throw ValidationError("--auth-cache-seconds must be 0 to 3600") }
        guard DurationText.parse(keepVersions) != nil else { throw ValidationError("--keep-versions takes a number and s, m, h or d (for example 30d), not '\(keepVersions)'") }
    }

    func run() async throws {
        guard let address = ListenAddress(listen) else { throw Failure("--listen: \(listen) is not an address") }
        var logger = Logger(label: "ubiq.server")
        logger.logLevel = Logger.Level(rawValue: logLevel) ?? .info
        // A SQLite database is served by one process: its folder is locked first. PostgreSQL
        // is shared by the replicas of a deployment.
        if let folder = data.sqliteFolder {
            if folder == data.directory { try data.createDirectory() }
            switch DataFolderLock.acquire(dataDirectory: folder) {
            case .acquired: break
            case .heldBy(let pid):
                throw Failure("another ubiq-server (pid \(pid)) serves the data folder \(folder)")
            case .failed(let code):
                throw Failure("cannot lock the data folder \(folder): \(String(cString: strerror(code)))")
            }
        }
        let opened = try await data.openStorage(logger: logger)
        let storage = opened.storage
        let tls: TLSCertificates?
        do {
            tls = try tlsCert.map { try TLSCertificates(certificateFile: $0, keyFile: tlsKey ?? "") }
        } catch {
            throw Failure("cannot use --tls-cert \(tlsCert ?? "") with --tls-key \(tlsKey ?? ""): \(error)")
        }
        // A socket is made with the process's umask: only its user may connect to it (0700).
        if case .unixSocket = address { umask(0o077) }
        // The process's metrics, served at /metrics.
        let metrics = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: metrics))
        let metricsAddress = metricsListen.flatMap(ListenAddress.init)
        let hub = ChangeHub(announcer: opened.announcer)
        let server = SyncServer(
            storage: storage,
            configuration: .init(
                maxUploadBytes: maxUploadBytes, maxJSONBytes: maxJsonBytes, maxBatchBytes: 4 * maxJsonBytes,
                recentAnswers: .seconds(authCacheSeconds), metricsOnOwnAddress: metricsAddress != nil,
                shareFetchesPerMinute: shareRate, loginFailuresPerMinute: loginFailures,
                tokenLifetime: DurationText.parse(tokenLifetime) ?? TokenPolicy.defaultLifetime,
                connections: ConnectionLimits(
                    maxConnections: maxConnections, maxHeaderBytes: maxHeaderBytes,
                    idleTimeout: DurationText.parse(idleTimeout) ?? .seconds(120), writeTimeout: DurationText.parse(writeTimeout) ?? .seconds(120)),
                accountRequestsPerMinute: accountRate),
            hub: hub, metrics: metrics)
        let watchStdin = exitWithStdin
        let app = try server.makeApplication(address: address, tls: tls, logger: logger) { bound in
            // Tests and scripts wait for this line (and read the port from it when listening on 0).
            print("ubiq-server listening on \(bound)")
            fflush(nil)
            // Only now: the group traps SIGTERM before it starts its services, so the signal
            // this raises is always the graceful way out, even when the input has ended already.
            if watchStdin { StandardInputWatch.start() }
        }
        let retention = VersionRetention(service: server.service, keep: DurationText.parse(keepVersions) ?? .seconds(30 * 86400), logger: logger)
        var services: [any Service] = [app, retention, AccountCleanup(service: server.service, logger: logger)]
        if let tls { services.append(CertificateReload(certificates: tls, logger: logger)) }
        if opened.announcer != nil { services.append(AnnouncementListener(hub: hub)) }
        if let bucket = opened.bucket { services.append(S3Leftovers(bucket: bucket, logger: logger)) }
        if let metricsAddress {
            services.append(try server.makeMetricsApplication(address: metricsAddress, logger: logger) { bound in
                print("ubiq-server metrics on \(bound)")
                fflush(nil)
            })
        }
        var configuration = ServiceGroupConfiguration(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        // A graceful shutdown waits for the requests in flight, but not for a client that
        // stopped reading a download or sending an upload: it would hold the process (and
        // whatever waits for it to exit) for as long as that client likes. Acknowledged
        // writes are committed before their answer, so cutting the rest loses none.
        configuration.maximumGracefulShutdownDuration = .seconds(10)
        let group = ServiceGroup(configuration: configuration)
        do {
            try await group.run()
        } catch {
            await opened.close()
            throw Failure("cannot serve on \(listen): \(error)")
        }
        await opened.close()
    }
}

/// Reads the TLS certificate and key again on each SIGHUP (`TLSCertificates.reload`).
struct CertificateReload: Service {
    let certificates: TLSCertificates
    let logger: Logger

    func run() async throws {
        let signals = await UnixSignalsSequence(trapping: .sighup)
        try await cancelWhenGracefulShutdown {
            for await _ in signals {
                do {
                    try certificates.reload()
                    logger.notice("TLS certificate read again", metadata: ["file": "\(certificates.certificateFile)"])
                    // Scripts that renew the certificate wait for this line.
                    print("ubiq-server reloaded \(certificates.certificateFile)")
                    fflush(nil)
                } catch {
                    logger.error("cannot read the TLS certificate again; the one in use stays", metadata: ["error": "\(error)"])
                }
            }
        }
    }
}

/// Raises SIGTERM once standard input ends. The read blocks, so it runs on a thread of its own,
/// never on the cooperative pool; the signal takes the server's usual graceful way out.
enum StandardInputWatch {
    static func start() {
        let thread = Thread {
            var byte: UInt8 = 0
            while true {
                let n = read(STDIN_FILENO, &byte, 1)
                if n == 0 || (n < 0 && errno != EINTR) { break }
            }
            kill(getpid(), SIGTERM)
        }
        thread.name = "stdin-watch"
        thread.start()
    }
}

struct Account: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "account",
        abstract: "Manage accounts.", subcommands: [Add.self, List.self, Remove.self, Tokens.self, Revoke.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "add", abstract: "Create an account.")
        @OptionGroup var data: DataOption
        @Argument(help: "Account name (1-64 of A-Z a-z 0-9 . _ - @).") var name: String
        @Flag(name: .long, help: "Read the password from the first line of standard input.") var passwordStdin = false

        func run() async throws {
            let password = try readPassword(stdin: passwordStdin)
            guard !password.isEmpty else { throw Failure("the password is empty") }
            try await data.withStorage { opened in
                _ = try await opened.storage.accounts.addAccount(name: name, passwordHash: try Credentials.hashPassword(password))
            }
            print("created account \(name)")
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List accounts.")
        @OptionGroup var data: DataOption
        @Flag(name: .long, help: "Show each account's identity after its name (what GET /v1/whoami answers).") var identities = false
        func run() async throws {
            try await data.withStorage { opened in
                let accounts = opened.storage.accounts
                for account in try await accounts.accounts() {
                    print(identities ? "\(account.name) \(try await accounts.identity(of: account))" : account.name)
                }
            }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "remove", abstract: "Remove an account with its containers, versions, shares and tokens, and the contents no other account holds.")
        @OptionGroup var data: DataOption
        @Argument var name: String
        func run() async throws {
            let what = try await data.withStorage { opened in
                let removal = try await opened.storage.accounts.removeAccount(name: name)
                let what = [
                    counted(removal.containers, "container"), counted(removal.items, "item"), counted(removal.earlierVersions, "earlier version"),
                    counted(removal.shares, "share"), counted(removal.tokens, "token"),
                ].joined(separator: ", ")
                let contents = "\(counted(removal.contents, "content")) (\(removal.contentBytes) bytes)"
                // Only a process that holds the data folder knows every writer of the blob
                // store: with a server running (or replicas sharing PostgreSQL), the servers
                // delete them (within seconds).
                guard let folder = opened.exclusiveFolder, case .acquired = DataFolderLock.acquire(dataDirectory: folder) else {
                    return what + "; the running server deletes \(contents)"
                }
                _ = try await SyncService(storage: opened.storage).deletePendingBlobs()
                return what + "; deleted \(contents)"
            }
            print("removed account \(name): \(what)")
        }
    }

    struct Tokens: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "tokens", abstract: "List an account's login tokens: ID, device, created, last use, expiry (UTC).")
        @OptionGroup var data: DataOption
        @Argument var name: String
        func run() async throws {
            let tokens = try await data.withStorage { try await $0.storage.accounts.tokens(ofAccount: name) }
            print(["ID", "DEVICE", "CREATED", "LAST USE", "EXPIRES"].joined(separator: "\t"))
            for t in tokens {
                print([t.id, t.device ?? "-", utc(t.created), utc(t.used), utc(t.expires)].joined(separator: "\t"))
            }
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "revoke",
            abstract: "Revoke login tokens of an account (IDs from `account tokens`), or all of them. A running server refuses them within --auth-cache-seconds.")
        @OptionGroup var data: DataOption
        @Argument var name: String
        @Argument(help: "Token IDs.") var ids: [String] = []
        @Flag(name: .long, help: "Revoke every token of the account.") var all = false

        func validate() throws {
            guard all != !ids.isEmpty else { throw ValidationError("name token IDs, or --all") }
        }

        func run() async throws {
            let revoked = try await data.withStorage { try await $0.storage.accounts.revokeTokens(ofAccount: name, ids: all ? nil : Set(ids)) }
            let missing = Set(ids).subtracting(revoked.map(\.id))
            for t in revoked { print("revoked \(t.id) (\(t.device ?? "-"))") }
            if !missing.isEmpty { throw Failure("\(name) has no token \(missing.sorted().joined(separator: ", "))") }
        }
    }
}

/// "1 item", "3 items".
func counted(_ n: Int, _ noun: String) -> String { "\(n) \(noun)\(n == 1 ? "" : "s")" }

/// A timestamp as `2026-11-28T04:20:00Z`.
func utc(_ t: Timestamp) -> String {
    Date(timeIntervalSince1970: Double(t) / 1e9).formatted(.iso8601)
}

func readPassword(stdin: Bool) throws -> String {
    if stdin {
        guard let line = readLine(strippingNewline: true) else { throw Failure("no password on standard input") }
        return line
    }
    guard isatty(0) != 0 else { throw Failure("standard input is not a terminal: pass --password-stdin") }
    guard let p = getpass("Password: ") else { throw Failure("no password given") }
    return String(cString: p)
}

extension UbiqServer {
    /// Parses and runs a command; returns its exit code (0, 1 or 2; docs/CLI.md).
    static func runMain() async -> Int32 {
        do {
            var command = try parseAsRoot(DataOption.movedAfterSubcommand(Array(CommandLine.arguments.dropFirst())))
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
            return 0
        } catch {
            return Failure.exitCode(for: error, command: UbiqServer.self)
        }
    }
}
