import Foundation

/// Where a bucket is and how to reach it.
public struct S3Configuration: Sendable, Equatable {
    /// How the bucket is named in a request.
    public enum Addressing: Sendable, Equatable {
        /// `http://endpoint/bucket/key`: what most S3-compatible servers (SeaweedFS, MinIO) expect.
        case path
        /// `http://bucket.endpoint/key`: what AWS prefers.
        case virtualHosted
    }

    /// The service's address: scheme, host and optionally a port (`https://s3.eu-west-1.amazonaws.com`,
    /// `http://127.0.0.1:8333`). A path in it is not used.
    public var endpoint: URL
    public var region: String
    public var bucket: String
    public var addressing: Addressing
    public var credentials: S3Credentials

    public init(endpoint: URL, region: String, bucket: String, addressing: Addressing, credentials: S3Credentials) {
        self.endpoint = endpoint
        self.region = region
        self.bucket = bucket
        self.addressing = addressing
        self.credentials = credentials
    }

    /// The `Host` header and the start of every URL, for the bucket.
    var host: String {
        let name = endpoint.host ?? ""
        let base = endpoint.port.map { "\(name):\($0)" } ?? name
        switch addressing {
        case .path: return base
        case .virtualHosted: return "\(bucket).\(base)"
        }
    }

    /// The encoded path of `key` in the bucket (of the bucket itself for nil).
    func path(of key: String?) -> String {
        switch addressing {
        case .path: return "/" + S3Path.encode(bucket, keepingSlashes: false) + (key.map { "/" + S3Path.encode($0, keepingSlashes: true) } ?? "")
        case .virtualHosted: return "/" + (key.map { S3Path.encode($0, keepingSlashes: true) } ?? "")
        }
    }
}
