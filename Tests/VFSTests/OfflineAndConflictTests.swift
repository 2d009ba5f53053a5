import Foundation
import ItemModel
import LocalState
import SyncAPI
import Testing
import TestSupport
import VFS

@Suite("Offline")
struct OfflineTests {
    @Test("offline: opening a placeholder fails promptly with EIO and sets downloadingError")
    func openPlaceholderOffline() async throws {
        let h = try await Harness()
        defer { h.close() }
        try await h.running {
            try await h.remote.otherDevice.createFile("far.bin", content: pattern(100_000))
            let ino = try await h.appeared("/far.bin")
            h.remote.isOnline = false
            let fs = h.fs
            // A deadline against a hang, not a measure of "at once": the link cut in process fails
            // at once, and what is left is scheduling, which took over 5 s at the crowded start
            // of a full test run. The mount test times the real open against a real server.
            let code = try await within(.seconds(20), "open of a placeholder while offline") {
                await errnoOf { try await fs.open(ino, flags: O_RDONLY) }
            }
            #expect(code == EIO)
            let error = try h.xattr(ino, "user.ubiq.downloadingError")
            #expect(error != nil && error != "", "downloadingError: \(error ?? "absent")")
            #expect(try h.fs.listXattrs(ino).contains("user.ubiq.downloadingError"))
            #expect(try h.downloadingStatus(ino) == "notDownloaded")
            #expect(try h.fs.attributes(ino).blocks == 0)
            #expect(try h.xattr(ino, "user.ubiq.isDownloading") == "0")

            // Back online, the same open works and the error goes away.
            h.remote.isOnline = true
            #expect(sha(try await h.read(ino)) == sha(pattern(100_000)))
            try await eventually("the error to clear") { try h.xattr(ino, "user.ubiq.downloadingError") == nil }
        }
    }

    @Test(
        "offline: every open of a placeholder fails, however fast the download fails"
    )
    func everyOfflineOpenFails() async throws {
        let h = try await Harness(inMemoryDatabase: true)
        defer { h.close() }
        try await h.running([.changeFeed]) {
            for i in 0..<300 {
                try await h.remote.otherDevice.createFile("f\(i).bin", content: pattern(10_000, seed: UInt8(truncatingIfNeeded: i)))
            }
            try await eventually("the files to appear") { try h.children().count == 300 }
            h.remote.isOnline = false
            var opened: [String] = []
            for i in 0..<300 {
                let ino = try h.requireIno("/f\(i).bin")
                do {
                    let o = try await h.fs.open(ino, flags: O_RDONLY)
                    h.fs.release(o.handle)
                    opened.append("f\(i).bin")
                } catch let error as FSError {
                    #expect(error.errno == EIO)
                }
            }
            #expect(opened.isEmpty, "open succeeded offline on placeholders \(opened)")
        }
    }

    @Test("offline: writes to a cached file work, the upload waits, and goes through once back online", arguments: ServerSetup.allCases)
    func writeOfflineThenSync(_ server: ServerSetup) async throws {
        let h = try await Harness(server)
        defer { h.close() }
        let v1 = Array("written online".utf8)
        let v2 = Array("edited while the server is away".utf8)
        let ino = try h.writeNewFile("doc.txt", v1)
        try await h.running {
            try await eventually("the first upload") { try await h.remote.item(atPath: "/doc.txt") != nil && h.outbox().isEmpty }
            let id = try #require(try await h.remote.item(atPath: "/doc.txt")).id

            h.remote.isOnline = false
            let fs = h.fs
            try await within(.seconds(20), "an offline edit of a cached file") {
                let opened = try await fs.open(ino, flags: O_RDWR)
                _ = try fs.write(opened.handle, offset: 0, data: v2)
                fs.release(opened.handle)
            }
            #expect(try await h.read(ino) == v2)
            #expect(try h.pending(ino) == [.content])
            // Whichever notices first, the feed (its stream ended) or the upload (unreachable),
            // the engine counts itself offline, and an offline outbox tries nothing more until
            // the connection is back: whether the upload was tried at all is a race.
            try await eventually("the engine to notice it is offline") { !h.engine.isConnected }
            #expect(try h.pending(ino) == [.content], "the upload stays queued")
            #expect(try await h.remote.content(of: id) == v1)
            #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "0")
            #expect(try h.xattr(ino, "user.ubiq.uploadingError") == nil, "being offline is not an upload error")

            h.remote.isOnline = true
            try await eventually("the edit to reach the server") { try await h.remote.content(of: id) == v2 }
            try await eventually("the outbox to drain") { try h.outbox().isEmpty }
            #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "1")
            // The feed says so once its stream is back, which can come after the upload did.
            try await eventually("the engine to say it is connected again") { h.engine.isConnected }
        }
    }

    @Test("an upload that finds the server unreachable is not an upload error: it stays queued and goes up later")
    func uploadMeetsAnUnreachableServer() async throws {
        let h = try await Harness()
        defer { h.close() }
        let ino = try h.writeNewFile("doc.txt", Array("v1".utf8))
        try await h.running {
            try await eventually("the first upload") { try await h.remote.item(atPath: "/doc.txt") != nil && h.outbox().isEmpty }
            let id = try #require(try await h.remote.item(atPath: "/doc.txt")).id
            let tries = h.remote.calls(.updateContent)
            h.remote.failNext(.updateContent, with: .unreachable("the link went down"))
            try await h.overwrite(ino, Array("v2".utf8))
            // The failed try is recorded on the queued entry (to be tried again), not on the item.
            try await eventually("the failed try to be recorded") {
                try h.remote.calls(.updateContent) > tries && h.outbox().first?.lastError != nil
            }
            #expect(try h.xattr(ino, "user.ubiq.uploadingError") == nil, "being unreachable is not an upload error")
            try await eventually("the edit to reach the server") { try await h.remote.content(of: id) == Array("v2".utf8) }
            try await eventually("the outbox to drain") { try h.outbox().isEmpty }
            #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "1")
        }
    }

    // 80 kB goes inline with its create, 300 kB as a blob upload first.
    @Test("an upload that fails part way is retried and lands whole", arguments: [80_000, 300_000])
    func failedUploadRetried(size: Int) async throws {
        let h = try await Harness()
        defer { h.close() }
        h.remote.failUploadsAfter = 0
        let content = pattern(size, seed: 8)
        let ino = try h.writeNewFile("retry.bin", content)
        try await h.running {
            try await eventually("an upload attempt") { h.remote.calls(.uploadBlob) + h.remote.calls(.createItem) > 0 }
            #expect(try await h.remote.item(atPath: "/retry.bin") == nil)
            #expect(try h.pending(ino) == [.content])
            h.remote.failUploadsAfter = nil
            try await eventually("the retry to land") { try h.outbox().isEmpty }
            #expect(try await h.remote.item(atPath: "/retry.bin")?.digest == sha(content))
        }
    }
}

@Suite("Another container")
struct ForeignContainerTests {
    @Test("a cache whose server's container was made anew (another server on the same address) sends and applies nothing, keeps its files, and says why")
    func anotherServerIsNotSyncedWith() async throws {
        let first = try await Harness()
        defer { first.close() }
        // Two backups of the server (same account): one from before the container was made,
        // which restored makes it anew, and one from right after, whose change log is behind.
        let server = try #require(first.remote.inMemory)
        let beforeTheContainer = try server.backup()
        _ = try await first.remote.server.connection.ensureContainer()
        let afterTheContainer = try server.backup()
        let folder = try first.mkdir("photos")
        let photo = try first.writeNewFile("p1.jpg", in: folder, Array("photo one".utf8))
        try await first.running([.outbox, .changeFeed]) {
            try await first.settled()
            // A change from elsewhere: this cache's stored cursor is past it (its own echoes
            // alone do not store theirs).
            try await first.remote.otherDevice.createFile("elsewhere.txt", content: Array("theirs".utf8))
            _ = try await first.appeared("/elsewhere.txt")
        }
        #expect(try first.xattr(photo, "user.ubiq.isUploaded") == "1")

        // The same cache, mounted again against a server that never saw it.
        let other = try await FaultInjectingRemote.inMemory(beforeTheContainer)
        let theirs = try await other.otherDevice.createFolder("photos")
        _ = try await other.otherDevice.createFile("other.jpg", in: theirs.id, content: Array("theirs".utf8))
        let h = try await Harness(remote: other, directory: first.directory)
        try h.writeNewFile("new.txt", Array("written here".utf8))
        try await h.running([.outbox, .changeFeed]) {
            try await eventually("the status to say why") { try h.engine.status().lastError?.contains("not the one this cache holds") == true }
            // Both services have looked at the container and stopped there.
            try await eventually("the outbox to look") { other.calls(.ensureContainer) >= 2 }
            #expect(try await other.tree().keys.sorted() == ["/photos", "/photos/other.jpg"], "nothing was sent to it")
            #expect(try h.children(folder) == ["p1.jpg"], "nothing of it was applied here")
            #expect(try await h.read(photo) == Array("photo one".utf8))
            #expect(try h.engine.status().connected == false)
        }
        #expect(try h.children().sorted() == ["elsewhere.txt", "new.txt", "photos"])
        #expect(try h.pending(try h.requireIno("new.txt")) == [.content], "the new file stays queued")

        // A server restored from a backup: the same container, its change log behind.
        let restored = try await Harness(remote: FaultInjectingRemote.inMemory(afterTheContainer), directory: first.directory)
        try await restored.running([.outbox, .changeFeed]) {
            try await eventually("the status to say why") { try restored.engine.status().lastError?.contains("behind") == true }
            #expect(try await restored.remote.tree().isEmpty, "nothing was sent to it")
        }

        // The right server again: syncing goes on.
        let back = try await first.restarted()
        try await back.running([.outbox, .changeFeed]) {
            try await eventually("new.txt to reach the server") { try await back.remote.content(atPath: "/new.txt") == Array("written here".utf8) }
        }
    }
}

@Suite("Conflicts")
struct ConflictTests {
    @Test("an edit on a stale base becomes a conflict version: the server keeps the other device's content, and this device shows it again", arguments: ServerSetup.allCases)
    func staleBaseKeptAsConflictVersion(_ server: ServerSetup) async throws {
        let h = try await Harness(server)
        defer { h.close() }
        let v1 = Array("base".utf8)
        let theirs = Array("the other device's edit".utf8)
        let mine = Array("this device's edit".utf8)
        let ino = try h.writeNewFile("shared.txt", v1)
        try await h.running {
            try await h.settled()
            let id = try #require(try await h.remote.item(atPath: "/shared.txt")).id
            let base = try #require(try await h.remote.liveItem(id)).revision

            // This device is away while the other one edits; then it edits the same base.
            h.remote.isOnline = false
            let other = try await h.remote.otherDevice.updateContent(id, to: theirs)
            try await h.overwrite(ino, mine)
            h.remote.isOnline = true

            try await eventually("the edit to be kept as a conflict version") { try h.xattr(ino, "user.ubiq.hasUnresolvedConflicts") == "1" }
            try await h.settled("the outbox")
            let server = try #require(try await h.remote.liveItem(id))
            #expect(try await h.remote.content(of: id) == theirs, "the server keeps the other device's content")
            #expect(server.revision.isNewer(than: other.revision), "the version came with a new revision")
            #expect(server.conflicts.map(\.digest) == [sha(mine)], "this device's edit is kept beside it")
            #expect(server.conflicts.first?.size == Int64(mine.count) && server.conflicts.first?.device == "test-device")
            #expect(server.conflicts.first?.base == base, "edited from the revision both devices had")
            #expect(try await h.remote.server.connection.hasBlob(sha(mine)), "its content is on the server")
            #expect(try h.pending(ino).isEmpty, "nothing stays queued")
            #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "1")
            #expect(try h.xattr(ino, "user.ubiq.uploadingError") == nil)
            // The versions as the file's attribute lists them, and the attribute only while there are any.
            let listed = try #require(try h.xattr(ino, "user.ubiq.conflictVersions"))
            let version = try #require(server.conflicts.first)
            let entries = try JSONDecoder().decode([ConflictVersionEntry].self, from: Data(listed.utf8))
            #expect(entries.map(\.id) == [version.id.rawValue] && entries.map(\.device) == ["test-device"])
            #expect(entries.map(\.modified) == [WallClock.isoSeconds(Int(version.modified / 1_000_000_000))])
            #expect(entries.map(\.size) == [Int64(mine.count)] && entries.map(\.digest) == [sha(mine).hex])
            #expect(try h.fs.listXattrs(ino).contains("user.ubiq.conflictVersions"))
            #expect(try !h.fs.listXattrs(rootIno).contains("user.ubiq.conflictVersions"))
            #expect(try await h.read(ino) == theirs, "this device shows the server's version again")
        }
    }

    /// A chmod, touch and rename made after the conflicting edit wait behind it in the queue.
    /// Regression of an earlier shape: the metadata change was rebased onto the server's
    /// revision, and the edit, which waited with that revision as its base, then went up over
    /// the other device's version, with no conflict shown.
    @Test("a conflict resolved here: the flag clears at once, the server drops the version, and a kept version becomes current everywhere, or a file of its own",
          arguments: ["keep-current", "keep", "keep-both"])
    func resolvedHere(choice: String) async throws {
        let keepVersion = choice == "keep"
        let h = try await Harness()
        defer { h.close() }
        let theirs = Array("the other device's edit".utf8)
        let mine = Array("this device's edit".utf8)
        let ino = try h.writeNewFile("shared.txt", Array("base".utf8))
        func resolve(_ value: String) throws {
            try h.fs.setXattr(ino, name: "user.ubiq.resolve", value: Array(value.utf8), create: false, replace: false)
        }
        try await h.running {
            try await h.settled()
            #expect(errnoOf { try resolve("keep-current") } == EINVAL, "nothing to resolve")
            let (id, version) = try await keptAsConflictVersion(h, ino, theirs: theirs, mine: mine)
            #expect(errnoOf { try resolve("keep:" + String(repeating: "0", count: 32)) } == EINVAL, "a version the file does not have")
            for bad in ["keep", "keep-all", "", "Keep-current"] { #expect(errnoOf { try resolve(bad) } == EINVAL, "'\(bad)'") }
            #expect(errnoOf { try h.fs.getXattr(ino, name: "user.ubiq.resolve") } == ENODATA, "a request, not a state")

            // Chosen while away from the server: shown at once, sent later.
            h.remote.isOnline = false
            try resolve(keepVersion ? "keep:\(version.id.rawValue)" : choice)
            #expect(try h.xattr(ino, "user.ubiq.hasUnresolvedConflicts") == "0")
            #expect(try h.xattr(ino, "user.ubiq.conflictVersions") == nil)
            #expect(try !h.fs.listXattrs(ino).contains("user.ubiq.conflictVersions"))
            #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "0", "the resolution is on its way")
            #expect(try h.pending(ino) == [.resolve])
            h.remote.isOnline = true

            try await h.settled("the resolution")
            let server = try #require(try await h.remote.item(atPath: "/shared.txt"))
            #expect(server.conflicts.isEmpty, "the server dropped the version")
            #expect(try await h.remote.content(of: id) == (keepVersion ? mine : theirs))
            #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "1")
            #expect(try h.xattr(ino, "user.ubiq.hasUnresolvedConflicts") == "0")
            #expect(try await h.read(ino) == (keepVersion ? mine : theirs))
            let copies = try await h.remote.tree().keys.filter { $0.hasPrefix("/shared (conflicted copy from ") }
            if choice == "keep-both" {
                #expect(copies.count == 1 && copies.allSatisfy { $0.hasSuffix(").txt") }, "\(copies)")
                let copy = try #require(copies.first)
                #expect(try await h.remote.content(atPath: copy) == mine, "the version is a file of its own")
                let here = try await h.appeared(copy)
                #expect(try await h.read(here) == mine)
                #expect(try h.xattr(here, "user.ubiq.hasUnresolvedConflicts") == "0")
            } else {
                #expect(copies.isEmpty)
            }
        }
    }

    @Test("a conflict version reads as a read-only file in the versions folder, looked up but never listed, until it is resolved")
    func versionsFolder() async throws {
        let h = try await Harness()
        defer { h.close() }
        let theirs = Array("the other device's edit".utf8)
        let mine = Array("this device's edit".utf8)
        let ino = try h.writeNewFile("shared.txt", Array("base".utf8))
        try await h.running {
            #expect(try h.children(h.requireIno("/.ubiq-versions")).isEmpty)
            let (_, version) = try await keptAsConflictVersion(h, ino, theirs: theirs, mine: mine)
            let listed = try JSONDecoder().decode([ConflictVersionEntry].self, from: Data(try #require(try h.xattr(ino, "user.ubiq.conflictVersions")).utf8))
            let path = "/.ubiq-versions/\(version.id.rawValue).txt"
            #expect(listed.map(\.path) == [String(path.dropFirst())])
            let top = try h.children()
            #expect(!top.contains { $0.contains("versions") }, "not listed at the top: \(top)")
            let folder = try h.requireIno("/.ubiq-versions")
            #expect(try h.children(folder) == ["\(version.id.rawValue).txt"])
            let file = try h.requireIno(path)
            let attributes = try h.fs.attributes(file)
            #expect(attributes.size == Int64(mine.count) && attributes.mode & 0o777 == 0o444 && attributes.blocks == 0, "a placeholder")
            #expect(try await h.read(file) == mine, "downloaded on open, like any placeholder")

            // Nothing in it changes.
            let name = n("\(version.id.rawValue).txt")
            #expect(errnoOf { try h.fs.createFile(parent: folder, name: n("new"), mode: 0o644, flags: O_CREAT | O_WRONLY, uid: 0, gid: 0) } == EROFS)
            #expect(errnoOf { try h.fs.unlink(parent: folder, name: name) } == EROFS)
            #expect(errnoOf { try h.fs.rename(parent: folder, name: name, newParent: rootIno, newName: n("out"), noReplace: false, exchange: false) } == EROFS)
            #expect(errnoOf { try h.fs.rename(parent: rootIno, name: n("shared.txt"), newParent: folder, newName: n("in"), noReplace: false, exchange: false) } == EROFS)
            #expect(errnoOf { try h.fs.setXattr(file, name: "user.note", value: [1], create: false, replace: false) } == EROFS)
            #expect(await errnoOf { try await h.fs.open(file, flags: O_WRONLY) } == EROFS)
            #expect(errnoOf { try h.fs.makeDirectory(parent: rootIno, name: n(".ubiq-versions"), mode: 0o755, uid: 0, gid: 0) } == EROFS)
            #expect(errnoOf { try h.fs.removeDirectory(parent: rootIno, name: n(".ubiq-versions")) } == EROFS)
            #expect(try h.pending(file).isEmpty, "never sent")
            #expect(try await h.remote.tree().keys.sorted() == ["/shared.txt"], "never sent")

            // Resolved: the version's file goes.
            try h.fs.setXattr(ino, name: "user.ubiq.resolve", value: Array("keep-current".utf8), create: false, replace: false)
            #expect(try h.ino(path) == nil)
            #expect(try h.children(folder).isEmpty)
        }
    }

    @Test("two devices resolve one conflict at once: the first resolution to reach the server wins, and the second settles on it")
    func resolvedOnTwoDevicesAtOnce() async throws {
        let h = try await Harness()
        defer { h.close() }
        let theirs = Array("the other device's edit".utf8)
        let mine = Array("this device's edit".utf8)
        let ino = try h.writeNewFile("shared.txt", Array("base".utf8))
        try await h.running {
            let (id, version) = try await keptAsConflictVersion(h, ino, theirs: theirs, mine: mine)

            // This device keeps its edit while away; the other keeps the current content first.
            h.remote.isOnline = false
            try h.fs.setXattr(ino, name: "user.ubiq.resolve", value: Array("keep:\(version.id.rawValue)".utf8), create: false, replace: false)
            try await h.remote.otherDevice.resolveConflicts(id, keep: nil)
            h.remote.isOnline = true

            try await h.settled("the second resolution to settle")
            let server = try #require(try await h.remote.item(atPath: "/shared.txt"))
            #expect(server.conflicts.isEmpty)
            #expect(try await h.remote.content(of: id) == theirs, "the first resolution stands")
            #expect(try h.xattr(ino, "user.ubiq.hasUnresolvedConflicts") == "0")
            #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "1")
            #expect(try await h.read(ino) == theirs)
        }
    }

    @Test("a conflicted edit, then a chmod, a touch and a rename here: the edit becomes a conflict version and the rest reaches the server")
    func metadataChangeOfAConflictedEdit() async throws {
        let h = try await Harness()
        defer { h.close() }
        let theirs = Array("the other device's edit".utf8)
        let mine = Array("this device's edit".utf8)
        let ino = try h.writeNewFile("shared.txt", Array("base".utf8))
        try await h.running {
            try await h.settled()
            let id = try #require(try await h.remote.item(atPath: "/shared.txt")).id
            h.remote.isOnline = false
            try await h.remote.otherDevice.updateContent(id, to: theirs)
            try await h.overwrite(ino, mine)
            _ = try await h.fs.setAttributes(ino, .init(mode: 0o600, mtime: 1_000_000_000), handle: nil)
            try h.fs.rename(parent: rootIno, name: n("shared.txt"), newParent: rootIno, newName: n("renamed.txt"), noReplace: false, exchange: false)
            h.remote.isOnline = true

            try await eventually("every change to reach the server") {
                try await h.remote.item(atPath: "/renamed.txt")?.mode == 0o600 && h.pending(ino).isEmpty
            }
            let server = try #require(try await h.remote.liveItem(id))
            #expect(try await h.remote.content(of: id) == theirs, "the other device's version was overwritten")
            #expect(server.conflicts.map(\.digest) == [sha(mine)], "the edit is a conflict version")
            #expect(server.modified == 1_000_000_000, "the touch went up")
            #expect(try h.xattr(ino, "user.ubiq.hasUnresolvedConflicts") == "1")
            #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "1")
            #expect(try await h.read(ino) == theirs)
        }
    }

    @Test(
        "a remote edit that arrives while the file is open for writing is not overwritten by the upload at close"
    )
    func remoteEditDuringOpenWrite() async throws {
        let h = try await Harness()
        defer { h.close() }
        let v1 = Array("base".utf8)
        let theirs = Array("the other device's edit".utf8)
        let mine = Array("this device's edit".utf8)
        let ino = try h.writeNewFile("shared.txt", v1)
        try await h.running {
            try await h.settled()
            let id = try #require(try await h.remote.item(atPath: "/shared.txt")).id

            let opened = try await h.fs.open(ino, flags: O_WRONLY | O_TRUNC)
            _ = try h.fs.write(opened.handle, offset: 0, data: mine)
            try await h.remote.otherDevice.updateContent(id, to: theirs)
            try await eventually("the remote edit to be applied") { try await h.caughtUp() }
            h.fs.release(opened.handle)

            try await eventually("the edit to be kept as a conflict version") { try h.xattr(ino, "user.ubiq.hasUnresolvedConflicts") == "1" }
            #expect(try await h.remote.content(of: id) == theirs, "the other device's edit was overwritten: nothing may be lost silently")
            #expect(try await h.remote.liveItem(id)?.conflicts.map(\.digest) == [sha(mine)])
            #expect(try await h.read(ino) == theirs)
        }
    }

    @Test("a remote rename of a file with a local edit: both apply")
    func renameVersusEdit() async throws {
        let h = try await Harness()
        defer { h.close() }
        let ino = try h.writeNewFile("old.txt", Array("v1".utf8))
        try await h.running {
            try await h.settled()
            let id = try #require(try await h.remote.item(atPath: "/old.txt")).id
            h.remote.isOnline = false
            try await h.remote.otherDevice.move(id, to: "new.txt")
            try await h.overwrite(ino, Array("v2".utf8))
            h.remote.isOnline = true
            try await h.settled("both changes to settle")
            #expect(try await h.remote.item(atPath: "/new.txt")?.id == id)
            #expect(try await h.remote.content(of: id) == Array("v2".utf8))
            #expect(try await h.remote.tree().count == 1)
            #expect(try h.ino("/new.txt") == ino)
            #expect(try h.ino("/old.txt") == nil)
        }
    }

    /// Regression: the refused rename took the server's new digest and kept the old size, so
    /// the download fetched the old length, failed its digest check and every read was EIO.
    @Test(
        "a local rename of a file edited on the server: both apply, and the new content reads whole",
        arguments: [false, true]
    )
    func renameVersusRemoteEdit(placeholder: Bool) async throws {
        let h = try await Harness()
        defer { h.close() }
        let ino = try h.writeNewFile("old.txt", Array("base".utf8))
        let theirs = Array("base, and more written on another device".utf8)
        try await h.running {
            try await h.settled()
            if placeholder { try h.engine.evict(ino) }
            let id = try #require(try await h.remote.item(atPath: "/old.txt")).id
            h.remote.isOnline = false
            try h.fs.rename(parent: rootIno, name: n("old.txt"), newParent: rootIno, newName: n("new.txt"), noReplace: false, exchange: false)
            try await h.remote.otherDevice.updateContent(id, to: theirs)
            h.remote.isOnline = true
            try await h.settled("both changes to settle")
            #expect(try await h.remote.item(atPath: "/new.txt")?.id == id)
            #expect(try await h.remote.content(of: id) == theirs)
            #expect(try h.local(ino)?.size == Int64(theirs.count))
            #expect(try await h.read(ino) == theirs)
            #expect(try h.xattr(ino, "user.ubiq.downloadingError") == nil)
        }
    }

    /// A row whose size is not the server's (as a refused rename once left it) fails its
    /// download's check once; the row is then refreshed from the server and reads whole.
    @Test("a download that fails its digest check refreshes the item from the server; the next read is whole")
    func mismatchRefreshesTheRow() async throws {
        let h = try await Harness()
        defer { h.close() }
        let content = Array("eleven bytes and then some".utf8)
        let ino = try h.writeNewFile("f.txt", content)
        try await h.running {
            try await h.settled()
            try h.engine.evict(ino)
            try h.store.write { w in
                var row = try #require(try w.reader.item(ino))
                row.size = 6
                try w.update(row)
            }
            // The first read gets the six bytes the row claims (a read returns once its range
            // has landed), and the download then fails its check.
            _ = try? await h.read(ino)
            try await eventually("the row to take the server's size") { try h.local(ino)?.size == Int64(content.count) }
            #expect(try await h.read(ino) == content)
            try await eventually("the download to pass its check") { try h.downloadingStatus(ino) == "current" }
            #expect(try h.xattr(ino, "user.ubiq.downloadingError") == nil)
        }
    }

    /// Regression: the edit went up again from the server's new revision, but the row never took
    /// that revision's mode and attributes (its feed entry was skipped while the edit waited),
    /// so this device kept showing the old ones for good.
    @Test("a local edit of a file whose mode and attributes changed on the server: both apply here too")
    func editVersusRemoteChmodAndXattrs() async throws {
        let h = try await Harness()
        defer { h.close() }
        let ino = try h.writeNewFile("f.txt", Array("v1".utf8))
        try await h.running {
            try await h.settled()
            let id = try #require(try await h.remote.item(atPath: "/f.txt")).id
            h.remote.isOnline = false
            try await h.remote.otherDevice.setXattrs(id, ["user.t": Data("theirs".utf8)])
            try await h.remote.otherDevice.setMode(id, 0o600)
            try await h.overwrite(ino, Array("v2, mine".utf8))
            h.remote.isOnline = true
            try await h.settled("both changes to settle")
            #expect(try await h.remote.content(of: id) == Array("v2, mine".utf8))
            #expect(try await h.remote.liveItem(id)?.xattrs["user.t"] == Data("theirs".utf8))
            #expect(try h.xattr(ino, "user.t") == "theirs")
            #expect(try h.local(ino).map { $0.mode & 0o7777 } == 0o600)
        }
    }

    @Test("attributes changed here and on another device at once: each name keeps its own change")
    func attributesMergeNameByName() async throws {
        let h = try await Harness()
        defer { h.close() }
        let ino = try h.writeNewFile("tags.txt", Array("x".utf8))
        try await h.running {
            try await h.settled()
            let id = try #require(try await h.remote.item(atPath: "/tags.txt")).id
            _ = try await h.remote.otherDevice.setXattrs(id, ["user.a": Data("1".utf8), "user.d": Data("4".utf8), "user.same": Data("old".utf8)])
            try await eventually("the first attributes to arrive") { try h.xattr(ino, "user.d") == "4" }
            // Here: add b, remove a, change `same`. Held in flight while the other device adds
            // c, removes d and changes `same` too.
            let gate = h.remote.hold(.setXattrs)
            try h.fs.setXattr(ino, name: "user.b", value: Array("2".utf8), create: false, replace: false)
            try h.fs.removeXattr(ino, name: "user.a")
            try h.fs.setXattr(ino, name: "user.same", value: Array("mine".utf8), create: false, replace: false)
            try await eventually("the change to be in flight") { gate.arrivals == 1 }
            _ = try await h.remote.otherDevice.setXattrs(id, ["user.a": Data("1".utf8), "user.c": Data("3".utf8), "user.same": Data("theirs".utf8)])
            gate.open()
            try await h.settled("the refused change to be merged and sent again")
            let expected = ["user.b": Data("2".utf8), "user.c": Data("3".utf8), "user.same": Data("mine".utf8)]
            #expect(try await h.remote.liveItem(id)?.xattrs == expected, "b and the removal of a from here, c and the removal of d from there; the later change of `same` wins")
            #expect(try h.local(ino)?.xattrs == expected)
            #expect(try h.store.read { try $0.xattrChanges(of: ino) }.isEmpty, "nothing left to merge")
        }
    }

    /// Regression: this device moved `y` into `x` while another moved `x` into `y`. The feed
    /// put `x` below `y` here, below `x`: both left the tree, and the next walk up from them
    /// (a path for an event) never ended, inside a write transaction, so the whole mount hung.
    @Test(
        "folders moved into each other on two devices: the server's first move stands, both stay in the tree, a rename here still goes up",
        arguments: [false, true]
    )
    func foldersMovedIntoEachOther(renamedToo: Bool) async throws {
        let first = try await Harness()
        defer { first.close() }
        _ = try first.mkdir("x")
        let y = try first.mkdir("y")
        try first.writeNewFile("inside", in: y, Array("kept".utf8))
        try await first.running { try await first.settled("both folders to reach the server") }
        let (xID, yID) = (try #require(try await first.remote.item(atPath: "/x")).id, try #require(try await first.remote.item(atPath: "/y")).id)
        // Made while no outbox runs: the other device's move reaches the server first.
        let h = try await first.restarted()
        let name = renamedToo ? "z" : "y"
        try h.fs.rename(parent: rootIno, name: n("y"), newParent: try h.requireIno("/x"), newName: n(name), noReplace: false, exchange: false)
        _ = try await h.remote.otherDevice.move(xID, parent: yID)
        let catchUpsBefore = h.remote.calls(.changes)
        try await h.running {
            try await h.settled("the refused move and the other device's to settle")
            let want: [String: ServerView.TreeEntry] = [
                "/\(name)": .init(kind: .folder, digest: nil),
                "/\(name)/x": .init(kind: .folder, digest: nil),
                "/\(name)/inside": .init(kind: .file, digest: sha(Array("kept".utf8))),
            ]
            #expect(try await h.remote.tree() == want)
            #expect(try await h.localTree() == want)
            #expect(try await h.remote.item(atPath: "/\(name)")?.id == yID)
            // Applied, the other device's move would loop the folders: that transaction fails
            // (`TreeCycleError`), and the feed starts over until the refused move settles it.
            #expect(h.remote.calls(.changes) == catchUpsBefore + 1, "one catch-up: the feed never failed")
        }
    }

    /// The catch-up lists each item once, at its latest change: `x`'s move into `y` can come
    /// before `y`'s move out of `x`, when `y` changed again after. Held then (it would loop the
    /// folders here), it must apply once `y`'s change has, with nothing of this device's to wait for.
    @Test("a catch-up that brings a folder's move into one still below it here applies both")
    func catchUpOrderOfCrossedMoves() async throws {
        let first = try await Harness()
        defer { first.close() }
        _ = try first.mkdir("x")
        _ = try first.mkdir("y")
        try await first.running {
            try await first.settled("both folders to reach the server")
            let (xID, yID) = (try #require(try await first.remote.item(atPath: "/x")).id, try #require(try await first.remote.item(atPath: "/y")).id)
            _ = try await first.remote.otherDevice.move(yID, parent: xID)
            try await eventually("y to arrive in x") { try first.ino("/x/y") != nil }
        }
        let h = try await first.restarted()
        let (xID, yID) = (try #require(try await h.remote.item(atPath: "/x/y")).parentID!, try #require(try await h.remote.item(atPath: "/x/y")).id)
        _ = try await h.remote.otherDevice.move(yID, parent: .root)
        _ = try await h.remote.otherDevice.move(xID, parent: yID)
        _ = try await h.remote.otherDevice.move(yID, to: "z")
        try await h.running {
            try await eventually("the other device's tree to show here") {
                guard try await h.caughtUp() else { return false }
                return try await h.localTree() == ["/z": .init(kind: .folder, digest: nil), "/z/x": .init(kind: .folder, digest: nil)]
            }
        }
    }

    @Test("edit versus delete: the edit wins and the item comes back", arguments: ServerSetup.allCases)
    func editVersusDelete(_ server: ServerSetup) async throws {
        let h = try await Harness(server)
        defer { h.close() }
        let ino = try h.writeNewFile("keep.txt", Array("v1".utf8))
        try await h.running {
            try await h.settled()
            let id = try #require(try await h.remote.item(atPath: "/keep.txt")).id
            h.remote.isOnline = false
            try await h.remote.otherDevice.delete(id)
            try await h.overwrite(ino, Array("edited".utf8))
            h.remote.isOnline = true
            try await eventually("the edit to come back to the server") {
                try await h.remote.content(atPath: "/keep.txt") == Array("edited".utf8) && h.outbox().isEmpty
            }
            #expect(try await h.read(try h.requireIno("/keep.txt")) == Array("edited".utf8))
        }
    }

    /// Seed 20261218: the refusal carried the server's state when it was made; another
    /// device's change that came through the feed while the refusal was on its way was dropped
    /// (the item was deleted here, its deletion queued), and the item came back a version behind.
    @Test("a deletion refused for another device's edit brings the item back as new as the server's latest, also when a change came while the refusal travelled")
    func aRefusedDeletionRestoresTheLatestVersion() async throws {
        let h = try await Harness()
        defer { h.close() }
        let file = try await h.remote.otherDevice.createFile("f.txt", content: Array("one".utf8))
        try await h.running {
            _ = try await h.appeared("/f.txt")
            // The deletion goes from revision one; the server has moved on when it arrives.
            let call = h.remote.hold(.deleteItem)
            try h.fs.unlink(parent: rootIno, name: n("f.txt"))
            try await eventually("the deletion to be sent") { call.arrivals == 1 }
            try await h.remote.otherDevice.updateContent(file.id, to: Array("two".utf8))
            try await eventually("the feed to pass the edit") { try await h.caughtUp() }
            // Refused with the server's state of now; a newer one comes while that answer travels.
            let answer = h.remote.holdAnswers(.deleteItem)
            call.open()
            try await eventually("the refusal to be made") { answer.arrivals == 1 }
            let latest = try await h.remote.otherDevice.updateContent(file.id, to: Array("three".utf8))
            try await eventually("the feed to pass the newer edit") { try await h.caughtUp() }
            answer.open()
            try await eventually("the item to come back") { try h.outbox().isEmpty && h.children() == ["f.txt"] }
            try await eventually("the item to be at the server's latest revision") { try h.local(h.requireIno("/f.txt"))?.revision == latest.revision }
            #expect(try await h.read(try h.requireIno("/f.txt")) == Array("three".utf8))
        }
    }

    /// `lookupFails`: the link drops as the mount asks the server whether the moved item is
    /// still there (seed 20261201: taken for "gone", the item was made anew, and the server's
    /// own stayed in its old place, which this device no longer showed).
    @Test("a move into a folder deleted on the server before the feed says so: the folder comes back with the moved item, which stays one item",
          arguments: [false, true])
    func moveIntoAFolderDeletedElsewhere(lookupFails: Bool) async throws {
        let h = try await Harness()
        defer { h.close() }
        let folder = try await h.remote.otherDevice.createFolder("d1")
        let file = try await h.remote.otherDevice.createFile("f0", content: Array("moved".utf8))
        if lookupFails { h.remote.failNext(.item, with: .unreachable("the link went down")) }
        let d1 = try await h.running([.changeFeed]) {
            _ = try await h.appeared("/f0")
            return try await h.appeared("/d1")
        }
        try h.fs.rename(parent: rootIno, name: n("f0"), newParent: d1, newName: n("nA1"), noReplace: true, exchange: false)
        _ = try await h.remote.otherDevice.delete(folder.id)
        // The move is refused before this device hears of the deletion; then the feed runs.
        try await h.running([.outbox]) {
            try await eventually("the move to be refused") { h.remote.calls(.updateItem) >= 1 && h.remote.answered(.updateItem) >= 1 }
            let feed = Task { try await h.engine.changeFeed.run() }
            defer { feed.cancel() }
            try await eventually("the folder to come back with the moved file") {
                try await h.remote.content(atPath: "/d1/nA1") == Array("moved".utf8) && h.outbox().isEmpty
            }
        }
        #expect(try await h.remote.tree().keys.sorted() == ["/d1", "/d1/nA1"], "one file, in the folder made anew")
        #expect(try await h.remote.item(atPath: "/d1/nA1")?.id == file.id, "the same item, moved")
        #expect(try h.children() == ["d1"])
    }

    /// Seed 20261179: the upload, refused for the rename, took the server's revision but kept
    /// its old name (the new one was still held here by the file the rename replaced), and the
    /// feed's rename then looked old: the file kept its old name here for good.
    @Test("an edit here, and another device renaming the file over a second one: the file takes the name here too, with the edit")
    func anEditMeetsARenameOverAnotherFile() async throws {
        let h = try await Harness()
        defer { h.close() }
        let file = try await h.remote.otherDevice.createFile("f1", content: Array("one".utf8))
        let replaced = try await h.remote.otherDevice.createFile("f2", content: Array("two".utf8))
        let ino = try await h.running([.changeFeed]) {
            _ = try await h.appeared("/f2")
            return try await h.appeared("/f1")
        }
        try await h.overwrite(ino, Array("edited".utf8))
        // `mv -f f1 f2` on the other device, before this device hears of it.
        _ = try await h.remote.otherDevice.delete(replaced.id)
        _ = try await h.remote.otherDevice.move(file.id, to: "f2")
        try await h.running([.outbox]) {
            try await eventually("the edit on the server") { try await h.remote.content(of: file.id) == Array("edited".utf8) && h.outbox().isEmpty }
            let feed = Task { try await h.engine.changeFeed.run() }
            defer { feed.cancel() }
            try await eventually("the file under its new name here") { try h.children() == ["f2"] }
        }
        #expect(try await h.remote.tree().keys.sorted() == ["/f2"])
        #expect(try await h.read(try h.requireIno("/f2")) == Array("edited".utf8))
    }

    @Test("an attribute set here on a file another device moved into a folder this device has not seen yet: both apply, and the file shows in its new place")
    func attributeVersusAMoveIntoAFolderNotYetHere() async throws {
        let h = try await Harness()
        defer { h.close() }
        let file = try await h.remote.otherDevice.createFile("f1", content: Array("moved away".utf8))
        let ino = try await h.running([.changeFeed]) { try await h.appeared("/f1") }
        let folder = try await h.remote.otherDevice.createFolder("d1")
        _ = try await h.remote.otherDevice.move(file.id, to: "nB10", parent: folder.id)
        try h.fs.setXattr(ino, name: "user.t.k1", value: Array("A436".utf8), create: false, replace: false)
        // The attribute is refused for the move before this device hears of the folder.
        try await h.running([.outbox]) {
            try await eventually("the attribute to be refused") { h.remote.answered(.setXattrs) >= 1 }
            let feed = Task { try await h.engine.changeFeed.run() }
            defer { feed.cancel() }
            try await eventually("the attribute on the server, in the moved file") {
                try await h.remote.liveItem(file.id)?.xattrs["user.t.k1"] == Data("A436".utf8) && h.outbox().isEmpty
            }
            try await eventually("the file in its new place here") { try h.fs.lookup(parent: rootIno, name: n("f1")) == nil }
        }
        let d1 = try h.requireIno("/d1")
        #expect(try h.children(d1) == ["nB10"])
        #expect(try h.xattr(try h.requireIno("/d1/nB10"), "user.t.k1") == "A436")
    }

    @Test("rename versus delete of a file never downloaded here: the rename wins and the item comes back with the server's content", arguments: [false, true])
    func renameOfAPlaceholderVersusDelete(chmodToo: Bool) async throws {
        let h = try await Harness()
        defer { h.close() }
        let content = Array("only on the server".utf8)
        let remote = try await h.remote.otherDevice.createFile("far.txt", content: content)
        try await h.running {
            let ino = try await h.appeared("/far.txt")
            h.remote.isOnline = false
            try await eventually("the engine to notice it is offline") { !h.engine.isConnected }
            try h.fs.rename(parent: rootIno, name: n("far.txt"), newParent: rootIno, newName: n("near.txt"), noReplace: true, exchange: false)
            if chmodToo { _ = try await h.fs.setAttributes(ino, .init(mode: 0o600), handle: nil) }
            _ = try await h.remote.otherDevice.delete(remote.id)
            h.remote.isOnline = true
            try await eventually("the file to come back to the server under its new name") {
                try await h.remote.content(atPath: "/near.txt") == content && h.outbox().isEmpty
            }
            #expect(try await h.read(try h.requireIno("/near.txt")) == content)
            #expect(try await h.remote.item(atPath: "/far.txt") == nil)
        }
    }

    @Test("rename versus delete of a file never downloaded here, whose content the server no longer has: the deletion stands")
    func renameOfAPlaceholderVersusDeleteWithTheContentGone() async throws {
        let h = try await Harness()
        defer { h.close() }
        let remote = try await h.remote.otherDevice.createFile("far.txt", content: Array("gone soon".utf8))
        try await h.running {
            _ = try await h.appeared("/far.txt")
            h.remote.isOnline = false
            try await eventually("the engine to notice it is offline") { !h.engine.isConnected }
            try h.fs.rename(parent: rootIno, name: n("far.txt"), newParent: rootIno, newName: n("near.txt"), noReplace: true, exchange: false)
            _ = try await h.remote.otherDevice.delete(remote.id)
            try await #require(h.remote.inMemory).collectEverythingUnnamed()
            h.remote.isOnline = true
            try await eventually("the outbox to settle") { try h.outbox().isEmpty }
            #expect(try h.children().isEmpty)
            #expect(try await h.remote.tree().isEmpty)
            #expect(h.observer.events.contains { $0.kind == .reconciled && $0.path == "/near.txt" })
        }
    }

    @Test(
        "offline, this device makes a file under the name another device gave a folder: the folder keeps its new name, the file is a conflicted copy",
        arguments: [false, true])
    func offlineCreateAgainstAnotherDevicesFolderRename(renameHereToo: Bool) async throws {
        let h = try await Harness()
        defer { h.close() }
        try await h.running {
            let d = try h.mkdir("d")
            _ = try h.writeNewFile("inside.txt", in: d, Array("x".utf8))
            try await eventually("the folder on the server") { try await h.remote.item(atPath: "/d/inside.txt") != nil && h.outbox().isEmpty }
            try await h.settled()
            let folderID = try #require(try await h.remote.item(atPath: "/d")).id
            h.remote.isOnline = false
            try await eventually("the engine to notice it is offline") { !h.engine.isConnected }
            if renameHereToo {
                // This device renames the folder to the name the other device takes for a file.
                try h.fs.rename(parent: rootIno, name: n("d"), newParent: rootIno, newName: n("e"), noReplace: true, exchange: false)
                _ = try await h.remote.otherDevice.createFile("e", content: Array("other".utf8))
            } else {
                // The other device renames the folder to the name this device takes for a file.
                _ = try h.writeNewFile("e", Array("mine".utf8))
                _ = try await h.remote.otherDevice.move(folderID, to: "e")
            }
            h.remote.isOnline = true
            try await eventually("the outbox to drain") { try h.outbox().isEmpty }
            try await h.settled()
            try await eventually("the feed to catch up") { try await h.caughtUp() }
            let remote = try await h.remote.tree().keys.sorted()
            let local = try h.children()
            #expect(local.count == 2 && remote.count == 3, "local \(local), server \(remote)")
            let copy = try #require(local.first { $0.hasPrefix("e (conflicted copy from ") }, "local \(local)")
            if renameHereToo {
                // The name was the other device's first: this device's folder is the copy.
                #expect(Set(remote) == ["/e", "/\(copy)", "/\(copy)/inside.txt"])
                #expect(try await h.remote.item(atPath: "/\(copy)")?.id == folderID)
            } else {
                #expect(Set(remote) == ["/e", "/e/inside.txt", "/\(copy)"], "the other device's rename stands")
                #expect(try await h.remote.item(atPath: "/e")?.id == folderID)
                #expect(try await h.read(try h.requireIno("/\(copy)")) == Array("mine".utf8))
            }
        }
    }
}

/// `/shared.txt` (`ino`) edited offline here (`mine`) and on another device (`theirs`), from
/// the same version: the other edit is current, this one is kept as a conflict version, and
/// everything is settled. Returns the file's ID and the version.
func keptAsConflictVersion(_ h: Harness, _ ino: Int64, theirs: [UInt8], mine: [UInt8]) async throws -> (ItemID, ConflictVersion) {
    try await h.settled()
    let id = try #require(try await h.remote.item(atPath: "/shared.txt")).id
    h.remote.isOnline = false
    try await h.remote.otherDevice.updateContent(id, to: theirs)
    try await h.overwrite(ino, mine)
    h.remote.isOnline = true
    try await eventually("the edit to be kept as a conflict version") { try h.xattr(ino, "user.ubiq.hasUnresolvedConflicts") == "1" }
    try await h.settled("the conflict version")
    return (id, try #require(try await h.remote.item(atPath: "/shared.txt")?.conflicts.first))
}
