import Foundation
import PostgresStorage
import S3Client
import TestSupport
import Testing

/// Where the replicas of `ReplicaTests` keep their contents.
enum ReplicaBlobs: String, CaseIterable, Sendable {
    /// One folder both reach.
    case folder
    /// One bucket on the tests' S3 server (SeaweedFS), the keys in a credentials file.
    case bucket
}

/// Two `ubiq-server` processes over one PostgreSQL database (replicas), their contents in one
/// shared folder or one S3 bucket, each with a mount of its own: what one mount saves reaches
/// the other by push, through the replicas' commit announcements, with no polling anywhere.
@Suite struct ReplicaTests {
    @Test(arguments: ReplicaBlobs.allCases)
    func twoMountsOnTwoReplicasOfOnePostgreSQLDatabaseSeeEachOthersChanges(blobs: ReplicaBlobs) async throws {
        let work = try TempDirectory("ubiq-replica")
        chmod(work.path, 0o700)
        let shared = try await ScaleOutStorage.make(in: work, label: "replicas")
        var servers: [ServerProcess] = []
        var devices: [TestDevice] = []
        do {
            let storage = shared.metadataArguments + (blobs == .bucket ? shared.blobArguments : ["--blobs", "dir:" + work.path + "/blobs"])
            servers.append(try await ServerProcess.start(extraArguments: storage))
            servers.append(try await ServerProcess.start(extraArguments: storage))
            try await servers[0].addAccount("alice", password: "alice-pw")
            devices.append(try await TestDevice.mount("A", server: servers[0], user: "alice", password: "alice-pw"))
            devices.append(try await TestDevice.mount("B", server: servers[1], user: "alice", password: "alice-pw"))
            let (a, b) = (devices[0], devices[1])
            try await a.must(#"echo from-a > "$M/a.txt""#)
            try await eventually("B, on the other replica, to read A's file") {
                (try? await b.must(#"cat "$M/a.txt""#)) == "from-a\n"
            }
            // Large enough to go up as a blob of its own, not inline with its create.
            try await b.must(#"mkdir "$M/folder" && head -c 3000000 /dev/urandom > "$M/folder/b.bin""#)
            let written = try await b.must(#"sha256sum < "$M/folder/b.bin" | cut -d' ' -f1"#)
            try await eventually("A to read B's file whole") {
                (try? await a.must(#"sha256sum < "$M/folder/b.bin" | cut -d' ' -f1"#)) == written
            }
            let digest = written.trimmingCharacters(in: .whitespacesAndNewlines)
            switch blobs {
            case .bucket:
                #expect(try await shared.bucket.keys(prefix: "blobs/").contains("blobs/" + digest), "the content is in the bucket under its digest")
            case .folder:
                #expect(FileManager.default.fileExists(atPath: work.path + "/blobs/\(digest.prefix(2))/\(digest)"), "the content is in the shared folder")
            }
        } catch {
            for d in devices { await d.unmount(); d.remove() }
            for s in servers { await s.stop() }
            await shared.remove()
            work.remove()
            throw error
        }
        for d in devices { await d.unmount(); d.remove() }
        for s in servers { await s.stop() }
        await shared.remove()
        work.remove()
    }
}
