import Foundation
import S3Client
import SyncAPI
import TestSupport
import Testing

/// `--metadata`, `--blobs` and the secrets that go with them, through the real `ubiq-server`.
@Suite struct StorageOptionTests {
    /// The environment of a child without any S3 keys, whatever the test process has.
    static var environmentWithoutKeys: [String: String] {
        ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("AWS_") }
    }

    @Test(arguments: [
        (["--blobs", "s3://b"], "endpoint="),
        (["--blobs", "s3://b?endpoint=http://127.0.0.1:9&colour=blue"], "unknown parameter 'colour'"),
        (["--blobs", "s3://b?endpoint=http://127.0.0.1:9&path-style=maybe"], "path-style is true or false"),
        (["--blobs", "s3://b?endpoint=ftp://127.0.0.1:9"], "endpoint="),
        (["--blobs", "s3://b?endpoint=http://127.0.0.1:9"], "AWS_ACCESS_KEY_ID"),
        (["--blobs", "s3://b?endpoint=http://127.0.0.1:9", "--s3-credentials-file", "/nonexistent/keys"], "cannot read /nonexistent/keys"),
        (["--blobs", "dir:/tmp/x", "--s3-credentials-file", "/tmp/keys"], "--s3-credentials-file goes with --blobs s3://"),
        (["--blobs", "ftp://x"], "--blobs takes dir:DIR or s3://"),
        (["--metadata", "postgres://ubiq:secret@127.0.0.1/db"], "never on the command line"),
        (["--metadata", "sqlite:/tmp/x", "--postgres-password-file", "/tmp/pw"], "--postgres-password-file goes with --metadata postgres://"),
    ])
    func aStorageOptionThatCannotWorkIsExit2WithItsReason(arguments: [String], reason: String) async throws {
        let data = try TempDirectory("ubiq-options")
        defer { data.remove() }
        for command in [["serve"], ["account", "list"]] {
            let result = try await run(
                Binaries.path("ubiq-server"), command + ["--data", data.path + "/data"] + arguments, environment: Self.environmentWithoutKeys)
            #expect(result.status == 2, "\(command) \(arguments): \(result)")
            #expect(result.stderr.contains(reason), "\(command) \(arguments): \(result.stderr)")
        }
    }

    /// Keys from `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`: an upload lands in the bucket
    /// under its digest.
    @Test func s3KeysComeFromTheEnvironment() async throws {
        let bucket = try await S3TestServer.makeBucket("options")
        let data = try TempDirectory("ubiq-options")
        defer { data.remove() }
        do {
            let s3 = bucket.configuration
            let blobs = ["--blobs", "s3://\(s3.bucket)?endpoint=\(s3.endpoint.absoluteString)&region=\(s3.region)"]
            var environment = Self.environmentWithoutKeys
            environment["AWS_ACCESS_KEY_ID"] = s3.credentials.accessKeyID
            environment["AWS_SECRET_ACCESS_KEY"] = s3.credentials.secretAccessKey
            let added = try await run(
                Binaries.path("ubiq-server"), ["account", "add", "alice", "--password-stdin", "--data", data.path] + blobs, stdin: "alice-pw\n",
                environment: environment)
            #expect(added.status == 0, "\(added)")
            let lifeline = Pipe()
            let server = try RunningProcess(
                Binaries.path("ubiq-server"), ["--data", data.path, "--listen", "127.0.0.1:0", "--exit-with-stdin"] + blobs,
                environment: environment, standardInput: lifeline)
            defer { server.stop() }
            let line = try await server.line("the server to listen") { $0.contains("listening on") }
            let port = try #require(server.output[line].split(separator: ":").last.flatMap { Int($0) })
            let alice = try await TestHTTP(baseURL: "http://127.0.0.1:\(port)").login("alice", "alice-pw")
            let content = Data("kept in the bucket".utf8)
            let digest = try await alice.uploadBlob(content)
            #expect(try await bucket.keys().contains(digest.hex))
            try lifeline.fileHandleForWriting.close()
            #expect(try await server.exitStatus() == 0)
        } catch {
            try? await bucket.remove()
            throw error
        }
        try await bucket.remove()
    }

    /// A store that cannot be used stops the server at its start, exit 1 with one line that
    /// says which and why, before it listens: a wrong secret, a bucket that is not there, an S3
    /// endpoint or a PostgreSQL server nobody answers at.
    @Test func aStoreThatCannotBeUsedFailsTheStartWithOneLine() async throws {
        let bucket = try await S3TestServer.makeBucket("options")
        let data = try TempDirectory("ubiq-options")
        defer { data.remove() }
        do {
            let s3 = bucket.configuration
            let endpoint = s3.endpoint.absoluteString
            let closedPort = try freeLoopbackPort()
            var keys = Self.environmentWithoutKeys
            keys["AWS_ACCESS_KEY_ID"] = s3.credentials.accessKeyID
            keys["AWS_SECRET_ACCESS_KEY"] = s3.credentials.secretAccessKey
            var wrongSecret = keys
            wrongSecret["AWS_SECRET_ACCESS_KEY"] = "not-the-secret"
            var password = Self.environmentWithoutKeys
            password["PGPASSWORD"] = "unused"
            let cases: [(arguments: [String], environment: [String: String], says: String)] = [
                (["--blobs", "s3://\(s3.bucket)?endpoint=\(endpoint)"], wrongSecret, "SignatureDoesNotMatch"),
                (["--blobs", "s3://no-such-bucket-\(closedPort)?endpoint=\(endpoint)"], keys, "NoSuchBucket"),
                (["--blobs", "s3://\(s3.bucket)?endpoint=http://127.0.0.1:\(closedPort)"], keys, "no answer within"),
                (["--metadata", "postgres://ubiq@127.0.0.1:\(closedPort)/ubiq?connect_timeout=5"], password, "cannot use the PostgreSQL database"),
            ]
            for (arguments, environment, says) in cases {
                let result = try await run(
                    Binaries.path("ubiq-server"), ["--data", data.path + "/data", "--listen", "127.0.0.1:0"] + arguments, timeout: .seconds(90),
                    environment: environment)
                #expect(result.status == 1, "\(arguments): \(result)")
                #expect(!result.stdout.contains("listening on"), "\(arguments): \(result.stdout)")
                let lines = result.stderr.split(separator: "\n")
                #expect(lines.count == 1 && lines[0].hasPrefix("ubiq-server: ") && lines[0].contains(says), "\(arguments): \(result.stderr)")
            }
        } catch {
            try? await bucket.remove()
            throw error
        }
        try await bucket.remove()
    }
}
