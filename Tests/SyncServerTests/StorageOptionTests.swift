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
    /// under its digest; with a wrong secret the server starts, and an upload fails without
    /// being acknowledged.
    @Test func s3KeysComeFromTheEnvironment() async throws {
        let bucket = try await S3TestServer.makeBucket("options")
        let data = try TempDirectory("ubiq-options")
        defer { data.remove() }
        do {
            let s3 = bucket.configuration
            let blobs = ["--blobs", "s3://\(s3.bucket)?endpoint=\(s3.endpoint.absoluteString)&region=\(s3.region)"]
            for (secret, works) in [(s3.credentials.secretAccessKey, true), ("not-the-secret", false)] {
                var environment = Self.environmentWithoutKeys
                environment["AWS_ACCESS_KEY_ID"] = s3.credentials.accessKeyID
                environment["AWS_SECRET_ACCESS_KEY"] = secret
                let folder = data.path + "/\(works)"
                let added = try await run(
                    Binaries.path("ubiq-server"), ["account", "add", "alice", "--password-stdin", "--data", folder] + blobs, stdin: "alice-pw\n",
                    environment: environment)
                #expect(added.status == 0, "\(added)")
                let lifeline = Pipe()
                let server = try RunningProcess(
                    Binaries.path("ubiq-server"), ["--data", folder, "--listen", "127.0.0.1:0", "--exit-with-stdin"] + blobs,
                    environment: environment, standardInput: lifeline)
                defer { server.stop() }
                let line = try await server.line("the server to listen") { $0.contains("listening on") }
                let port = try #require(server.output[line].split(separator: ":").last.flatMap { Int($0) })
                let alice = try await TestHTTP(baseURL: "http://127.0.0.1:\(port)").login("alice", "alice-pw")
                let content = Data("kept in the bucket, \(works)".utf8)
                let digest = sha256(content)
                let answer = try await alice.send(.PUT, APIPath.blob(digest), body: content)
                let stored = try await bucket.keys().contains(digest.hex)
                if works {
                    #expect(answer.status == 201 && stored, "\(answer.status) \(answer.text)")
                } else {
                    #expect(answer.status >= 500 && !stored, "\(answer.status) \(answer.text)")
                }
                try lifeline.fileHandleForWriting.close()
                #expect(try await server.exitStatus() == 0)
            }
        } catch {
            try? await bucket.remove()
            throw error
        }
        try await bucket.remove()
    }
}
