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
        let shared = try await ScaleOutStorage.make(label: "replicas")
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
            // Within a second, from the write's return on A to B reading it through the other
            // replica: the median of five (one sample may meet a loaded machine).
            var delays: [Duration] = []
            for i in 1...5 {
                let clock = ContinuousClock()
                let start = clock.now
                try await a.must(#"echo "change \#(i)" > "$M/timed.txt""#)
                try await eventually("B to read change \(i)") { (try? await b.must(#"cat "$M/timed.txt""#)) == "change \(i)\n" }
                delays.append(clock.now - start)
            }
            let median = delays.sorted()[2]
            print("ReplicaTests (\(blobs.rawValue)): from A's write to B's read through two replicas: \(delays.map { $0.formatted(.units(allowed: [.milliseconds])) })")
            #expect(median < .seconds(1), "from A's write to B's read, through two replicas: \(delays)")
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

    /// A mount that names both replicas (`--server A,B`) uploads through the first, over a slow
    /// link; the first is killed mid-upload. What it acknowledged before is on the other
    /// replica, and the mount carries on there: the cut upload is sent again and arrives whole,
    /// and later writes follow.
    @Test func aDeviceWhoseReplicaIsKilledMidUploadCarriesOnThroughTheOther() async throws {
        let work = try TempDirectory("ubiq-failover")
        chmod(work.path, 0o700)
        let shared = try await ScaleOutStorage.make(label: "failover")
        var servers: [ServerProcess] = []
        var devices: [TestDevice] = []
        var relay: ThrottledRelay?
        do {
            servers.append(try await ServerProcess.start(extraArguments: shared.serverArguments))
            servers.append(try await ServerProcess.start(extraArguments: shared.serverArguments))
            try await servers[0].addAccount("alice", password: "alice-pw")
            // 1 MB/s towards the first replica: a 4 MB upload takes about four seconds.
            let slow = try ThrottledRelay(to: servers[0].port, bytesPerSecond: 1_000_000)
            relay = slow
            devices.append(try await TestDevice.mount(
                "A", server: servers[0], through: "\(slow.baseURL),\(servers[1].baseURL)", user: "alice", password: "alice-pw"))
            devices.append(try await TestDevice.mount("B", server: servers[1], user: "alice", password: "alice-pw"))
            let (a, b) = (devices[0], devices[1])
            try await a.must(#"mkdir "$M/acknowledged" && for i in 1 2 3 4 5; do echo "note $i" > "$M/acknowledged/$i.txt"; done"#)
            try await a.waitUntilUploaded()
            try await a.must(#"head -c 4000000 /dev/urandom > "$M/big.bin""#)
            let written = try await a.must(#"sha256sum < "$M/big.bin" | cut -d' ' -f1"#)
            try await eventually("A to be sending big.bin through the first replica") {
                (try? await a.xattr("big.bin", "user.ubiq.isUploading")) == "1"
            }
            servers[0].kill9()
            try await eventually("B to read big.bin whole, sent again through the second replica") {
                (try? await b.must(#"sha256sum < "$M/big.bin" | cut -d' ' -f1"#)) == written
            }
            for i in 1...5 {
                #expect(try await b.must(#"cat "$M/acknowledged/\#(i).txt""#) == "note \(i)\n", "an acknowledged write is on the other replica")
            }
            try await a.must(#"echo later > "$M/later.txt""#)
            try await eventually("B to read what A wrote after the kill") { (try? await b.must(#"cat "$M/later.txt""#)) == "later\n" }
            #expect(try await a.status().connected, "A counts itself connected, through the second replica")
        } catch {
            for d in devices { await d.unmount(); d.remove() }
            relay?.close()
            for s in servers { await s.stop() }
            await shared.remove()
            work.remove()
            throw error
        }
        for d in devices { await d.unmount(); d.remove() }
        relay?.close()
        for s in servers { await s.stop() }
        await shared.remove()
        work.remove()
    }
}
