import Foundation
import S3Client

/// Everything an `S3BlobStore` needs: where the bucket is, how blobs are named in it, how
/// uploads are cut.
public struct S3BlobStoreConfiguration: Sendable, Equatable {
    public var endpoint: URL
    public var region: String
    public var bucket: String
    /// `http://endpoint/bucket/key` when true (most S3-compatible servers), else
    /// `http://bucket.endpoint/key` (AWS's preference).
    public var pathStyle: Bool
    /// Put before every key: blobs are `PREFIX<sha256 hex>`, uploads on their way
    /// `PREFIX tmp/<random>`. Empty, or ending in `/` by convention (`ubiq/blobs/`).
    public var keyPrefix: String
    public var credentials: S3Credentials
    /// How much of an upload is held in memory: a blob up to this size is sent in one PUT at
    /// its commit, a larger one in parts of this size as it arrives. At least 5 MiB, S3's
    /// smallest part; at most 10,000 parts make a blob, so 8 MiB parts allow 78 GiB.
    public var partSize: Int
    /// The largest object copied in one request (S3: 5 GiB); a larger one is copied in parts.
    public var singleCopyLimit: Int64

    public static let minimumPartSize = 5 << 20

    public init(
        endpoint: URL, region: String, bucket: String, pathStyle: Bool, keyPrefix: String = "", credentials: S3Credentials,
        partSize: Int = 8 << 20, singleCopyLimit: Int64 = 5 << 30
    ) {
        self.endpoint = endpoint
        self.region = region
        self.bucket = bucket
        self.pathStyle = pathStyle
        self.keyPrefix = keyPrefix
        self.credentials = credentials
        self.partSize = partSize
        self.singleCopyLimit = singleCopyLimit
    }

    public var s3: S3Configuration {
        S3Configuration(endpoint: endpoint, region: region, bucket: bucket, addressing: pathStyle ? .path : .virtualHosted, credentials: credentials)
    }
}

public struct S3BlobStoreConfigurationError: Error, CustomStringConvertible {
    public var description: String
}
