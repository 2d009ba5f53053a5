import Foundation
import ItemModel
import SyncAPI
import TestSupport
import Testing

/// Two devices (separate caches and device names) on one live server, driven with real tools.
@Suite(.serialized) struct PropagationTests {
    @Test func aCopiedTreeAppearsOnTheOtherDeviceAsPlaceholdersAndReadsBackIdentical() async throws {
        try await withDevices(["A", "B"]) { server, devices in
            let (a, b) = (devices[0], devices[1])
            let source = try TempDirectory("ubiq-source")
            defer { source.remove() }
            let tree = Tree.sample(seed: 7, fileCount: 40, maxSize: 300_000)
            try tree.write(to: source.path + "/tree")
            // One 3 MiB file, so reads span many FUSE requests and download chunks.
            let big = Data((0..<3_145_728).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 11) })
            FileManager.default.createFile(atPath: source.path + "/tree/big.bin", contents: big)
            try await a.must("cp -r '\(source.path)/tree' \"$M/\"")

            try await eventually(timeout: .seconds(30), "the tree on B") {
                let r = try await b.sh(#"find "$M/tree" -type f 2>/dev/null | wc -l"#)
                return Int(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) == tree.files.count + 1
            }
            // Placeholders: true size, no blocks, not downloaded, and reading the status does not download.
            let stat = try await b.must(#"stat -c '%s %b' "$M/tree/big.bin""#)
            #expect(stat.trimmingCharacters(in: .whitespacesAndNewlines) == "3145728 0")
            let all = try await b.must(#"getfattr -d -m - "$M/tree/big.bin""#)
            for name in ["downloadingStatus=\"notDownloaded\"", "isDownloading=\"0\"", "percentDownloaded=\"0\"", "isUploaded=\"1\"",
                         "isUploading=\"0\"", "percentUploaded=\"100\"", "hasUnresolvedConflicts=\"0\"", "pinned=\"0\"", "itemID=", "revision="] {
                #expect(all.contains("user.ubiq." + name), "getfattr -d lists \(name): \(all)")
            }
            #expect(try await b.must(#"stat -c '%b' "$M/tree/big.bin""#).trimmingCharacters(in: .whitespacesAndNewlines) == "0")
            #expect(try await b.xattr("tree/big.bin", "user.ubiq.downloadingStatus") == "notDownloaded")
            // `ubiq status --json` types them: flags as booleans, percentages as numbers.
            let line = try await b.ubiq(["status", "--json", b.mountpoint + "/tree/big.bin"])
            #expect(try JSONSerialization.jsonObject(with: Data(line.stdout.utf8)) is [String: Any], "\(line.stdout)")
            for field in [#""downloadingStatus":"notDownloaded""#, #""isDownloading":false"#, #""percentDownloaded":0"#, #""isUploaded":true"#,
                          #""isUploading":false"#, #""percentUploaded":100"#, #""hasUnresolvedConflicts":false"#, #""pinned":false"#, #""itemID":""#, #""revision":""#] {
                #expect(line.stdout.contains(field), "\(field) in \(line.stdout)")
            }

            // cat on B returns identical bytes, and the status becomes current.
            for (path, data) in tree.files.sorted(by: { $0.key < $1.key }).prefix(15) + [("big.bin", big)] {
                let out = try await b.must("sha256sum \"$M/tree/\(path)\"")
                #expect(out.prefix(64) == sha256Hex(data), "\(path)")
            }
            // The digest check ends after the last bytes reach the reader (docs/SEMANTICS.md):
            // only then is the file current, and its blocks counted. A stat made while it
            // downloaded may have left the kernel holding no blocks: the mount then drops that
            // cached answer, right after the file becomes current, not an attribute timeout later.
            try await eventually("big.bin to become current on B") {
                try await b.xattr("tree/big.bin", "user.ubiq.downloadingStatus") == "current"
            }
            try await eventually(timeout: .seconds(10), "big.bin's blocks to count on B") {
                try await b.must(#"stat -c '%b' "$M/tree/big.bin""#).trimmingCharacters(in: .whitespacesAndNewlines) != "0"
            }
            // A, B and the server agree.
            try await a.waitUntilUploaded()
            let expected = try await a.snapshot()
            #expect(try await b.snapshot() == expected)
            let onServer = try await serverTree(server)
            #expect(Set(onServer.keys) == Set(expected.keys))
        }
    }

    /// A file whose rest (after its head) is a long transfer, on connections of its own: it
    /// reads back identical on the other device, also when an evict cut its first download,
    /// and the next placeholder opened after the cut still gets its bytes.
    @Test func aLargeFileReadsBackIdenticalAlsoAfterAnEvictCutItsDownload() async throws {
        try await withDevices(["A", "B"]) { _, devices in
            let (a, b) = (devices[0], devices[1])
            // 24 MiB of random bytes: over the 8 MiB from which a transfer counts as long.
            try await a.must(#"head -c 25165824 /dev/urandom > "$M/large.bin" && echo small > "$M/small.txt""#)
            let want = String(try await a.must(#"sha256sum < "$M/large.bin""#).prefix(64))
            try await a.waitUntilUploaded()
            try await eventually(timeout: .seconds(30), "B sees both files") {
                (try await b.sh(#"test -f "$M/large.bin" && test -f "$M/small.txt""#)).status == 0
            }
            // The first bytes start the download of the whole file; the evict right after cuts
            // it when it is still running (else it drops the finished copy).
            #expect(try await b.must(#"head -c 4 "$M/large.bin" | wc -c"#).trimmingCharacters(in: .whitespacesAndNewlines) == "4")
            // The kernel sends the reader's release after `head` exits: until it arrives, the
            // file counts as open and the evict is refused.
            try await eventually(timeout: .seconds(10), "the evict to be taken") {
                try await b.ubiq(["evict", b.mountpoint + "/large.bin"]).status == 0
            }
            #expect(try await b.must(#"cat "$M/small.txt""#) == "small\n")
            #expect(String(try await b.must(#"sha256sum < "$M/large.bin""#).prefix(64)) == want)
            // Current once the whole file is checked against its digest, which follows the read.
            try await eventually(timeout: .seconds(30), "large.bin to be current on B") {
                try await b.xattr("large.bin", "user.ubiq.downloadingStatus") == "current"
            }
        }
    }

    @Test func renamesDeletesFoldersAndTagsPropagate() async throws {
        try await withDevices(["A", "B"]) { _, devices in
            let (a, b) = (devices[0], devices[1])
            try await a.must(#"mkdir -p "$M/Documents/Projects" && echo one > "$M/Documents/one.txt" && echo two > "$M/two.txt""#)
            try await eventually("B sees the files") { (try await b.sh(#"test -f "$M/Documents/one.txt" && test -f "$M/two.txt""#)).status == 0 }
            try await a.must(#"mv "$M/Documents/one.txt" "$M/Documents/Projects/renamed.txt""#)
            try await a.must(#"mv "$M/Documents/Projects" "$M/Projects""#)
            try await a.must(#"rm "$M/two.txt""#)
            try await a.must(#"mkdir "$M/New Folder""#)
            try await a.must(#"setfattr -n user.xdg.tags -v work "$M/Projects/renamed.txt""#)
            try await eventually("B sees every change") {
                let r = try await b.sh(#"test -f "$M/Projects/renamed.txt" && test ! -e "$M/two.txt" && test -d "$M/New Folder" && test ! -e "$M/Documents/Projects" && getfattr --only-values -n user.xdg.tags "$M/Projects/renamed.txt""#)
                return r.status == 0 && r.stdout == "work"
            }
            #expect(try await b.must(#"cat "$M/Projects/renamed.txt""#) == "one\n")
            // And back the other way, including rm -r of a folder with content.
            try await b.must(#"echo b > "$M/New Folder/from-b.txt" && rm -r "$M/Projects""#)
            try await eventually("A sees B's changes") {
                (try await a.sh(#"test -f "$M/New Folder/from-b.txt" && test ! -e "$M/Projects""#)).status == 0
            }
        }
    }

    /// The kernel keeps a folder's listing between opens; every change another device makes
    /// must still show in the next `ls`, though no local operation touched the folder.
    @Test func listingsOnTheOtherDeviceFollowRemoteChanges() async throws {
        try await withDevices(["A", "B"]) { _, devices in
            let (a, b) = (devices[0], devices[1])
            func listing(_ device: TestDevice) async throws -> String { try await device.must(#"ls -1 "$M/d""#) }
            try await a.must(#"mkdir "$M/d" && echo 1 > "$M/d/one""#)
            try await eventually("B lists d/one") { try await b.sh(#"ls -1 "$M/d""#).stdout == "one\n" }
            // Listed twice: the second listing comes from the kernel's cache.
            #expect(try await listing(b) == "one\n")
            try await a.must(#"echo 2 > "$M/d/two""#)
            try await eventually("B lists the new file") { try await listing(b) == "one\ntwo\n" }
            try await a.must(#"mv "$M/d/one" "$M/d/uno""#)
            try await eventually("B lists the renamed file") { try await listing(b) == "two\nuno\n" }
            try await a.must(#"rm "$M/d/two" && mkdir "$M/d/sub""#)
            try await eventually("B lists the deletion and the new folder") { try await listing(b) == "sub\nuno\n" }
            try await a.must(#"mv "$M/d/uno" "$M/d/sub/""#)
            try await eventually("B lists the move out") { try await listing(b) == "sub\n" }
            #expect(try await b.must(#"ls -1 "$M/d/sub""#) == "uno\n")
            // An empty folder, listed twice, then filled.
            try await a.must(#"mkdir "$M/e""#)
            try await eventually("B lists the empty folder") { try await b.sh(#"ls -1 "$M/e""#).status == 0 }
            #expect(try await b.must(#"ls -1 "$M/e""#) == "")
            try await a.must(#"echo 3 > "$M/e/three""#)
            try await eventually("B lists the file in the folder that was empty") { try await b.must(#"ls -1 "$M/e""#) == "three\n" }
        }
    }

    @Test func ordinaryToolsWorkAndUnsupportedThingsAreRefused() async throws {
        try await withDevices(["A", "B"]) { _, devices in
            let (a, b) = (devices[0], devices[1])
            try await a.must(#"cd "$M" && touch t && chmod 600 t && printf 'hello world' > f && truncate -s 5 f && sed -i 's/hello/HELLO/' f"#)
            #expect(try await a.must(#"cat "$M/f""#) == "HELLO")
            #expect(try await a.must(#"stat -c %a "$M/t""#).hasPrefix("600"))
            // RENAME_NOREPLACE: mv -n leaves the target alone.
            try await a.must(#"cd "$M" && echo keep > target && echo other > source && mv -n source target"#)
            #expect(try await a.must(#"cat "$M/target""#) == "keep\n")
            let hard = try await a.sh(#"ln "$M/f" "$M/hardlink""#)
            #expect(hard.status != 0 && hard.stderr.contains("Operation not permitted"), "\(hard.stderr)")
            let device = try await a.sh(#"mknod "$M/null" c 1 3"#)
            #expect(device.status != 0 && device.stderr.contains("Operation not permitted"), "\(device.stderr)")
            let bad = try await a.sh(#"touch "$M/$(printf 'x%.0s' {1..256})""#)
            #expect(bad.status != 0 && bad.stderr.contains("File name too long"), "\(bad.stderr)")
            // No ACLs and no security labels: answered so that `ls -l` stops asking per file.
            let acl = try await a.sh(#"getfattr -n system.posix_acl_access "$M/f""#)
            #expect(acl.status != 0 && acl.stderr.contains("Operation not supported"), "\(acl.stderr)")
            let label = try await a.sh(#"getfattr -n security.selinux "$M/f""#)
            #expect(label.status != 0 && label.stderr.contains("Operation not supported"), "\(label.stderr)")
            let caps = try await a.sh(#"getfattr -n security.capability "$M/f""#)
            #expect(caps.status != 0 && caps.stderr.contains("No such attribute"), "\(caps.stderr)")
            let listing = try await a.must(#"strace -f -e trace=getxattr,lgetxattr ls -l "$M" 2>&1 >/dev/null | grep -c xattr || true"#)
            #expect(Int(listing.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 99 <= 2, "ls -l asked per file: \(listing)")
            let df = try await a.must(#"df -P "$M" | tail -1"#)
            #expect(df.hasPrefix("ubiq"), "\(df)")
            var seen = ""
            try await b.expectEventually("B sees chmod, truncate and the safe save (last seen: \(seen))", devices: [a, b]) {
                let r = try await b.sh(#"cat "$M/f"; echo; stat -c %a "$M/t""#)
                seen = r.stdout + r.stderr
                return r.stdout == "HELLO\n600\n"
            }
        }
    }

    /// Editors, `sed -i`, git and package managers save by writing a temp file and renaming it
    /// over the file, many times a second, so a rename often comes while the temp file's own
    /// create is on its way to the server. Every step must succeed, and both devices and the
    /// server must end with the one file and its last content: no temp file left anywhere,
    /// no conflicted copy of a device's own save, and no temp file showing again after its rename.
    @Test func quickSafeSavesLeaveOneFileEverywhere() async throws {
        try await withDevices(["A", "B"]) { server, devices in
            let (a, b) = (devices[0], devices[1])
            try await a.must(#"mkdir "$M/s" && seq 1 50 > "$M/s/conf""#)
            try await a.waitUntilUploaded()
            // Spaced 0 to 20 ms, so that renames fall before, during and after the create's round trip.
            let saves = try await a.sh(#"""
                cd "$M/s" || exit 9
                for i in $(seq 1 40); do
                    echo "v$i" > conf.tmp || exit 1
                    mv conf.tmp conf || exit 2
                    test -e conf.tmp && exit 3
                    sleep 0.0$((i % 3))
                done
                for i in $(seq 1 15); do sed -i "s/^/w$i/" conf || exit 4; done
                """#, timeout: .seconds(120))
            #expect(saves.status == 0, "exit \(saves.status): \(saves.stderr)")
            try await a.waitUntilUploaded()
            let last = try await a.must(#"cat "$M/s/conf""#)
            #expect(last.hasPrefix("w15w14"), "\(last)")
            #expect(try await a.must(#"ls -A "$M/s""#) == "conf\n")
            var seen = ""
            try await b.expectEventually("B shows conf alone, with A's last content (last seen: \(seen))", devices: [a, b]) {
                seen = try await b.sh(#"ls -A "$M/s"; cat "$M/s/conf""#).stdout
                return seen == "conf\n" + last
            }
            #expect(try await serverTree(server).keys.filter { $0.hasPrefix("s/") } == ["s/conf"])
            let conflicts = try await a.xattr("s/conf", "user.ubiq.hasUnresolvedConflicts")
            if conflicts != "0" {
                // Seen once under a loaded CI run and not since: what the devices held then.
                let versions = try await a.sh(#"getfattr --only-values -n user.ubiq.conflictVersions "$M/s/conf""#).stdout
                Issue.record("A's own saves made a conflict version (\(String(describing: conflicts))): \(versions)\n\(await a.diagnostics())\n\(await b.diagnostics())")
            }
        }
    }

    /// B holds a file open while A saves a new version. An open made on B meanwhile reads the
    /// new version, and the open descriptor goes on reading the whole of its own.
    @Test func anOpenMadeWhileAnOldReaderHoldsTheFileReadsTheNewVersion() async throws {
        try await withDevices(["A", "B"]) { _, devices in
            let (a, b) = (devices[0], devices[1])
            let work = try TempDirectory("ubiq-holder")
            defer { work.remove() }
            let v1 = Data((0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ $0 >> 9) })
            let v2 = Data((0..<500_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 101) })
            FileManager.default.createFile(atPath: work.path + "/v1", contents: v1)
            FileManager.default.createFile(atPath: work.path + "/v2", contents: v2)
            try await a.must(#"mkdir "$M/h" && cp '\#(work.path)/v1' "$M/h/f""#)
            try await a.waitUntilUploaded()
            try await eventually("B to read v1") { (try await b.sh(#"cmp -s '\#(work.path)/v1' "$M/h/f""#)).status == 0 }
            // B's holder: opens the file and reads its first 4 KiB, then waits for the new size,
            // opens the file again, and only then reads the rest through its first descriptor.
            let holder = Task {
                try await b.sh(#"""
                    T='\#(work.path)'
                    exec 3< "$M/h/f" || exit 1
                    dd bs=4096 count=1 <&3 > "$T/old" 2>/dev/null || exit 2
                    touch "$T/opened"
                    for i in $(seq 1 600); do [ "$(stat -c %s "$M/h/f")" = 500000 ] && break; sleep 0.05; done
                    [ "$(stat -c %s "$M/h/f")" = 500000 ] || exit 3
                    cat "$M/h/f" > "$T/new" || exit 4
                    cat <&3 >> "$T/old" || exit 5
                    """#, timeout: .seconds(60))
            }
            try await eventually("B's holder to open the file") { FileManager.default.fileExists(atPath: work.path + "/opened") }
            try await a.must(#"cp '\#(work.path)/v2' "$M/h/f""#)
            let held = try await holder.value
            #expect(held.status == 0, "the holder exited \(held.status): \(held.stderr)")
            #expect(FileManager.default.contents(atPath: work.path + "/new") == v2, "a new open reads the new version")
            #expect(FileManager.default.contents(atPath: work.path + "/old") == v1, "the old descriptor reads all of its version")
            // The old reader's short read at its end made the kernel shrink the size: it asks again.
            try await eventually("B to show the new size again") {
                try await b.must(#"stat -c %s "$M/h/f""#).trimmingCharacters(in: .whitespacesAndNewlines) == "500000"
            }
            #expect(try await b.must(#"sha256sum < "$M/h/f""#).prefix(64) == sha256Hex(v2))
        }
    }

    @Test(.enabled(if: geteuid() == 0, "acts as another user with setpriv, which needs root"))
    func filesCreatedThroughTheMountBelongToTheCaller() async throws {
        try await withDevices(["A"], mountArguments: ["--allow-other"]) { _, devices in
            let a = devices[0]
            // The test's own folders are private (mkdtemp): let the other user reach the mount.
            try await a.must(#"chmod 755 "$(dirname "$M")""#)
            try await a.must(#"mkdir "$M/shared" && chmod 777 "$M/shared""#)
            try await a.must(#"setpriv --reuid=65534 --regid=65534 --clear-groups touch "$M/shared/mine""#)
            #expect(try await a.must(#"stat -c '%u:%g' "$M/shared/mine""#) == "65534:65534\n")
            // default_permissions: the kernel checks modes against the caller.
            try await a.must(#"echo secret > "$M/private" && chmod 600 "$M/private""#)
            let denied = try await a.sh(#"setpriv --reuid=65534 --regid=65534 --clear-groups cat "$M/private""#)
            #expect(denied.status != 0 && denied.stderr.contains("Permission denied"))
        }
    }
}
