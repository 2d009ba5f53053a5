import Foundation
import ItemModel
import Logging
import PostgresNIO
import ServerStorage

/// Accounts, metadata, the change log, the key-value stores and the shares in PostgreSQL: the
/// same rules as `SQLiteMetadataStore`, checked by the same conformance suite.
///
/// Lifecycle: `start(_:)` makes the connection pool, starts the pool's `run()` in a task the
/// store owns, and brings the schema up to date (`PostgresSchema`); `shutdown()` ends that task,
/// which closes every connection. Calls after `shutdown()` fail. The owner (the server's
/// composition root, a test) calls `shutdown()` once it makes no more calls.
///
/// Durability: every session sets `synchronous_commit = on`, so a COMMIT returns only once its
/// WAL is flushed to disk; a write call returns after its COMMIT. (`fsync` is the server's
/// setting, on by default, and must stay on.)
///
/// Concurrency: every write is one transaction at READ COMMITTED that first locks its
/// container's row (`lockContainer`), then reads its base revision and writes. Writers of one
/// container so take turns, as SQLite's single writer makes them, and of concurrent updates
/// from one base exactly one wins. The change-log cursor is a counter in that locked row
/// (`PostgresMetadataStore+ChangeLog`).
public final class PostgresMetadataStore: AccountStore, MetadataStore, ChangeLog, KeyValueStore, ShareStore, Sendable {
    let client: PostgresClient
    let logger: Logger
    let now: @Sendable () -> Timestamp
    private let running: Task<Void, Never>

    private init(client: PostgresClient, logger: Logger, now: @escaping @Sendable () -> Timestamp) {
        self.client = client
        self.logger = logger
        self.now = now
        running = Task { await client.run() }
    }

    /// Connects, migrates the schema and returns the running store. Two processes starting
    /// at once on one database both come up: migrations take turns on an advisory lock.
    public static func start(
        _ configuration: PostgresConfiguration, logger: Logger = Logger(label: "ubiq.postgres"),
        now: @escaping @Sendable () -> Timestamp = WallClock.now
    ) async throws -> PostgresMetadataStore {
        // One connection of its own first: a server nobody answers at, or a refused password,
        // fails here within the connect timeout, with its own error; the pool would retry until
        // its circuit breaker trips (a minute and more) and then say only that.
        let probe = try await PostgresConnection.connect(configuration: try connectionConfiguration(configuration), id: 0, logger: logger)
        try? await probe.close()
        let store = PostgresMetadataStore(client: PostgresClient(configuration: clientConfiguration(configuration)), logger: logger, now: now)
        do {
            _ = try await store.client.withConnection { connection in try await PostgresSchema.migrate(connection, logger: logger) }
        } catch {
            await store.shutdown()
            throw error
        }
        return store
    }

    /// Ends the pool's task and closes its connections. Idempotent.
    public func shutdown() async {
        running.cancel()
        await running.value
    }

    /// One connection of its own (the announcements' listener), as the pool's are made.
    static func connectionConfiguration(_ c: PostgresConfiguration) throws -> PostgresConnection.Configuration {
        let tls: PostgresConnection.Configuration.TLS =
            switch c.tls {
            case .disable: .disable
            case .prefer: .prefer(try .init(configuration: .makeClientConfiguration()))
            case .require: .require(try .init(configuration: .makeClientConfiguration()))
            }
        var configuration = PostgresConnection.Configuration(host: c.host, port: c.port, username: c.user, password: c.password, database: c.database, tls: tls)
        configuration.options.connectTimeout = TimeAmount.seconds(Int64(c.connectTimeout.components.seconds))
        return configuration
    }

    static func clientConfiguration(_ c: PostgresConfiguration) -> PostgresClient.Configuration {
        let tls: PostgresClient.Configuration.TLS =
            switch c.tls {
            case .disable: .disable
            case .prefer: .prefer(.makeClientConfiguration())
            case .require: .require(.makeClientConfiguration())
            }
        var configuration = PostgresClient.Configuration(
            host: c.host, port: c.port, username: c.user, password: c.password, database: c.database, tls: tls)
        configuration.options.maximumConnections = c.maximumConnections
        configuration.options.connectTimeout = c.connectTimeout
        // An acknowledged write is on disk: whatever the server's default, this store's
        // commits wait for their WAL flush. Text travels as UTF-8 whatever the server's
        // default encoding, as the names, ids and paths are.
        configuration.options.additionalStartupParameters = [("synchronous_commit", "on"), ("client_encoding", "UTF8")]
        return configuration
    }

    // MARK: Transactions

    /// One write transaction: BEGIN, the body, COMMIT (ROLLBACK when it throws). What
    /// PostgreSQL refuses becomes a refusal of storage where SQLite's store makes it one.
    func write<T: Sendable>(_ body: (Transaction) async throws -> T) async throws -> T {
        try await transaction(begin: "BEGIN", body)
    }

    /// Several reads that must see one snapshot (a version with the rows it covers).
    func readSnapshot<T: Sendable>(_ body: (Transaction) async throws -> T) async throws -> T {
        try await transaction(begin: "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", body)
    }

    private func transaction<T: Sendable>(begin: PostgresQuery, _ body: (Transaction) async throws -> T) async throws -> T {
        do {
            return try await client.withConnection { connection in
                let tx = Transaction(connection: connection, logger: logger)
                try await tx.run(begin)
                do {
                    let value = try await body(tx)
                    try await tx.run("COMMIT")
                    return value
                } catch {
                    // A connection that died takes its transaction with it; the pool drops it.
                    _ = try? await tx.run("ROLLBACK")
                    throw error
                }
            }
        } catch let error as PSQLError {
            throw Self.refusal(error) ?? error
        }
    }

    /// One statement on its own (autocommit): a read that needs no snapshot beyond its own.
    func rows(_ query: PostgresQuery) async throws -> [PostgresRow] {
        do {
            return try await client.query(query, logger: logger).collect()
        } catch let error as PSQLError {
            throw Self.refusal(error) ?? error
        }
    }

    /// The refusals every write may meet, as SQLite's store makes them (`SQLiteMetadataStore.write`).
    /// Unique violations are mapped where they are met (`uniqueViolation(of:)`): which
    /// refusal a clash is depends on the call.
    static func refusal(_ error: PSQLError) -> StorageError? {
        guard error.code == .server, let state = error.serverInfo?[.sqlState] else { return nil }
        switch PostgresError.Code(raw: state) {
        case .diskFull:
            // The client's to wait out (507), not a server fault.
            return .diskFull
        case .foreignKeyViolation:
            // A row this request was authorised by went away meanwhile: rows are only ever
            // deleted with their account (`ubiq-server account remove` beside a running server).
            return .accountNotFound("")
        default:
            return nil
        }
    }

    /// The name of the unique constraint or index `error` violated, if that is what it is.
    static func uniqueViolation(of error: any Error) -> String? {
        guard let error = error as? PSQLError, error.code == .server,
              error.serverInfo?[.sqlState] == PostgresError.Code.uniqueViolation.raw
        else { return nil }
        return error.serverInfo?[.constraintName]
    }
}

/// A connection inside one open transaction.
struct Transaction {
    let connection: PostgresConnection
    let logger: Logger

    func rows(_ query: PostgresQuery) async throws -> [PostgresRow] {
        try await connection.query(query, logger: logger).collect()
    }

    /// Runs a statement; returns how many rows it returned (`RETURNING 1` counts changed rows).
    @discardableResult
    func run(_ query: PostgresQuery) async throws -> Int {
        try await connection.query(query, logger: logger).collect().count
    }

    /// `body` inside a savepoint: what it did is undone when it throws, and the transaction
    /// goes on (a failed statement otherwise aborts the whole transaction).
    func savepoint<T>(_ body: () async throws -> T) async throws -> T {
        try await run("SAVEPOINT one_of_many")
        do {
            let value = try await body()
            try await run("RELEASE SAVEPOINT one_of_many")
            return value
        } catch {
            try await run("ROLLBACK TO SAVEPOINT one_of_many")
            throw error
        }
    }
}

extension PostgresRow {
    /// The column `name` decoded as `T`.
    func get<T: PostgresDecodable>(_ name: String, as type: T.Type = T.self) throws -> T {
        try makeRandomAccess()[name].decode(T.self)
    }
}

extension ServerStorage {
    /// PostgreSQL for accounts, metadata, the change log, key-value stores and shares; `blobs`
    /// for contents.
    public static func postgres(_ store: PostgresMetadataStore, blobs: any BlobStore) -> ServerStorage {
        ServerStorage(accounts: store, metadata: store, changes: store, keyValues: store, blobs: blobs, shares: store)
    }
}

extension PostgresMetadataStore {
    /// The migrations the database has, as `schema_migrations` records them: each version
    /// with the time it was applied.
    public func appliedMigrations() async throws -> [(version: Int, applied: Timestamp)] {
        try await rows("SELECT version, applied FROM schema_migrations ORDER BY version").map {
            let (version, applied) = try $0.decode((Int32, Int64).self)
            return (Int(version), applied)
        }
    }

    /// The newest schema version this build knows.
    public static var schemaVersion: Int { PostgresSchema.latestVersion }
}
