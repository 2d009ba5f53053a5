import Foundation
import Logging
import PostgresStorage
import S3BlobStore
import S3Client
import ServerStorage
import SyncService

/// Where the server keeps metadata (`--metadata`) and content (`--blobs`): the embedded
/// default, SQLite and a folder in the data folder, or PostgreSQL and an S3-compatible bucket,
/// which several server processes (replicas) can share.
///
/// Secrets never come from the command line, which every user of the machine can read in the
/// process list: a PostgreSQL password comes from `PGPASSWORD` or `--postgres-password-file`, S3
/// keys from `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`) or
/// `--s3-credentials-file`.
enum MetadataLocation: Equatable {
    /// The folder holding `metadata.sqlite`.
    case sqlite(folder: String)
    /// A `postgres://USER@HOST[:PORT]/DATABASE` URL, without a password.
    case postgres(url: String)

    static func parse(_ text: String) throws(StorageChoiceError) -> MetadataLocation {
        if text.hasPrefix("sqlite:") {
            let folder = String(text.dropFirst("sqlite:".count))
            guard !folder.isEmpty else { throw .invalid("--metadata sqlite: names a folder: sqlite:DIR") }
            return .sqlite(folder: folder)
        }
        if text.hasPrefix("postgres://") || text.hasPrefix("postgresql://") {
            guard let url = URLComponents(string: text), url.host?.isEmpty == false, url.path.count > 1 else {
                throw .invalid("--metadata takes postgres://USER@HOST[:PORT]/DATABASE, not '\(text)'")
            }
            guard url.password == nil else {
                throw .invalid("--metadata: the password goes in PGPASSWORD or --postgres-password-file, never on the command line")
            }
            return .postgres(url: text)
        }
        throw .invalid("--metadata takes sqlite:DIR or postgres://USER@HOST[:PORT]/DATABASE, not '\(text)'")
    }
}

enum BlobLocation: Equatable {
    case folder(String)
    case s3(S3Location)

    static func parse(_ text: String) throws(StorageChoiceError) -> BlobLocation {
        if text.hasPrefix("dir:") {
            let folder = String(text.dropFirst("dir:".count))
            guard !folder.isEmpty else { throw .invalid("--blobs dir: names a folder: dir:DIR") }
            return .folder(folder)
        }
        if text.hasPrefix("s3://") { return .s3(try S3Location.parse(text)) }
        throw .invalid("--blobs takes dir:DIR or s3://BUCKET?endpoint=URL[&region=R][&path-style=true|false][&prefix=P], not '\(text)'")
    }
}

/// `s3://BUCKET?endpoint=URL&region=R&path-style=true&prefix=P`.
struct S3Location: Equatable {
    var bucket: String
    var endpoint: URL
    var region: String
    /// `https://ENDPOINT/BUCKET/KEY` (true: what most S3-compatible servers want) or
    /// `https://BUCKET.ENDPOINT/KEY`.
    var pathStyle: Bool
    /// Put before each content's key (`PREFIX` + the digest's hex).
    var prefix: String

    static func parse(_ text: String) throws(StorageChoiceError) -> S3Location {
        guard let url = URLComponents(string: text), let bucket = url.host, !bucket.isEmpty, url.path.isEmpty || url.path == "/" else {
            throw .invalid("--blobs takes s3://BUCKET?endpoint=URL…, not '\(text)'")
        }
        var items: [String: String] = [:]
        for item in url.queryItems ?? [] {
            guard ["endpoint", "region", "path-style", "prefix"].contains(item.name) else {
                throw .invalid("--blobs: unknown parameter '\(item.name)' (endpoint, region, path-style, prefix); keys go in the environment or --s3-credentials-file")
            }
            items[item.name] = item.value ?? ""
        }
        guard let endpointText = items["endpoint"], let endpoint = URL(string: endpointText),
              endpoint.scheme == "http" || endpoint.scheme == "https", endpoint.host?.isEmpty == false
        else { throw .invalid("--blobs: s3:// needs endpoint=http(s)://HOST[:PORT] (the S3 server's address)") }
        let pathStyle: Bool
        switch items["path-style"] ?? "true" {
        case "true": pathStyle = true
        case "false": pathStyle = false
        case let other: throw .invalid("--blobs: path-style is true or false, not '\(other)'")
        }
        return S3Location(bucket: bucket, endpoint: endpoint, region: items["region"] ?? "us-east-1", pathStyle: pathStyle, prefix: items["prefix"] ?? "")
    }
}

struct StorageChoiceError: Error, CustomStringConvertible {
    let description: String
    static func invalid(_ message: String) -> StorageChoiceError { StorageChoiceError(description: message) }
}

/// S3 keys: from the environment, or from a file in the AWS shared credentials form
/// (`aws_access_key_id = …`, `aws_secret_access_key = …`, optionally `aws_session_token = …`;
/// the `[default]` profile, or the only one).
struct S3Keys: Equatable {
    var accessKey: String
    var secretKey: String
    var sessionToken: String?

    static func load(file: String?, environment: [String: String]) throws(StorageChoiceError) -> S3Keys {
        if let file {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                throw .invalid("--s3-credentials-file: cannot read \(file)")
            }
            var values: [String: String] = [:]
            var profile = "default"
            var profiles: Set<String> = []
            for line in text.split(whereSeparator: \.isNewline).map({ $0.trimmingCharacters(in: .whitespaces) }) {
                if line.hasPrefix("[") && line.hasSuffix("]") {
                    profile = String(line.dropFirst().dropLast())
                    profiles.insert(profile)
                    continue
                }
                guard !line.hasPrefix("#"), let equals = line.firstIndex(of: "=") else { continue }
                let key = line[..<equals].trimmingCharacters(in: .whitespaces)
                values[profile + "." + key] = line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            }
            let chosen = profiles.count == 1 ? profiles.first! : "default"
            guard let access = values[chosen + ".aws_access_key_id"], let secret = values[chosen + ".aws_secret_access_key"] else {
                throw .invalid("--s3-credentials-file: \(file) has no aws_access_key_id and aws_secret_access_key (profile [\(chosen)])")
            }
            return S3Keys(accessKey: access, secretKey: secret, sessionToken: values[chosen + ".aws_session_token"])
        }
        guard let access = environment["AWS_ACCESS_KEY_ID"], !access.isEmpty, let secret = environment["AWS_SECRET_ACCESS_KEY"], !secret.isEmpty else {
            throw .invalid("--blobs s3://…: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or give --s3-credentials-file")
        }
        return S3Keys(accessKey: access, secretKey: secret, sessionToken: environment["AWS_SESSION_TOKEN"].flatMap { $0.isEmpty ? nil : $0 })
    }
}

/// The storage a server or an account command opened, and what goes with it.
struct OpenedStorage {
    let storage: ServerStorage
    /// Other processes of the deployment share the database: their commits are announced.
    let announcer: (any CommitAnnouncer)?
    /// The SQLite data folder this process must hold alone, if it uses one.
    let exclusiveFolder: String?
    /// The bucket's store, whose unfinished uploads someone must take back (`S3Leftovers`).
    let bucket: S3BlobStore?
    let close: @Sendable () async -> Void
}

extension PostgresAnnouncements: CommitAnnouncer {}

extension DataOption {
    /// What `--metadata` and `--blobs` name, each checked once (by `validate`), with the
    /// defaults: SQLite and a folder in the data folder.
    func locations() throws(StorageChoiceError) -> (metadata: MetadataLocation, blobs: BlobLocation) {
        let metadataLocation = try metadata.map { text throws(StorageChoiceError) in try MetadataLocation.parse(text) } ?? .sqlite(folder: directory)
        let blobLocation = try blobs.map { text throws(StorageChoiceError) in try BlobLocation.parse(text) } ?? .folder(directory + "/blobs")
        if postgresPasswordFile != nil, case .sqlite = metadataLocation {
            throw .invalid("--postgres-password-file goes with --metadata postgres://…")
        }
        if s3CredentialsFile != nil, case .folder = blobLocation {
            throw .invalid("--s3-credentials-file goes with --blobs s3://…")
        }
        return (metadataLocation, blobLocation)
    }

    func postgresConfiguration(_ url: String) throws -> PostgresConfiguration {
        do {
            let source: PostgresConfiguration.PasswordSource =
                postgresPasswordFile.map { .file($0) } ?? .environment(ProcessInfo.processInfo.environment)
            return try PostgresConfiguration(url: url, password: source)
        } catch {
            throw Failure("--metadata: \(error)")
        }
    }

    func s3Configuration(_ location: S3Location) throws -> S3BlobStoreConfiguration {
        let keys = try S3Keys.load(file: s3CredentialsFile, environment: ProcessInfo.processInfo.environment)
        return S3BlobStoreConfiguration(
            endpoint: location.endpoint, region: location.region, bucket: location.bucket, pathStyle: location.pathStyle, keyPrefix: location.prefix,
            credentials: S3Credentials(accessKeyID: keys.accessKey, secretAccessKey: keys.secretKey, sessionToken: keys.sessionToken))
    }

    /// The folder of the SQLite database in use, nil with PostgreSQL.
    var sqliteFolder: String? {
        guard case .sqlite(let folder)? = try? locations().metadata else { return nil }
        return folder
    }

    /// Opens what `--metadata` and `--blobs` name (the data folder is created when a default
    /// lies in it).
    func openStorage(logger: Logger = Logger(label: "ubiq.server")) async throws -> OpenedStorage {
        let (metadataLocation, blobLocation) = try locations()
        if case .sqlite(let folder) = metadataLocation, folder == directory { try createDirectory() }
        if case .folder(let folder) = blobLocation, folder == directory + "/blobs" { try createDirectory() }
        let blobStore: any BlobStore
        var bucket: S3BlobStore?
        switch blobLocation {
        case .folder(let folder): blobStore = try FileBlobStore(root: folder)
        case .s3(let location):
            let store = try S3BlobStore(try s3Configuration(location))
            do { try await store.checkAccess() } catch {
                let reason = if case BlobStoreError.remote(let operation, let detail) = error { "\(operation): \(detail)" } else { "\(error)" }
                throw Failure("cannot use the bucket \(location.bucket) at \(location.endpoint.absoluteString) (\(reason))")
            }
            bucket = store
            blobStore = store
        }
        switch metadataLocation {
        case .sqlite(let folder):
            let store = try SQLiteMetadataStore(path: folder + "/metadata.sqlite")
            return OpenedStorage(storage: .sqlite(store, blobs: blobStore), announcer: nil, exclusiveFolder: folder, bucket: bucket, close: {})
        case .postgres(let url):
            let configuration = try postgresConfiguration(url)
            let store: PostgresMetadataStore
            do { store = try await PostgresMetadataStore.start(configuration, logger: logger) } catch {
                throw Failure("cannot use the PostgreSQL database \(configuration): \(String(reflecting: error))")
            }
            return OpenedStorage(
                storage: .postgres(store, blobs: blobStore), announcer: PostgresAnnouncements(store: store, configuration: configuration, logger: logger),
                exclusiveFolder: nil, bucket: bucket, close: { await store.shutdown() })
        }
    }
}
