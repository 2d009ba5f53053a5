import Foundation
import ItemModel
import SyncAPI
import TestSupport
import Testing

@Suite(.serialized) struct CrashAndDiskTests {
    @Test func afterKill9TheNextMountClearsTheDeadMountAndResumesUploads() async throws {
        try await withDevices(["A", "B"]) { server, devices in
            let (a, b) = (devices[0], devices[1])
            // Keep the uploads queued: the server is down while A writes and closes.
            server.kill9()
            try await a.must(#"mkdir "$M/work" && for i in 1 2 3; do head -c 50000 /dev/urandom > "$M/work/f$i"; done && sha256sum "$M"/work/f* | cut -c1-64 > "$M/../kill9.sums""#)
            #expect(try await a.status().pendingUploads >= 4)
            try await a.killDaemon()
            let dead = try await a.sh(#"ls "$M""#)
            #expect(dead.status != 0 && dead.stderr.contains("not connected"), "\(dead.stderr)")
            try await server.restart(samePort: true)
            try await a.mountAgain()
            // Beside the mountpoint, in the device's own test folder (removed with it).
            let sums = try String(contentsOfFile: a.mountpoint + "/../kill9.sums", encoding: .utf8)
            #expect(try await a.must(#"sha256sum "$M"/work/f* | cut -c1-64"#) == sums)
            try await a.waitUntilUploaded(timeout: .seconds(30))
            try await eventually(timeout: .seconds(20), "B to get the files written before the crash") {
                (try await b.sh(#"cat "$M"/work/f1 "$M"/work/f2 "$M"/work/f3 | wc -c"#)).stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "150000"
            }
            #expect(try await b.must(#"sha256sum "$M"/work/f* | cut -c1-64"#) == sums)
        }
    }

    @Test(.enabled(if: geteuid() == 0, "mounts a tmpfs, which needs root"))
    func aFullCacheVolumeGivesENOSPCAndNothingPartialIsUploaded() async throws {
        let server = try await ServerProcess.start()
        try await server.addAccount("alice", password: "alice-pw")
        // The cache folder is a 13 MiB tmpfs: the 4 MiB free-space reserve and a 4 MB file fit,
        // with room for the database; a 16 MB file does not.
        let a = try await TestDevice.mount("A", server: server, user: "alice", password: "alice-pw") { device in
            let r = try await run("/bin/mount", ["-t", "tmpfs", "-o", "size=13m", "tmpfs", device.cache], timeout: .seconds(10))
            guard r.status == 0 else { throw TestSupportError("cannot mount a tmpfs: \(r.stderr)") }
        }
        do {
            let v1 = try await a.must(#"head -c 4000000 /dev/urandom | tee "$M/big.bin" | sha256sum | cut -c1-64"#)
            try await a.waitUntilUploaded()
            // Overwrite with 16 MiB: the writer must get ENOSPC, not EIO, and must not hang.
            let write = try await a.sh(#"head -c 16000000 /dev/urandom > "$M/big.bin""#, timeout: .seconds(60))
            #expect(write.status != 0 && write.stderr.contains("No space left on device"), "\(write.stderr)")
            // A second writer does not hang either.
            let second = try await a.sh(#"head -c 16000000 /dev/zero > "$M/other.bin""#, timeout: .seconds(60))
            #expect(second.status != 0 && second.stderr.contains("No space left on device"), "\(second.stderr)")
            // The server keeps the last complete version.
            let http = try await TestHTTP(baseURL: server.baseURL).login("alice", "alice-pw")
            let root = try await http.send(.GET, APIPath.children(.default, .root)).decode(ItemList.self)
            let big = try #require(root.items.first { $0.name == "big.bin" })
            #expect(big.digest?.hex == v1.trimmingCharacters(in: .whitespacesAndNewlines), "the server still has the complete first version")
            #expect(big.size == 4_000_000)
            // The partial version is dropped: the file is the server's last version again.
            try await eventually("big.bin to show the server's version again") {
                (try await a.must(#"stat -c %s "$M/big.bin""#)) == "4000000\n"
            }
            #expect(try await a.xattr("big.bin", "user.ubiq.downloadingStatus") == "notDownloaded")
            #expect(try await a.xattr("big.bin", "user.ubiq.uploadingError") == nil, "the failed version is gone, and its error with it")
            #expect(try await a.must(#"sha256sum < "$M/big.bin" | cut -c1-64"#) == v1)
            // Two writers: fd 3 holds big.bin open while another writer of it fills the disk, and
            // fd 3 closes last. The version is broken for both: dropped, not kept or uploaded.
            try await a.must(#"rm -f "$M/other.bin""#)
            let two = try await a.sh(#"exec 3>>"$M/big.bin"; head -c 16000000 /dev/urandom > "$M/big.bin"; s=$?; exec 3>&-; exit $s"#, timeout: .seconds(60))
            #expect(two.status != 0 && two.stderr.contains("No space left on device"), "\(two.stderr)")
            try await eventually("big.bin to show the server's version again after the second writer closed") {
                (try await a.must(#"stat -c %s "$M/big.bin""#)) == "4000000\n"
            }
            let still = try await http.send(.GET, APIPath.children(.default, .root)).decode(ItemList.self)
            #expect(still.items.first { $0.name == "big.bin" }?.digest?.hex == v1.trimmingCharacters(in: .whitespacesAndNewlines))
            // A new file filling the disk: its failure is recorded (the writer's later writes fail
            // at once instead of eating the reserve freed for that), and it can be removed.
            // Python's os.write, as many programs do, goes on after a short write, which is how
            // the kernel reports the first failure inside a large write().
            let third = try await a.sh(#"""
                python3 - "$M/third.bin" <<'EOF'
                import os, sys
                fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                block = os.urandom(1 << 20)
                try:
                    for _ in range(16): os.write(fd, block)
                except OSError as e:
                    sys.exit(str(e))
                EOF
                """#, timeout: .seconds(60))
            #expect(third.status != 0 && third.stderr.contains("No space left on device"), "\(third.stderr)")
            try await eventually("third.bin to report its failed write") {
                try await a.xattr("third.bin", "user.ubiq.uploadingError")?.contains("a write failed") == true
            }
            try await a.must(#"rm "$M/third.bin""#)
            // Freeing space and writing again works and uploads the new complete version.
            try await a.must(#"head -c 1000 /dev/urandom > "$M/big.bin""#)
            try await a.waitUntilUploaded()
            let after = try await http.send(.GET, APIPath.children(.default, .root)).decode(ItemList.self)
            #expect(after.items.first { $0.name == "big.bin" }?.size == 1000)
        } catch {
            await a.unmount()
            _ = try? await run("/bin/umount", ["-l", a.cache])
            a.remove()
            await server.stop()
            throw error
        }
        await a.unmount()
        _ = try? await run("/bin/umount", ["-l", a.cache])
        a.remove()
        await server.stop()
    }
}
