import Foundation
import ItemModel
import SyncAPI
import TestSupport
import Testing

@Suite(.serialized) struct CacheAndOfflineTests {
    @Test func pinDownloadsAndEvictKeepsThePlaceholder() async throws {
        try await withDevices(["A", "B"]) { _, devices in
            let (a, b) = (devices[0], devices[1])
            try await a.must(#"mkdir -p "$M/keep/sub" && head -c 200000 /dev/urandom > "$M/keep/sub/x.bin" && head -c 1000 /dev/urandom > "$M/keep/y.bin""#)
            try await a.waitUntilUploaded()
            try await eventually("B lists the files") { (try await b.sh(#"test -f "$M/keep/sub/x.bin""#)).status == 0 }
            #expect(try await b.xattr("keep/sub/x.bin", "user.ubiq.downloadingStatus") == "notDownloaded")

            // pin is recursive and downloads.
            let pin = try await b.ubiq(["pin", b.mountpoint + "/keep"])
            #expect(pin.status == 0, "\(pin.stderr)")
            #expect(try await b.xattr("keep/sub/x.bin", "user.ubiq.pinned") == "1")
            try await eventually(timeout: .seconds(20), "pinned files to download") {
                let x = try await b.xattr("keep/sub/x.bin", "user.ubiq.downloadingStatus")
                let y = try await b.xattr("keep/y.bin", "user.ubiq.downloadingStatus")
                return x == "current" && y == "current"
            }
            let onA = try await a.must(#"sha256sum < "$M/keep/sub/x.bin""#)
            #expect(try await b.must(#"sha256sum < "$M/keep/sub/x.bin""#) == onA)

            // evict drops the content, keeps the placeholder; reading brings it back.
            _ = try await b.ubiq(["unpin", b.mountpoint + "/keep"])
            let evict = try await b.ubiq(["evict", b.mountpoint + "/keep/sub/x.bin"])
            #expect(evict.status == 0, "\(evict.stderr)")
            #expect(try await b.xattr("keep/sub/x.bin", "user.ubiq.downloadingStatus") == "notDownloaded")
            #expect(try await b.must(#"stat -c %b "$M/keep/sub/x.bin""#) == "0\n")
            #expect(try await b.must(#"stat -c %s "$M/keep/sub/x.bin""#) == "200000\n")
            // download --wait brings it back and exits 0 only then.
            let download = try await b.ubiq(["download", "--wait", b.mountpoint + "/keep/sub/x.bin"])
            #expect(download.status == 0, "\(download.stderr)")
            #expect(try await b.xattr("keep/sub/x.bin", "user.ubiq.downloadingStatus") == "current")
            // Writing notDownloaded through setfattr is evict too; EBUSY while changes are unsent.
            try await b.must(#"setfattr -n user.ubiq.downloadingStatus -v notDownloaded "$M/keep/y.bin""#)
            #expect(try await b.xattr("keep/y.bin", "user.ubiq.downloadingStatus") == "notDownloaded")
            let readOnly = try await b.sh(#"setfattr -n user.ubiq.isUploaded -v 0 "$M/keep/y.bin""#)
            #expect(readOnly.status != 0 && readOnly.stderr.contains("Operation not permitted"))
        }
    }

    @Test func mountRefusesALiveMountAFileAndAFolderWithFilesAndLoginABadURL() async throws {
        try await withDevices(["A"]) { _, devices in
            let a = devices[0]
            try await a.must(#"echo kept > "$M/kept.txt""#)
            // The same mountpoint and cache again: refused at once, and the mount goes on.
            let again = try await a.ubiq(["mount", a.mountpoint, "--server", a.serverURL, "--cache", a.cache, "--device", a.name], timeout: .seconds(20))
            #expect(again.status == 1 && again.stderr.contains("already mounted") && !again.stdout.contains("mounted"), "\(again)")
            let file = a.cache + "/../plain-file"
            try await a.must("touch \(file) && mkdir -p \(a.cache)/../full && touch \(a.cache)/../full/x")
            for (path, why) in [(file, "is not a directory"), (a.cache + "/../full", "is not empty"), (a.cache + "/../missing", "does not exist")] {
                let r = try await a.ubiq(["mount", path, "--server", a.serverURL, "--cache", a.cache + "-other"], timeout: .seconds(20))
                #expect(r.status == 1 && r.stderr.contains(why) && r.stderr.split(separator: "\n").count == 1, "\(path): \(r)")
            }
            try await a.must(#"mkdir "$M/inner""#)
            let nested = try await a.ubiq(["mount", a.mountpoint + "/inner", "--server", a.serverURL, "--cache", a.cache + "-nested"], timeout: .seconds(20))
            #expect(nested.status == 1 && nested.stderr.contains("inside the ubiq mount"), "\(nested)")
            let login = try await a.ubiq(["login", "--server", "localhost:8420", "--user", "x", "--password-stdin"], stdin: "pw\n")
            #expect(login.status == 2 && login.stderr.contains("http://"), "\(login)")
            // The first daemon is alive and still serves its mount.
            #expect(try await a.must(#"cat "$M/kept.txt""#) == "kept\n")
            #expect(try await a.daemonPID() != nil)
        }
    }

    @Test func unmountOfABusyMountSaysTheDaemonStaysUntilFilesClose() async throws {
        try await withDevices(["A"]) { _, devices in
            let a = devices[0]
            try await a.must(#"echo kept > "$M/kept.txt""#)
            // A process that keeps a file open in the mount until its stdin closes.
            let holder = Process()
            holder.executableURL = URL(fileURLWithPath: "/bin/bash")
            holder.arguments = ["-c", #"exec 3<"$M/kept.txt"; echo holding; read -r _"#]
            holder.environment = ["M": a.mountpoint, "PATH": "/usr/bin:/bin"]
            let input = Pipe(), output = Pipe()
            holder.standardInput = input
            holder.standardOutput = output
            try holder.run()
            defer { if holder.stillRunning { holder.terminate() } }
            #expect(String(decoding: output.fileHandleForReading.availableData, as: UTF8.self) == "holding\n")

            // A timeout that is no number of seconds is refused, by the command and by the daemon.
            for bad in ["nan", "-1", "1e300"] {
                let refused = try await a.ubiq(["unmount", a.mountpoint, "--timeout=\(bad)"])
                #expect(refused.status == 2 && refused.stderr.contains("86400"), "\(bad): \(refused)")
                let answer = try await a.must("curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X POST --unix-socket '\(a.cache)/control.sock' 'http://localhost/flush?timeout=\(bad)'")
                #expect(answer == "400", "\(bad): \(answer)")
            }
            #expect(try await a.status().connected, "still mounted and answering")

            let busy = try await a.ubiq(["unmount", a.mountpoint, "--timeout", "5"], timeout: .seconds(60))
            #expect(busy.status == 1 && busy.stderr.contains("detached") && !busy.stdout.contains("unmounted"), "\(busy)")
            #expect(try await a.daemonPID() != nil, "it still serves the open file")

            // The file, still open, still reads through the detached mount.
            #expect(try await a.sh(#"cat /proc/\#(holder.processIdentifier)/fd/3"#).stdout == "kept\n")
            try input.fileHandleForWriting.close()
            try await eventually("the holder to exit") { !holder.stillRunning }
        }
    }

    @Test func anAccountAddedAgainIsAnotherAccountAndTheMountSaysSoAfterLogin() async throws {
        try await withDevices(["A"], serverArguments: ["--auth-cache-seconds", "0"]) { server, devices in
            let a = devices[0]
            let monitor = try a.monitor(json: true)
            defer { monitor.stop() }
            try await a.must(#"echo first > "$M/first.txt""#)
            try await eventually("first.txt to be uploaded") { try await a.xattr("first.txt", "user.ubiq.isUploaded") == "1" }
            // Removed and added again: a new account, with a new, empty container.
            try await server.removeAccount("alice")
            try await server.addAccount("alice", password: "new-pw")
            try await a.must(#"echo second > "$M/second.txt""#)
            try await eventually("the mount to say the token is refused") {
                try await a.ubiq(["status", "--mount", a.mountpoint]).stdout.contains("refused the login token")
            }
            // Logging in again reaches the running mount, which then finds another account (its
            // identity is new) and says so instead of syncing with it.
            let login = try await a.ubiq(["login", "--server", a.serverURL, "--user", "alice", "--password-stdin"], stdin: "new-pw\n")
            #expect(login.status == 0, "\(login)")
            try await eventually("the mount to name the other account") {
                try await a.ubiq(["status", "--mount", a.mountpoint]).stdout.contains("another account than the one this cache holds")
            }
            try await monitor.event("accountChange") { $0["kind"] as? String == "accountChange" }
            #expect(try await a.must(#"cat "$M/first.txt" "$M/second.txt""#) == "first\nsecond\n", "local files are kept")
            try await withMountedDevice("B", server: server, password: "new-pw") { b in
                let listed = try await b.must(#"ls -A "$M""#)
                #expect(listed == "", "nothing was sent to the new container")
            }

            // Mounted again: the old account's state is set aside, kept, and the new one shows.
            await a.unmount()
            try await a.mountAgain()
            #expect(try await a.must(#"ls -A "$M""#) == "")
            let aside = try await a.must(#"ls -d "$CACHE"/accounts/*.aside-*/state.sqlite"#.replacingOccurrences(of: "$CACHE", with: a.cache))
            #expect(aside.split(separator: "\n").count == 1, "\(aside)")
            try await a.must(#"echo third > "$M/third.txt""#)
            try await eventually("third.txt to go up to the new account") { try await a.xattr("third.txt", "user.ubiq.isUploaded") == "1" }
        }
    }

    @Test func evictIsRefusedWhileChangesAreUnsent() async throws {
        try await withDevices(["A"]) { server, devices in
            let a = devices[0]
            // With the server gone the change cannot leave: evict must refuse and say why.
            server.kill9()
            try await a.must(#"echo unsent > "$M/draft.txt""#)
            let evict = try await a.ubiq(["evict", a.mountpoint + "/draft.txt"])
            #expect(evict.status == 1 && evict.stderr.contains("not on the server"), "\(evict.stderr)")
            let missing = try await a.ubiq(["status", a.mountpoint + "/no-such-file"])
            #expect(missing.status == 1 && missing.stderr.split(separator: "\n").count == 1, "one line: \(missing.stderr)")
            let busy = try await a.sh(#"setfattr -n user.ubiq.downloadingStatus -v notDownloaded "$M/draft.txt""#)
            #expect(busy.status != 0 && busy.stderr.contains("busy"), "\(busy.stderr)")
            #expect(try await a.must(#"cat "$M/draft.txt""#) == "unsent\n")
            try await server.restart(samePort: true)
        }
    }

    @Test func theCacheLimitEvictsLeastRecentlyUsedCleanFilesButNeverPinnedOnes() async throws {
        try await withDevices(["A"]) { server, devices in
            let writer = devices[0]
            try await writer.must(#"for i in 1 2 3 4 5 6; do head -c 1000000 /dev/urandom > "$M/f$i.bin"; done; head -c 1000000 /dev/urandom > "$M/pinned.bin""#)
            try await writer.waitUntilUploaded()
            // A second device with a 2.5 MB cache limit.
            try await withMountedDevice("B", server: server, extraArguments: ["--cache-size", "2500000"]) { b in
                try await checkCacheLimit(b)
            }
        }
    }

    func checkCacheLimit(_ b: TestDevice) async throws {
        do {
            try await eventually("B lists everything") { (try await b.sh(#"test -f "$M/f6.bin" && test -f "$M/pinned.bin""#)).status == 0 }
            _ = try await b.ubiq(["pin", b.mountpoint + "/pinned.bin"])
            try await eventually("the pinned file to download") { try await b.xattr("pinned.bin", "user.ubiq.downloadingStatus") == "current" }
            for i in 1...6 { try await b.must("cat \"$M/f\(i).bin\" > /dev/null") }
            try await eventually(timeout: .seconds(20), "the cache to shrink under its limit") {
                (try await b.status()).cachedBytes <= 2_500_000
            }
            #expect(try await b.xattr("pinned.bin", "user.ubiq.downloadingStatus") == "current", "pinned content is never evicted")
            #expect(try await b.xattr("f6.bin", "user.ubiq.downloadingStatus") == "current", "the most recently read file stays")
            #expect(try await b.xattr("f1.bin", "user.ubiq.downloadingStatus") == "notDownloaded", "the least recently read file went first")
        }
    }

    @Test func offlineCachedFilesWorkUploadsWaitAndPlaceholdersFailAtOnce() async throws {
        try await withDevices(["A", "B"]) { server, devices in
            let (a, b) = (devices[0], devices[1])
            try await a.must(#"echo cached > "$M/cached.txt" && head -c 100000 /dev/urandom > "$M/remote-only.bin""#)
            try await a.waitUntilUploaded()
            try await eventually("B lists the files") { (try await b.sh(#"test -f "$M/remote-only.bin""#)).status == 0 }
            try await b.must(#"cat "$M/cached.txt" > /dev/null"#)

            server.kill9()
            try await eventually("B to notice it is offline") { !(try await b.status()).connected }
            let status = try await b.ubiq(["status", "--mount", b.mountpoint])
            #expect(status.stdout.contains("offline"), "\(status.stdout)")
            // Cached files read and write normally.
            #expect(try await b.must(#"cat "$M/cached.txt""#) == "cached\n")
            try await b.must(#"echo "written offline" > "$M/offline.txt" && echo more >> "$M/cached.txt""#)
            #expect(try await b.status().pendingUploads >= 2)
            // An unmount with changes still queued returns once its daemon has exited, so a
            // mount right after meets no daemon still finishing, and stays reachable.
            let old = try #require(try await b.daemonPID())
            let down = try await b.ubiq(["unmount", b.mountpoint, "--timeout", "1"])
            #expect(down.status == 0, "\(down.stderr)")
            #expect(kill(old, 0) != 0, "the daemon outlived `ubiq unmount`")
            // A clean stop leaves the index in its database file, the WAL file emptied.
            let index = try await b.sh("find '\(b.cache)/accounts' -name 'state.sqlite*' -printf '%f %s\\n' | sort")
            #expect(index.stdout.contains("state.sqlite "), "\(index.stdout)")
            #expect(index.stdout.contains("state.sqlite-wal 0\n"), "\(index.stdout)")
            try await b.mountAgain()
            #expect(try await b.ubiq(["status", "--mount", b.mountpoint]).status == 0)
            #expect(try await b.status().pendingUploads >= 2, "the queued changes wait across the remount")
            // A placeholder cannot be downloaded: EIO at once, and the reason in downloadingError.
            let clock = ContinuousClock()
            let started = clock.now
            let read = try await b.sh(#"cat "$M/remote-only.bin" > /dev/null"#)
            #expect(read.status != 0 && read.stderr.contains("Input/output error"), "\(read.stderr)")
            #expect(clock.now - started < .seconds(5), "the open failed at once, it did not hang")
            #expect(try await b.xattr("remote-only.bin", "user.ubiq.downloadingError") != nil)

            // The server returns: the queued changes go up and reach A.
            try await server.restart(samePort: true)
            try await b.waitUntilUploaded(timeout: .seconds(30))
            try await eventually(timeout: .seconds(20), "A to see B's offline work") {
                let r = try await a.sh(#"cat "$M/offline.txt" "$M/cached.txt""#)
                return r.stdout == "written offline\ncached\nmore\n"
            }
            let onA = try await a.must(#"sha256sum < "$M/remote-only.bin""#)
            #expect(try await b.must(#"sha256sum < "$M/remote-only.bin""#) == onA)
        }
    }
}
