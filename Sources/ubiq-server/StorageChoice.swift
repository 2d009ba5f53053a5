import Foundation
import Logging
import PostgresStorage
import ServerStorage
import SyncService

/// Where the server keeps metadata (`--metadata`) and content (`--blobs`): the embedded
/// default, SQLite and a folder in the data folder, or PostgreSQL, which several server
/// processes (replicas) can share. A PostgreSQL password never comes from the command line,
/// which every user of the machine can read in the process list: `PGPASSWORD` or
/// `--postgres-password-file`.
enum MetadataLocation: Equatable {
    /// The folder holding `metadata.sqlite`.
    case sqlite(folder: String)
    /// A `postgres://USER@HOST[:PORT]/DATABASE[?sslmode=…&pool_max=…]` URL, checked by
    /// `PostgresConfiguration`.
    case postgres(url: String)

    static func parse(_ text: String) -> MetadataLocation? {
        if text.hasPrefix("sqlite:"), text.count > "sqlite:".count { return .sqlite(folder: String(text.dropFirst("sqlite:".count))) }
        if text.hasPrefix("postgres://") || text.hasPrefix("postgresql://") { return .postgres(url: text) }
        return nil
    }
}

enum BlobLocation: Equatable {
    case folder(String)

    static func parse(_ text: String) -> BlobLocation? {
        if text.hasPrefix("dir:"), text.count > "dir:".count { return .folder(String(text.dropFirst("dir:".count))) }
        return nil
    }
}

/// The storage a server or an account command opened, and what goes with it.
struct OpenedStorage {
    let storage: ServerStorage
    /// Other processes of the deployment share the database: their commits are announced.
    let announcer: (any CommitAnnouncer)?
    /// The SQLite data folder this process must hold alone, if it uses one.
    let exclusiveFolder: String?
    let close: @Sendable () async -> Void
}

extension PostgresAnnouncements: CommitAnnouncer {}

extension DataOption {
    func postgresConfiguration(_ url: String) throws -> PostgresConfiguration {
        do {
            let source: PostgresConfiguration.PasswordSource =
                postgresPasswordFile.map { .file($0) } ?? .environment(ProcessInfo.processInfo.environment)
            return try PostgresConfiguration(url: url, password: source)
        } catch {
            throw Failure("--metadata: \(error)")
        }
    }

    /// The folder of the SQLite database in use, nil with PostgreSQL.
    var sqliteFolder: String? {
        switch metadata.flatMap(MetadataLocation.parse) ?? .sqlite(folder: directory) {
        case .sqlite(let folder): folder
        case .postgres: nil
        }
    }

    /// Opens what `--metadata` and `--blobs` name (by default SQLite and a folder in the data
    /// folder, which is created).
    func openStorage(logger: Logger = Logger(label: "ubiq.server")) async throws -> OpenedStorage {
        let metadataLocation = metadata.flatMap(MetadataLocation.parse) ?? .sqlite(folder: directory)
        let blobLocation = blobs.flatMap(BlobLocation.parse) ?? .folder(directory + "/blobs")
        if case .sqlite(let folder) = metadataLocation, folder == directory { try createDirectory() }
        if case .folder(let folder) = blobLocation, folder == directory + "/blobs" { try createDirectory() }
        let blobStore: any BlobStore
        switch blobLocation {
        case .folder(let folder): blobStore = try FileBlobStore(root: folder)
        }
        switch metadataLocation {
        case .sqlite(let folder):
            let store = try SQLiteMetadataStore(path: folder + "/metadata.sqlite")
            let storage = ServerStorage(accounts: store, metadata: store, changes: store, keyValues: store, blobs: blobStore, shares: store)
            return OpenedStorage(storage: storage, announcer: nil, exclusiveFolder: folder, close: {})
        case .postgres(let url):
            let configuration = try postgresConfiguration(url)
            let store: PostgresMetadataStore
            do { store = try await PostgresMetadataStore.start(configuration, logger: logger) } catch {
                throw Failure("cannot use the PostgreSQL database \(configuration): \(String(reflecting: error))")
            }
            return OpenedStorage(
                storage: .postgres(store, blobs: blobStore), announcer: PostgresAnnouncements(store: store, configuration: configuration, logger: logger),
                exclusiveFolder: nil, close: { await store.shutdown() })
        }
    }
}
