import Foundation
import ItemModel
import SyncAPI
import TestSupport
import Testing

/// Failures `RandomConvergenceTests` found, each reduced to its few steps.
extension CrashAndDiskTests {
    /// Seed 20261129: B edits `f` offline while the server's content of `f` moves on (an API
    /// client) and A renames `f` to `g`. Once B is back, its edit becomes a conflict version,
    /// and B must show the file as `g`, as A and the server do.
    @Test
    func aRenameReachesTheDeviceWhoseEditBecameAConflictVersion() async throws {
        try await withRelayedDevices { server, devices, relays in
            let (a, b) = (devices[0], devices[1])
            let http = try await TestHTTP(baseURL: server.baseURL).login("alice", "alice-pw")
            let file = try await http.createFile(.default, name: "f", content: Data("base\n".utf8))
            for device in devices {
                try await device.expectEventually("\(device.name) to read f", devices: devices) {
                    try await device.sh(#"cat "$M/f""#).stdout == "base\n"
                }
            }
            relays[1].cut()
            try await b.must(#"printf 'B\n' | tee -a "$M/f" >/dev/null"#)
            let content = Data("base\nH\n".utf8)
            let r = try await http.json(.PUT, APIPath.content(.default, file.id), UpdateContentRequest(baseRevision: file.revision, digest: sha256(content), content: content))
            #expect(r.status == 200)
            try await a.expectEventually("A to read the API's edit", devices: devices) {
                try await a.sh(#"cat "$M/f""#).stdout == "base\nH\n"
            }
            try await a.must(#"mv "$M/f" "$M/g""#)
            try await a.waitUntilUploaded()
            relays[1].rejoin()
            try await b.waitUntilUploaded()
            try await b.expectEventually("B to show g only, with its edit as a conflict version", devices: devices) {
                try await b.sh(#"cd "$M" && ls && getfattr --only-values -n user.ubiq.hasUnresolvedConflicts g"#).stdout == "g\n1"
            }
        }
    }

    /// B appends a line to a placeholder; while B's open waits for the download, another
    /// device appends its own line, a newer version that B's open then waits for. Both lines
    /// must end up in the file, B's after the other. Seeds 20261254, 20261378 and 20261390 lost
    /// a line this way: the kernel appended at the size it held before the open waited, over
    /// the other line. The daemon now appends at the end of the file it holds.
    @Test
    func anAppendWhoseOpenWaitedForANewerVersionGoesAfterIt() async throws {
        let server = try await ServerProcess.start()
        // Answers at 2 MiB/s: the 2 MiB download that B's open waits for takes a second.
        let relay = try ThrottledRelay(to: server.port, answerBytesPerSecond: 2 << 20)
        do {
            try await server.addAccount("alice", password: "alice-pw")
            try await withMountedDevice("B", server: server, through: relay.baseURL) { b in
                let http = try await TestHTTP(baseURL: server.baseURL).login("alice", "alice-pw")
                let base = Data(repeating: UInt8(ascii: "x"), count: 2 << 20) + Data("\n".utf8)
                let file = try await http.createFile(.default, name: "f", content: base)
                try await b.expectEventually("B to show f", devices: [b]) { try await b.sh(#"[ -f "$M/f" ]"#).status == 0 }
                // The newer content is on the server before B's open starts: what remains to do
                // while B's download runs is one small request.
                let newer = base + Data("A\n".utf8)
                let digest = try await http.uploadBlob(newer)
                async let appended = b.sh(#"printf 'B\n' >> "$M/f""#, timeout: .seconds(60))
                try await b.expectEventually("B's open to wait for the download", devices: [b]) {
                    try await b.xattr("f", "user.ubiq.isDownloading") == "1"
                }
                let r = try await http.json(.PUT, APIPath.content(.default, file.id), UpdateContentRequest(baseRevision: file.revision, digest: digest, size: Int64(newer.count)))
                #expect(r.status == 200, "\(r.text)")
                let append = try await appended
                #expect(append.status == 0, "\(append.stderr)")
                try await b.waitUntilUploaded(timeout: .seconds(30))
                let held = try await b.must(#"tail -c 4 "$M/f"; stat -c %s "$M/f""#)
                #expect(held == "A\nB\n\(base.count + 4)\n", "\(held)")
                let listed = try await http.send(.GET, APIPath.children(.default, .root)).decode(ItemList.self)
                #expect(listed.items.first { $0.name == "f" }?.digest == sha256(newer + Data("B\n".utf8)))
            }
            relay.close()
            await server.stop()
        } catch {
            relay.close()
            await server.stop()
            throw error
        }
    }

    /// Seed 20261175: A has `d/f` open to append while B moves `g` over it, which deletes A's
    /// file on the server. The line A then writes and closes is an edit, and an edit wins over
    /// a deletion: it is kept, under a conflicted-copy name, next to the file that took the
    /// name. (The deletion used to apply while the file was open, and the line went nowhere.)
    @Test
    func aLineWrittenToAFileReplacedElsewhereWhileOpenIsKept() async throws {
        try await withDevices(["A", "B"]) { server, devices in
            let (a, b) = (devices[0], devices[1])
            let http = try await TestHTTP(baseURL: server.baseURL).login("alice", "alice-pw")
            let d = try await http.createFolder(.default, name: "d")
            _ = try await http.createFile(.default, parent: d.id, name: "f", content: Data("X\n".utf8))
            _ = try await http.createFile(.default, name: "g", content: Data("Y\n".utf8))
            for device in devices {
                try await device.expectEventually("\(device.name) to read d/f and g", devices: devices) {
                    try await device.sh(#"cat "$M/d/f" "$M/g""#).stdout == "X\nY\n"
                }
            }
            let signals = try TempDirectory()
            defer { signals.remove() }
            let go = signals.path + "/go", opened = signals.path + "/opened"
            try await a.must("mkfifo '\(go)'")
            // Opens the file for appending, says so, and writes only once told.
            async let writer = a.sh(#"exec 3>>"$M/d/f" && touch '\#(opened)' && read _ < '\#(go)' && printf 'kept\n' >&3 && exec 3>&-"#, timeout: .seconds(60))
            try await eventually(timeout: .seconds(10), "A's writer to open d/f") { FileManager.default.fileExists(atPath: opened) }
            try await b.must(#"mv -f "$M/g" "$M/d/f""#)
            try await b.waitUntilUploaded()
            try await a.expectEventually("A to show B's file as d/f", devices: devices) {
                try await a.sh(#"cat "$M/d/f""#).stdout == "Y\n"
            }
            try await a.must("echo go > '\(go)'")
            let wrote = try await writer
            #expect(wrote.status == 0, "\(wrote.stderr)")
            try await a.waitUntilUploaded()
            for device in devices {
                try await device.expectEventually("\(device.name) to hold the line in a conflicted copy next to d/f", devices: devices) {
                    let listed = try await device.sh(#"cd "$M/d" && ls && cat f\ \(conflicted\ copy\ from\ A\ *"#).stdout
                    return listed.hasPrefix("f\nf (conflicted copy from A ") && listed.hasSuffix("X\nkept\n")
                }
            }
        }
    }

    /// Seed 20261174: A appends to `f` and closes while another descriptor of `f` stays open;
    /// B's edit reaches the server first, so A's closed edit becomes a conflict version. What
    /// A then writes through the open descriptor edits A's own version, not B's: it must not
    /// go up over B's content as if it had been made from it. Afterwards the server holds B's
    /// line and A's later line, each in the current content or a conflict version.
    @Test
    func writesThroughADescriptorOpenAcrossItsConflictDoNotGoOverTheOtherEdit() async throws {
        try await withRelayedDevices { server, devices, relays in
            let (a, b) = (devices[0], devices[1])
            let http = try await TestHTTP(baseURL: server.baseURL).login("alice", "alice-pw")
            _ = try await http.createFile(.default, name: "f", content: Data("base\n".utf8))
            for device in devices {
                try await device.expectEventually("\(device.name) to read f", devices: devices) {
                    try await device.sh(#"cat "$M/f""#).stdout == "base\n"
                }
            }
            let signals = try TempDirectory()
            defer { signals.remove() }
            let go = signals.path + "/go", opened = signals.path + "/opened"
            try await a.must("mkfifo '\(go)'")
            relays[0].cut()
            // Opened before the conflict, written after it.
            async let writer = a.sh(#"exec 3>>"$M/f" && touch '\#(opened)' && read _ < '\#(go)' && printf 'A2\n' >&3 && exec 3>&-"#, timeout: .seconds(90))
            try await eventually(timeout: .seconds(10), "A's writer to open f") { FileManager.default.fileExists(atPath: opened) }
            try await a.must(#"printf 'A1\n' >> "$M/f""#)
            try await b.must(#"printf 'B\n' >> "$M/f""#)
            try await b.waitUntilUploaded()
            relays[0].rejoin()
            try await a.expectEventually("A to keep its edit as a conflict version", devices: devices) {
                try await a.xattr("f", "user.ubiq.hasUnresolvedConflicts") == "1"
            }
            try await a.must("echo go > '\(go)'")
            let wrote = try await writer
            #expect(wrote.status == 0, "\(wrote.stderr)")
            try await a.waitUntilUploaded()
            var contents: [String] = []
            try await a.expectEventually("the server to hold B's line and A's later line (seen: \(contents))", devices: devices) {
                let listed = try await http.send(.GET, APIPath.children(.default, .root)).decode(ItemList.self)
                guard let file = listed.items.first(where: { $0.name == "f" }) else { return false }
                contents = try await SeedFolderView.contents(of: [file], via: http).values.map { String(decoding: $0, as: UTF8.self) }
                return contents.contains { $0.contains("B\n") } && contents.contains { $0.contains("A2\n") }
            }
        }
    }
}
