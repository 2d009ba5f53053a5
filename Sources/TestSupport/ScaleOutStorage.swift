import Foundation
import PostgresStorage
import S3Client

/// A database of its own on the tests' PostgreSQL cluster and a bucket of its own on their S3
/// server (SeaweedFS), as `ubiq-server` names them: what replicas share, and where a migration
/// copies to.
public struct ScaleOutStorage: Sendable {
    public let cluster: PostgresTestCluster
    public let database: PostgresConfiguration
    public let bucket: S3TestBucket
    /// `--metadata`'s value.
    public let metadata: String
    /// `--blobs`'s value: the bucket, each content under `blobs/` and its digest.
    public let blobs: String
    /// The bucket's keys, in the AWS credentials form, in a folder of its own.
    public let keysFile: String
    let folder: TempDirectory

    /// `--metadata` and its password's file.
    public var metadataArguments: [String] { ["--metadata", metadata, "--postgres-password-file", cluster.passwordFile] }
    /// `--blobs` and its keys' file.
    public var blobArguments: [String] { ["--blobs", blobs, "--s3-credentials-file", keysFile] }
    public var serverArguments: [String] { metadataArguments + blobArguments }

    public static func make(label: String) async throws -> ScaleOutStorage {
        let cluster = try await PostgresTestCluster.shared()
        let database = try await cluster.makeDatabase()
        let bucket: S3TestBucket
        let folder: TempDirectory
        do {
            bucket = try await S3TestServer.makeBucket(label)
            folder = try TempDirectory("ubiq-s3-keys")
        } catch {
            try? await cluster.dropDatabase(database)
            throw error
        }
        // Readable by the servers the tests start, which run as the tests' user.
        let s3 = bucket.configuration
        let keysFile = folder.path + "/s3-keys"
        try "[default]\naws_access_key_id = \(s3.credentials.accessKeyID)\naws_secret_access_key = \(s3.credentials.secretAccessKey)\n"
            .write(toFile: keysFile, atomically: true, encoding: .utf8)
        return ScaleOutStorage(
            cluster: cluster, database: database, bucket: bucket, metadata: "postgres://postgres@127.0.0.1:\(cluster.port)/\(database.database)",
            blobs: "s3://\(s3.bucket)?endpoint=\(s3.endpoint.absoluteString)&region=\(s3.region)&prefix=blobs/", keysFile: keysFile, folder: folder)
    }

    /// Removes the bucket, the database and the keys.
    public func remove() async {
        try? await bucket.remove()
        try? await cluster.dropDatabase(database)
        folder.remove()
    }
}
