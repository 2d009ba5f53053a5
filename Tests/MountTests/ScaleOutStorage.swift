import Foundation
import PostgresStorage
import S3Client
import TestSupport

/// A database on the tests' PostgreSQL cluster and a bucket on their S3 server (SeaweedFS), as
/// `ubiq-server` names them: what replicas share, and where a migration copies to.
struct ScaleOutStorage {
    let cluster: PostgresTestCluster
    let database: PostgresConfiguration
    let bucket: S3TestBucket
    /// `--metadata`'s value.
    let metadata: String
    /// `--blobs`'s value: the bucket, each content under `blobs/` and its digest.
    let blobs: String
    /// The bucket's keys, in the AWS credentials form.
    let keysFile: String

    /// `--metadata` and its password's file.
    var metadataArguments: [String] { ["--metadata", metadata, "--postgres-password-file", cluster.passwordFile] }
    /// `--blobs` and its keys' file.
    var blobArguments: [String] { ["--blobs", blobs, "--s3-credentials-file", keysFile] }
    var serverArguments: [String] { metadataArguments + blobArguments }

    static func make(in work: TempDirectory, label: String) async throws -> ScaleOutStorage {
        let cluster = try await PostgresTestCluster.shared()
        let database = try await cluster.makeDatabase()
        let bucket = try await S3TestServer.makeBucket(label)
        let s3 = bucket.configuration
        let keysFile = work.path + "/s3-keys"
        try "[default]\naws_access_key_id = \(s3.credentials.accessKeyID)\naws_secret_access_key = \(s3.credentials.secretAccessKey)\n"
            .write(toFile: keysFile, atomically: true, encoding: .utf8)
        return ScaleOutStorage(
            cluster: cluster, database: database, bucket: bucket, metadata: "postgres://postgres@127.0.0.1:\(cluster.port)/\(database.database)",
            blobs: "s3://\(s3.bucket)?endpoint=\(s3.endpoint.absoluteString)&region=\(s3.region)&prefix=blobs/", keysFile: keysFile)
    }

    func remove() async {
        try? await bucket.remove()
        try? await cluster.dropDatabase(database)
    }
}
