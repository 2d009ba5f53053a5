import Foundation
import ItemModel
import SyncAPI
import TestSupport
import Testing

/// Two devices edit one file from the same version: the first edit to reach the server stays
/// current, the other is kept as a conflict version, and both devices say so.
@Suite(.serialized) struct ConflictVersionTests {
    @Test func editsMadeOfflineOnBothDevicesSettleAsCurrentPlusAConflictVersionOnBoth() async throws {
        try await withDevices(["A", "B"]) { server, devices in
            let (a, b) = (devices[0], devices[1])
            let (current, loser) = try await editOnBothWhileOffline(server, a, b)
            let edits = ["edited on A\n": "A", "edited on B\n": "B"]
            let item = try #require(try await serverItem(server, named: "notes.txt"))
            #expect(item.conflicts.map(\.digest) == [sha256(Data(loser.utf8))])
            #expect(item.conflicts.first?.device == edits[loser])
            #expect(item.conflicts.first?.size == Int64(loser.utf8.count))

            // Each device lists the versions, from its own state (nothing is downloaded).
            let version = try #require(item.conflicts.first)
            for device in [a, b] {
                let listed = try await device.ubiq(["versions", device.mountpoint + "/notes.txt", "--json"])
                #expect(listed.status == 0, "\(listed.stderr)")
                let lines = listed.stdout.split(separator: "\n").map { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
                #expect(lines.count == 2, "the current version and one conflict version: \(listed.stdout)")
                #expect(lines.first??["version"] as? String == "current")
                #expect(lines.first??["size"] as? Int == current.utf8.count)
                #expect(lines.last??["version"] as? String == version.id.rawValue)
                #expect(lines.last??["device"] as? String == version.device)
                #expect(lines.last??["size"] as? Int == Int(version.size))
                #expect(lines.last??["digest"] as? String == version.digest.hex)
                // Read where the listing says, with ordinary tools: the version's own bytes.
                let versionPath = try #require(lines.last??["path"] as? String)
                #expect(versionPath == device.mountpoint + "/.ubiq-versions/\(version.id.rawValue).txt")
                #expect(try await device.must("cat '\(versionPath)'") == loser)
                let diff = try await device.sh("diff \"$M/notes.txt\" '\(versionPath)'")
                #expect(diff.status == 1 && diff.stdout.contains("> " + loser.dropLast()), "\(diff)")
                let write = try await device.sh("echo x > '\(versionPath)'")
                // As an ordinary user the kernel refuses first (the file is mode 0444); root gets the mount's EROFS.
                let why = write.stderr.contains("Read-only file system") ? "EROFS" : write.stderr.contains("Permission denied") ? "EACCES" : "?"
                #expect(write.status != 0 && why != "?", "\(write)")
                #expect(try await !device.must(#"ls -a "$M""#).contains(".ubiq-versions"), "looked up, never listed")
                let plain = try await device.ubiq(["versions", device.mountpoint + "/notes.txt"])
                #expect(plain.status == 0 && plain.stdout.contains("from \(version.device)"), "\(plain.stdout)")
                let attribute = try #require(try await device.xattr("notes.txt", "user.ubiq.conflictVersions"))
                #expect(attribute.contains(version.id.rawValue), "\(attribute)")
            }

            // Bad input: a folder, a path outside any mount, no path at all.
            try await a.must(#"mkdir "$M/folder""#)
            let folder = try await a.ubiq(["versions", a.mountpoint + "/folder"])
            #expect(folder.status == 1 && folder.stderr.contains("not a file"), "\(folder)")
            let outside = try await a.ubiq(["versions", "/tmp"])
            #expect(outside.status == 1 && outside.stderr.contains("not inside a ubiq mount"), "\(outside)")
            #expect(try await a.ubiq(["versions"]).status == 2)

            // Resolved on B by keeping the conflict version: it becomes current on both devices,
            // and the flag clears on both.
            let notes = b.mountpoint + "/notes.txt"
            #expect(try await b.ubiq(["resolve", notes]).status == 2, "neither option")
            #expect(try await b.ubiq(["resolve", notes, "--keep-current", "--keep", version.id.rawValue]).status == 2, "both options")
            let unknown = try await b.ubiq(["resolve", notes, "--keep", String(repeating: "0", count: 32)])
            #expect(unknown.status == 1 && unknown.stderr.contains("has no version"), "\(unknown)")
            let resolved = try await b.ubiq(["resolve", notes, "--keep", version.id.rawValue])
            #expect(resolved.status == 0, "\(resolved.stderr)")
            for device in [a, b] {
                try await eventually(timeout: .seconds(20), "\(device.name) to show the resolution") {
                    let flag = try await device.xattr("notes.txt", "user.ubiq.hasUnresolvedConflicts")
                    let uploaded = try await device.xattr("notes.txt", "user.ubiq.isUploaded")
                    let text = try await device.sh(#"cat "$M/notes.txt""#).stdout
                    return flag == "0" && uploaded == "1" && text == loser
                }
                #expect(try await device.xattr("notes.txt", "user.ubiq.conflictVersions") == nil)
            }
            #expect(try await serverItem(server, named: "notes.txt")?.conflicts.isEmpty == true)
            let nothingLeft = try await a.ubiq(["resolve", a.mountpoint + "/notes.txt", "--keep-current"])
            #expect(nothingLeft.status == 1 && nothingLeft.stderr.contains("has no conflict versions"), "\(nothingLeft)")
        }
    }

    @Test func keepBothMakesTheConflictVersionAFileBesideTheCurrentOneOnBothDevices() async throws {
        try await withDevices(["A", "B"]) { server, devices in
            let (a, b) = (devices[0], devices[1])
            let (current, loser) = try await editOnBothWhileOffline(server, a, b)
            let notes = a.mountpoint + "/notes.txt"
            #expect(try await a.ubiq(["resolve", notes, "--keep-both", "--keep-current"]).status == 2, "two choices")
            let outside = try await a.ubiq(["resolve", "/tmp", "--keep-both"])
            #expect(outside.status == 1 && outside.stderr.contains("not inside a ubiq mount"), "\(outside)")
            let resolved = try await a.ubiq(["resolve", notes, "--keep-both"])
            #expect(resolved.status == 0, "\(resolved.stderr)")
            // The copy is named after the device that made the edit and the edit's time (UTC).
            let pattern = #"^notes \(conflicted copy from [AB] [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{6}\)\.txt$"#
            for device in [a, b] {
                try await eventually(timeout: .seconds(20), "\(device.name) to show the copy and the resolution") {
                    let names = try await device.sh(#"ls "$M""#).stdout.split(separator: "\n").map(String.init)
                    let flag = try await device.xattr("notes.txt", "user.ubiq.hasUnresolvedConflicts")
                    return names.count == 2 && names.contains("notes.txt") && flag == "0"
                }
                let copy = try #require(try await device.sh(#"ls "$M""#).stdout.split(separator: "\n").map(String.init).first { $0 != "notes.txt" })
                #expect(copy.range(of: pattern, options: .regularExpression) != nil, "\(copy)")
                #expect(copy.contains("from \(loser == "edited on A\n" ? "A" : "B") "), "\(copy)")
                #expect(try await device.must("cat \"$M/\(copy)\"") == loser, "the conflict version, as a file")
                #expect(try await device.must(#"cat "$M/notes.txt""#) == current, "the current version stays")
                #expect(try await device.xattr("notes.txt", "user.ubiq.conflictVersions") == nil)
            }
            #expect(try await serverItem(server, named: "notes.txt")?.conflicts.isEmpty == true)
        }
    }

    /// SEMANTICS, Conflicts: a folder deleted on one device while another edited a file in it
    /// and made a new one: those files survive in their folder, and the rest of the delete
    /// applies.
    @Test func aFolderDeletedOnOneDeviceWhileTheOtherEditedAndAddedFilesInItKeepsThoseFiles() async throws {
        try await withDevices(["A", "B"]) { server, devices in
            let (a, b) = (devices[0], devices[1])
            try await a.must(#"mkdir -p "$M/d/sub" && echo one > "$M/d/f1" && echo two > "$M/d/f2" && echo deep > "$M/d/sub/f4""#)
            try await a.waitUntilUploaded()
            try await eventually("B to read the folder") { (try await b.sh(#"cat "$M/d/f2""#)).stdout == "two\n" }
            server.kill9()
            try await eventually("A and B to notice they are offline") {
                let (onA, onB) = (try await a.status().connected, try await b.status().connected)
                return !onA && !onB
            }
            try await a.must(#"rm -rf "$M/d""#)
            try await b.must(#"echo "edited on B" > "$M/d/f2" && echo new > "$M/d/f3""#)
            try await server.restart(samePort: true)
            try await a.waitUntilUploaded(timeout: .seconds(30))
            try await b.waitUntilUploaded(timeout: .seconds(30))
            let expected = ["d": "dir", "d/f2": sha256Hex(Data("edited on B\n".utf8)), "d/f3": sha256Hex(Data("new\n".utf8))]
            for device in [a, b] {
                try await device.expectEventually("\(device.name) to keep B's files and nothing else of d", devices: [a, b]) {
                    try await device.snapshot() == expected
                }
            }
            let onServer = try await serverTree(server)
            #expect(onServer == ["d": "dir", "d/f2": sha256Hex(Data("edited on B\n".utf8)), "d/f3": sha256Hex(Data("new\n".utf8))], "\(onServer)")
        }
    }

    /// An earlier content, listed with `ubiq versions --all` on one device and restored there,
    /// becomes current on both devices.
    /// Both devices resolve the same conflict while the server is away, A keeping the conflict
    /// version and B the current content: the first resolution to reach the server stands, the
    /// other settles on it, and no content is lost that nobody chose to drop (a content a
    /// `--keep VERSION` replaces stays as an earlier version).
    @Test func twoDevicesResolvingOneConflictAtOnceSettleOnOneResolution() async throws {
        try await withDevices(["A", "B"], serverArguments: ["--keep-versions", "1d"], mountArguments: ["--log-level", "debug"]) { server, devices in
            let (a, b) = (devices[0], devices[1])
            let (current, loser) = try await editOnBothWhileOffline(server, a, b)
            let versions = try await a.ubiq(["versions", a.mountpoint + "/notes.txt", "--json"])
            let lines = versions.stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            let version = try #require(lines.first { $0["kind"] as? String == "conflict" }?["version"] as? String, "\(versions)")

            server.kill9()
            try await eventually("A and B to notice they are offline") {
                let (onA, onB) = (try await a.status().connected, try await b.status().connected)
                return !onA && !onB
            }
            let keepVersion = try await a.ubiq(["resolve", a.mountpoint + "/notes.txt", "--keep", version])
            let keepCurrent = try await b.ubiq(["resolve", b.mountpoint + "/notes.txt", "--keep-current"])
            #expect(keepVersion.status == 0 && keepCurrent.status == 0, "\(keepVersion) \(keepCurrent)")
            try await server.restart(samePort: true)

            var seen: [String] = []
            try await a.expectEventually("both devices to settle on one content, with no conflict left (last seen: \(seen))", timeout: .seconds(30), devices: [a, b]) {
                seen = []
                // The state before the content: read the other way round, a content read just
                // before the answer came with flags read just after it.
                for device in [a, b] {
                    seen.append(try await device.xattr("notes.txt", "user.ubiq.hasUnresolvedConflicts") ?? "?")
                    seen.append(try await device.xattr("notes.txt", "user.ubiq.isUploaded") ?? "?")
                    seen.append(try await device.sh(#"cat "$M/notes.txt""#).stdout)
                }
                return seen[2] == seen[5] && [seen[0], seen[1], seen[3], seen[4]] == ["0", "1", "0", "1"]
            }
            let settled = seen[2]
            #expect([current, loser].contains(settled), "\(settled)")
            let item = try #require(try await serverItem(server, named: "notes.txt"))
            #expect(item.conflicts.isEmpty)
            if item.digest != sha256(Data(settled.utf8)) {
                Issue.record("the devices settled on \(settled) (current \(current)), the server holds \(item.digest?.hex ?? "-")\n[A]\n\(a.logLines(mentioning: "notes.txt"))\n[B]\n\(b.logLines(mentioning: "notes.txt"))")
            }
            if settled == loser {
                // A's choice stood: the content it replaced is kept as an earlier version.
                let all = try await b.ubiq(["versions", b.mountpoint + "/notes.txt", "--all", "--json"])
                #expect(all.stdout.contains(sha256Hex(Data(current.utf8))), "\(all.stdout)")
            }
        }
    }

    /// Each earlier version names the device that saved it.
    @Test func anEarlierVersionRestoredOnOneDeviceIsCurrentOnBoth() async throws {
        try await withDevices(["A", "B"]) { server, devices in
            let (a, b) = (devices[0], devices[1])
            // "one" and "three" saved on A, "two" on B. Through tee, which writes through the
            // descriptor it opened: the shell's `>` opens, moves the descriptor to stdout and
            // closes the first one, and that close is a save of the still empty file, which
            // under load went up as one more earlier version.
            for (text, writer, reader) in [("one", a, b), ("two", b, a), ("three", a, b)] {
                try await writer.must("printf '\(text)\\n' | tee \"$M/notes.txt\" >/dev/null")
                try await writer.waitUntilUploaded()
                try await eventually("\(reader.name) to read \(text)") { try await reader.sh(#"cat "$M/notes.txt""#).stdout == "\(text)\n" }
            }
            let notes = b.mountpoint + "/notes.txt"
            let listed = try await b.ubiq(["versions", notes, "--all", "--json"])
            #expect(listed.status == 0, "\(listed.stderr)")
            let lines = listed.stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            let earlier = lines.filter { $0["kind"] as? String == "earlier" }
            #expect(earlier.map { $0["digest"] as? String } == [sha256Hex(Data("two\n".utf8)), sha256Hex(Data("one\n".utf8))], "\(listed.stdout)")
            #expect(earlier.map { $0["device"] as? String } == ["B", "A"], "\(listed.stdout)")
            let first = try #require(earlier.last?["version"] as? String)
            let plain = try await b.ubiq(["versions", notes, "--all"])
            let rows = plain.stdout.split(separator: "\n").filter { $0.contains("ubiq restore") }
            #expect(plain.status == 0 && rows.count == 2 && rows[0].contains("from B") && rows[1].contains("from A"), "\(plain.stdout)")

            #expect(try await b.ubiq(["restore", notes, "x1"]).status == 2, "not a revision")
            let unknown = try await b.ubiq(["restore", notes, "999999"])
            #expect(unknown.status == 1 && unknown.stderr.contains("no earlier version"), "\(unknown)")
            let restored = try await b.ubiq(["restore", notes, first])
            #expect(restored.status == 0, "\(restored.stderr)")
            for device in [a, b] {
                try await eventually(timeout: .seconds(20), "\(device.name) to read the restored version") {
                    try await device.sh(#"cat "$M/notes.txt""#).stdout == "one\n"
                }
            }
            #expect(try await serverItem(server, named: "notes.txt")?.digest == sha256(Data("one\n".utf8)))
            // The restore replaced A's "three", which is now the latest earlier version, A's.
            let after = try await a.ubiq(["versions", a.mountpoint + "/notes.txt", "--all", "--json"])
            let newest = after.stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
                .first { $0["kind"] as? String == "earlier" }
            #expect(newest?["digest"] as? String == sha256Hex(Data("three\n".utf8)) && newest?["device"] as? String == "A", "\(after.stdout)")

            // The server is needed: without it, a clear error.
            server.kill9()
            try await eventually("B to notice it is offline") { !(try await b.status().connected) }
            let offline = try await b.ubiq(["versions", notes, "--all"])
            #expect(offline.status == 1 && offline.stderr.contains("cannot be used now"), "\(offline)")
        }
    }
}

/// A live item of the root folder, as the server's HTTP API shows it.
func serverItem(_ server: ServerProcess, named name: String, user: String = "alice", password: String = "alice-pw") async throws -> ItemMetadata? {
    let http = try await TestHTTP(baseURL: server.baseURL).login(user, password)
    return try await http.send(.GET, APIPath.children(.default, .root)).decode(ItemList.self).items.first { $0.name == name }
}
