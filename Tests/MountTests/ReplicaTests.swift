import Foundation
import PostgresStorage
import TestSupport
import Testing

/// Two `ubiq-server` processes over one PostgreSQL database (replicas; their contents in one
/// shared folder), each with a mount of its own: what one mount saves reaches the other by push,
/// through the replicas' commit announcements, with no polling anywhere.
@Suite struct ReplicaTests {
    @Test func twoMountsOnTwoReplicasOfOnePostgreSQLDatabaseSeeEachOthersChanges() async throws {
        let cluster = try await PostgresTestCluster.shared()
        let database = try await cluster.makeDatabase()
        let blobs = try TempDirectory("ubiq-replica-blobs")
        chmod(blobs.path, 0o700)
        let storage = [
            "--metadata", "postgres://postgres@127.0.0.1:\(cluster.port)/\(database.database)",
            "--postgres-password-file", cluster.passwordFile, "--blobs", "dir:" + blobs.path,
        ]
        let first = try await ServerProcess.start(extraArguments: storage)
        var servers = [first]
        var devices: [TestDevice] = []
        do {
            servers.append(try await ServerProcess.start(extraArguments: storage))
            try await first.addAccount("alice", password: "alice-pw")
            devices.append(try await TestDevice.mount("A", server: servers[0], user: "alice", password: "alice-pw"))
            devices.append(try await TestDevice.mount("B", server: servers[1], user: "alice", password: "alice-pw"))
            let (a, b) = (devices[0], devices[1])
            try await a.must(#"echo from-a > "$M/a.txt""#)
            try await eventually("B, on the other replica, to read A's file") {
                (try? await b.must(#"cat "$M/a.txt""#)) == "from-a\n"
            }
            try await b.must(#"mkdir "$M/folder" && echo from-b > "$M/folder/b.txt""#)
            try await eventually("A to read B's file") {
                (try? await a.must(#"cat "$M/folder/b.txt""#)) == "from-b\n"
            }
        } catch {
            for d in devices { await d.unmount(); d.remove() }
            for s in servers { await s.stop() }
            blobs.remove()
            throw error
        }
        for d in devices { await d.unmount(); d.remove() }
        for s in servers { await s.stop() }
        blobs.remove()
        try await cluster.dropDatabase(database)
    }
}
