import Foundation
import TestSupport
import Testing

/// A server kept in SQLite and a blob folder, copied by `ubiq-server migrate` into PostgreSQL
/// and an S3 bucket and then served from there at the same address: the mount that was there
/// carries on with its login and cursor, and a new device sees the same tree, attributes,
/// earlier versions, key-value store and share links.
@Suite struct ServerMigrationTests {
    /// Every entry below the mount: kind, path, and a file's size or a link's target; then
    /// each file's SHA-256.
    static let tree = #"""
        cd "$M" && find . -mindepth 1 -name .ubiq-versions -prune -o \( -type f -printf 'f %p %s\n' \) -o \( -type l -printf 'l %p %l\n' \) -o \( -type d -printf 'd %p\n' \) | LC_ALL=C sort
        find . -name .ubiq-versions -prune -o -type f -exec sha256sum {} + | LC_ALL=C sort -k2
        """#

    @Test(.oneServerOnly) func aServerCopiedIntoPostgreSQLAndS3ServesTheSameTreeToItsMounts() async throws {
        let work = try TempDirectory("ubiq-migrate")
        chmod(work.path, 0o700)
        let target = try await ScaleOutStorage.make(label: "migrated")
        let server = try await ServerProcess.start()
        var devices: [TestDevice] = []
        do {
            try await server.addAccount("alice", password: "alice-pw")
            let a = try await TestDevice.mount("A", server: server, user: "alice", password: "alice-pw")
            devices.append(a)
            try await a.must(#"""
                mkdir -p "$M/docs/deep" && echo small > "$M/docs/small.txt" && head -c 2000000 /dev/urandom > "$M/docs/deep/big.bin" &&
                echo v1 > "$M/edited.txt" && setfattr -n user.color -v blue "$M/docs/small.txt" && ln -s docs/small.txt "$M/link"
                """#)
            try await a.waitUntilUploaded()
            try await a.must(#"echo v2 > "$M/edited.txt""#)
            try await a.ubiqMust(["kv", "set", "theme", "dark", "--mount", a.mountpoint])
            try await a.waitUntilUploaded()
            let link = try await a.ubiqMust(["share", a.mountpoint + "/docs/small.txt", "--json"])
            let share = try #require(try JSONSerialization.jsonObject(with: Data(link.utf8)) as? [String: Any])
            let url = try #require(share["url"] as? String)
            let before = try await a.must(Self.tree)
            #expect(before.contains("f ./docs/deep/big.bin 2000000"), "the tree as made: \(before)")

            let command = [
                "migrate", "--data", server.dataDirectory, "--to-metadata", target.metadata, "--to-postgres-password-file", target.cluster.passwordFile,
                "--to-blobs", target.blobs, "--to-s3-credentials-file", target.keysFile,
            ]
            let whileServing = try await run(Binaries.path("ubiq-server"), command)
            #expect(whileServing.status == 1 && whileServing.stderr.contains("stop it first"), "\(whileServing)")
            let wrongTarget = try await run(Binaries.path("ubiq-server"), ["migrate", "--data", server.dataDirectory, "--to-metadata", "sqlite:/tmp", "--to-blobs", "dir:/tmp"])
            #expect(wrongTarget.status == 2 && wrongTarget.stderr.contains("--to-metadata takes postgres://"), "\(wrongTarget)")

            await server.halt()
            let copied = try await run(Binaries.path("ubiq-server"), command, timeout: .seconds(120))
            #expect(copied.status == 0, "\(copied)")
            #expect(copied.stdout.contains("copied and verified: 1 account"), "\(copied.stdout)")
            let again = try await run(Binaries.path("ubiq-server"), command)
            #expect(again.status == 1 && again.stderr.contains("already holds"), "a second copy into the same database is refused: \(again)")
            #expect(try await target.bucket.keys(prefix: "blobs/").count >= 1, "the big file's content is in the bucket")

            // The same address, now on PostgreSQL and S3.
            try await server.restart(samePort: true, extraArguments: target.serverArguments)
            try await a.must(#"echo after > "$M/after.txt""#)
            try await a.waitUntilUploaded()
            let b = try await TestDevice.mount("B", server: server, user: "alice", password: "alice-pw")
            devices.append(b)
            let expected = try await a.must(Self.tree)
            #expect(expected.contains("f ./after.txt 6") && expected.contains("f ./edited.txt 3"), "A's tree: \(expected)")
            try await eventually("B to show A's whole tree, contents included") { (try? await b.must(Self.tree)) == expected }
            // B's change reaches A, whose cursor came from the SQLite server.
            try await b.must(#"echo from-b > "$M/from-b.txt""#)
            try await eventually("A to read B's file") { (try? await a.must(#"cat "$M/from-b.txt""#)) == "from-b\n" }
            #expect(try await b.must(#"getfattr --only-values -n user.color "$M/docs/small.txt""#) == "blue")
            try await eventually("B to read the key-value store") { (try? await b.ubiqMust(["kv", "get", "theme", "--mount", b.mountpoint])) == "dark\n" }
            let versions = try await b.ubiqMust(["versions", "--all", "--json", b.mountpoint + "/edited.txt"])
            #expect(versions.contains(#""kind":"earlier""#), "the earlier version came along: \(versions)")
            #expect(try await b.must("curl -sf '\(url)'") == "small\n", "the share link still serves its snapshot")
        } catch {
            for d in devices { await d.unmount(); d.remove() }
            await server.stop()
            await target.remove()
            work.remove()
            throw error
        }
        for d in devices { await d.unmount(); d.remove() }
        await server.stop()
        await target.remove()
        work.remove()
    }
}

extension TestDevice {
    /// `ubiq ARGUMENTS` on this device; what it printed, or a thrown error with its stderr.
    @discardableResult
    func ubiqMust(_ arguments: [String]) async throws -> String {
        let r = try await ubiq(arguments)
        guard r.status == 0 else { throw TestSupportError("[\(name)] ubiq \(arguments.joined(separator: " ")) exited \(r.status): \(r.stderr)") }
        return r.stdout
    }
}
