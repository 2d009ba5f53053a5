import ArgumentParser
import DataFolderLock
import Foundation
import ServerStorage

/// `ubiq-server migrate`: copies a server kept in SQLite and a blob folder (the embedded
/// default) into PostgreSQL and a bucket (or another folder), and checks the copy
/// (`StorageCopy`). The source's server must be stopped; the database must be empty.
struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Copy this server's accounts, containers, change log, key-value stores, shares and contents into PostgreSQL and an S3 bucket (or a folder), and verify the copy.",
        discussion: """
            The source is what --data, --metadata and --blobs name (SQLite and a folder); stop its server first. \
            The target database must be empty. Contents are copied first and checked against their digests; \
            a run cut short can run again. Devices keep their logins and cursors: point them (or the load balancer) \
            at servers started on the target.
            """)

    @OptionGroup var data: DataOption

    @Option(name: .long, help: "The target database: postgres://USER@HOST[:PORT]/DATABASE (the password from PGPASSWORD or --to-postgres-password-file).")
    var toMetadata: String

    @Option(name: .long, help: "The first line of this file is the target database's password.")
    var toPostgresPasswordFile: String?

    @Option(name: .long, help: "Where the contents go: s3://BUCKET?endpoint=…[&region=…][&path-style=…][&prefix=…] (keys from the environment or --to-s3-credentials-file) or dir:DIR.")
    var toBlobs: String

    @Option(name: .long, help: "A file in the AWS credentials form with the target bucket's keys.")
    var toS3CredentialsFile: String?

    var target: DataOption {
        var target = DataOption()
        target.data = data.directory
        target.metadata = toMetadata
        target.postgresPasswordFile = toPostgresPasswordFile
        target.blobs = toBlobs
        target.s3CredentialsFile = toS3CredentialsFile
        return target
    }

    func validate() throws {
        guard case .sqlite? = try? data.locations().metadata else {
            throw ValidationError("migrate copies from SQLite (--data or --metadata sqlite:DIR); the source named is not")
        }
        guard case .postgres? = try? target.locations().metadata else {
            throw ValidationError("--to-metadata takes postgres://USER@HOST[:PORT]/DATABASE, not '\(toMetadata)'")
        }
        do { try target.validate() } catch let error as ValidationError {
            // The target's options, named as this command names them.
            var message = error.message
            for option in ["--metadata", "--blobs", "--postgres-password-file", "--s3-credentials-file"] {
                message = message.replacingOccurrences(of: option, with: "--to-" + option.dropFirst(2))
            }
            throw ValidationError(message)
        }
    }

    func run() async throws {
        guard let folder = data.sqliteFolder else { throw Failure("migrate copies from SQLite") }
        guard FileManager.default.fileExists(atPath: folder + "/metadata.sqlite") else {
            throw Failure("no server data in \(folder) (metadata.sqlite is missing)")
        }
        switch DataFolderLock.acquire(dataDirectory: folder) {
        case .acquired: break
        case .heldBy(let pid): throw Failure("a server (pid \(pid)) is using \(folder): stop it first, so that nothing changes during the copy")
        case .failed(let code): throw Failure("cannot lock \(folder): \(String(cString: strerror(code)))")
        }
        try await data.withStorage { source in
            try await target.withStorage { target in
                guard let exporter = source.storage.metadata as? any MetadataExporting,
                      let importer = target.storage.metadata as? any MetadataImporting & MetadataExporting
                else { throw Failure("this pair of stores cannot be copied") }
                let report: StorageCopy.Report
                do {
                    report = try await StorageCopy.run(
                        metadata: exporter, into: importer, blobs: source.storage.blobs, into: target.storage.blobs,
                        // Written at once, also into a pipe or a log: the copy may take minutes.
                        progress: { FileHandle.standardOutput.write(Data(($0 + "\n").utf8)) })
                } catch let error as CopyFailed {
                    throw Failure(error.description)
                } catch let error as ImportRefused {
                    throw Failure(error.description)
                }
                let d = report.dump
                print("""
                    copied and verified: \(counted(d.accounts.count, "account")), \(counted(d.tokens.count, "token")), \
                    \(counted(d.containers.count, "container")), \(counted(d.items.count, "item")), \(d.changes.count) change-log entries, \
                    \(counted(d.earlierVersions.count, "earlier version")), \(d.keyValues.count) key-value entries, \
                    \(counted(d.shares.count, "share")); \(counted(report.contentsCopied, "content")) (\(report.bytesCopied) bytes) copied, \
                    \(report.contentsPresent) already there
                    """)
            }
        }
    }
}
