import Foundation
import ItemModel
import LocalState
import SyncAPI
import SyncEngine
import Testing
import TestSupport
import VFS

@Suite("Uploads")
struct UploadTests {
    @Test("create + write + release queue exactly one content upload, with the dirty state")
    func closeQueuesOneUpload() async throws {
        let h = try await Harness()
        defer { h.close() }
        let content = pattern(70_000)
        let opened = try h.fs.createFile(parent: rootIno, name: n("a.bin"), mode: 0o600, flags: O_CREAT | O_WRONLY, uid: getuid(), gid: getgid())
        let ino = opened.attributes.ino
        // Nothing goes up while the file is open: a file is never uploaded half-written.
        #expect(try h.outbox().isEmpty)
        _ = try h.fs.write(opened.handle, offset: 0, data: Array(content[..<40_000]))
        _ = try h.fs.write(opened.handle, offset: 40_000, data: Array(content[40_000...]))
        #expect(try h.outbox().isEmpty)
        #expect(try h.fs.attributes(ino).size == Int64(content.count), "the size shows while the file is being written")
        h.fs.release(opened.handle)

        let entries = try h.outbox()
        #expect(entries.map(\.op) == [.content])
        #expect(entries.first?.ino == ino)
        let item = try #require(try h.local(ino))
        #expect(item.content == .dirty)
        #expect(item.size == Int64(content.count))
        #expect(item.cachedBytes == Int64(content.count))
        #expect(item.revision == nil)
        #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "0")
        #expect(try h.xattr(ino, "user.ubiq.downloadingStatus") == "current")

        // A second edit before the upload ran still leaves one entry: uploads use the state at send time.
        let reopened = try await h.fs.open(ino, flags: O_WRONLY)
        _ = try h.fs.write(reopened.handle, offset: 0, data: [9])
        h.fs.release(reopened.handle)
        #expect(try h.pending(ino) == [.content])
    }

    @Test("an upload queued by a close waits while a writer that wrote into the file has it open, and sends what its fsync or release saved")
    func uploadWaitsForAWriterHalfway() async throws {
        let h = try await Harness()
        defer { h.close() }
        // `cat v1 > f`, then at once `exec 3<>f; printf PART >&3`: v1's upload is queued, and
        // the file now holds a version no one has closed. (With `exec 3>f` the truncate drops
        // v1's upload instead: see crashAfterTruncatingOpen.)
        let ino = try h.writeNewFile("f.txt", Array("version one".utf8))
        let writer = try await h.fs.open(ino, flags: O_RDWR)
        _ = try h.fs.write(writer.handle, offset: 0, data: Array("PART".utf8))
        // Queued after it, in the same batch: once this is on the server, f.txt was looked at.
        let later = try h.writeNewFile("later.txt", Array("later".utf8))
        try await h.running([.outbox]) {
            // Its answer recorded too: the server has the file a moment before its entry goes.
            try await eventually("the file queued after f.txt to be uploaded") { try h.pending(later).isEmpty }
            #expect(try await h.remote.content(atPath: "/f.txt") == nil, "nothing of f.txt went up while its writer was halfway")
            let queued = try h.outbox()
            #expect(queued.map(\.op) == [.content] && queued.first?.ino == ino, "\(queued)")
            let error = try h.xattr(ino, "user.ubiq.uploadingError")
            #expect(error == nil, "waiting for a writer is not an error")
            // A close of another descriptor of it (the shell's `cmd > f` closes one before cmd
            // writes) records the state, but the writer is still halfway.
            try h.fs.flush(writer.handle)
            try h.writeNewFile("later2.txt", Array("later".utf8))
            try await eventually("the file queued after the close to be uploaded") { try await h.remote.content(atPath: "/later2.txt") != nil }
            #expect(try await h.remote.content(atPath: "/f.txt") == nil, "a close of one descriptor is not the writer's save")
            // fsync is: that version goes up while the file stays open.
            try h.fs.fsync(writer.handle)
            try await eventually("the fsynced version to go up") { try await h.remote.content(atPath: "/f.txt") == Array("PARTion one".utf8) }
            _ = try h.fs.write(writer.handle, offset: 11, data: Array(" two".utf8))
            h.fs.release(writer.handle)
            try await eventually("the closed version to go up") { try await h.remote.content(atPath: "/f.txt") == Array("PARTion one two".utf8) }
            try await eventually("the outbox to drain") { try h.outbox().isEmpty }
            #expect(try h.local(ino)?.content == .current)
        }
    }

    @Test("a truncate through a descriptor (truncate(1)) is saved by that descriptor's close, while other writers hold the file")
    func truncateThroughItsDescriptorIsItsWritersSave() async throws {
        let h = try await Harness()
        defer { h.close() }
        let original = Array("0123456789-abcdefgh".utf8)
        let ino = try h.writeNewFile("t.txt", original)
        try await h.running([.outbox]) {
            try await eventually("the first version to go up") { try await h.remote.content(atPath: "/t.txt") == original }
            try await eventually("its upload to be recorded") { try h.outbox().isEmpty }
            // Writers that hold the file and wrote (`exec 3>>t.txt; printf XY >&3`): several, so
            // that no one of them is the truncating descriptor by chance.
            var holders: [UInt64] = []
            for _ in 0..<5 {
                let holder = try await h.fs.open(ino, flags: O_WRONLY | O_APPEND)
                _ = try h.fs.write(holder.handle, offset: Int64(original.count), data: Array("XY".utf8))
                holders.append(holder.handle)
            }
            // truncate -s 12: open, ftruncate through that descriptor, close.
            let truncating = try await h.fs.open(ino, flags: O_WRONLY)
            _ = try await h.fs.setAttributes(ino, FileSystem.AttributeChanges(size: 12), handle: truncating.handle)
            try h.fs.flush(truncating.handle)
            h.fs.release(truncating.handle)
            try await eventually("the truncated version, saved by its writer's close, to go up") {
                try await h.remote.content(atPath: "/t.txt") == Array(original.prefix(12))
            }
            for holder in holders { h.fs.release(holder) }
        }
    }

    @Test("new small files go up in batches; one the server refuses is handled on its own", arguments: ServerSetup.allCases)
    func smallFilesGoUpInBatches(_ server: ServerSetup) async throws {
        let h = try await Harness(server)
        defer { h.close() }
        // Another device has a file this one has not heard of under one of the names.
        try await h.remote.otherDevice.createFile("f08.txt", content: Array("theirs".utf8))
        var expected: [String: [UInt8]] = [:]
        let folder = try h.mkdir("dir")
        for i in 0..<40 {
            let name = String(format: "f%02d.txt", i)
            let content = pattern(3_000 + i, seed: UInt8(i))
            _ = try h.writeNewFile(name, in: i % 2 == 0 ? rootIno : folder, content)
            expected[i % 2 == 0 ? "/\(name)" : "/dir/\(name)"] = content
        }
        try await h.running([.outbox]) {
            try await eventually("the outbox to drain") { try h.outbox().isEmpty }
        }
        let tree = try await h.remote.tree()
        for (path, content) in expected where path != "/f08.txt" {
            #expect(tree[path]?.digest == sha(content), "\(path) is on the server")
        }
        // Ours was kept beside theirs, as a conflicted copy; theirs is untouched.
        #expect(tree["/f08.txt"]?.digest == sha(Array("theirs".utf8)))
        #expect(tree.contains { $0.key.hasPrefix("/f08 (conflicted copy from") && $0.value.digest == sha(expected["/f08.txt"]!) },
                "\(tree.keys.sorted().filter { $0.hasPrefix("/f08") })")
        // Batches carried the files (the folder's create and the refused one went alone).
        let batches = h.remote.calls(.createItems)
        #expect(batches >= 1 && batches <= 10, "\(batches) batches for 40 files")
        #expect(h.remote.calls(.createItem) <= 4)
        for path in expected.keys where path != "/f08.txt" {
            let ino = try h.requireIno(path)
            #expect(try h.local(ino)?.content == .current)
            #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "1")
        }
    }

    @Test("a closed file reaches the server with the same SHA-256, and its status turns uploaded", arguments: ServerSetup.allCases)
    func uploadReachesServer(_ server: ServerSetup) async throws {
        let h = try await Harness(server)
        defer { h.close() }
        let content = pattern(300_000, seed: 3)
        let ino = try h.writeNewFile("doc.bin", content)
        try await h.running {
            try await eventually("the outbox to drain") { try h.outbox().isEmpty }
            let remote = try #require(try await h.remote.item(atPath: "/doc.bin"))
            #expect(remote.digest == sha(content))
            #expect(remote.size == Int64(content.count))
            #expect(remote.mode == 0o644)
            #expect(try await h.remote.content(of: remote.id).map(sha) == sha(content))
            let local = try #require(try h.local(ino))
            #expect(local.itemID == remote.id)
            #expect(local.revision == remote.revision)
            #expect(local.content == .current)
            #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "1")
            #expect(try h.xattr(ino, "user.ubiq.percentUploaded") == "100")
            #expect(try h.xattr(ino, "user.ubiq.downloadingStatus") == "current")
            #expect(try h.xattr(ino, "user.ubiq.itemID") == remote.id.rawValue)
            #expect(try h.xattr(ino, "user.ubiq.revision") == remote.revision.rawValue)
            // Our own change comes back on the push stream and changes nothing.
            try await eventually("the echo to be applied") { try await h.caughtUp() }
            #expect(try h.local(ino)?.content == .current)
            #expect(sha(try await h.read(ino)) == sha(content))
        }
    }

    @Test("folders and nested files go up parent first, with their names", arguments: ServerSetup.allCases)
    func nestedTreeUploads(_ server: ServerSetup) async throws {
        let h = try await Harness(server)
        defer { h.close() }
        let a = try h.mkdir("a")
        let b = try h.mkdir("b", in: a)
        try h.writeNewFile("deep.txt", in: b, Array("deep".utf8))
        try h.writeNewFile("empty.txt", in: a, [])
        try await h.running {
            try await eventually("the outbox to drain") { try h.outbox().isEmpty }
            #expect(try await h.remote.tree() == [
                "/a": .init(kind: .folder, digest: nil),
                "/a/b": .init(kind: .folder, digest: nil),
                "/a/b/deep.txt": .init(kind: .file, digest: sha(Array("deep".utf8))),
                "/a/empty.txt": .init(kind: .file, digest: .empty),
            ])
        }
    }

    @Test("safe save: a temp file renamed over an uploaded file becomes its next revision, same id", arguments: ServerSetup.allCases)
    func safeSave(_ server: ServerSetup) async throws {
        let h = try await Harness(server)
        defer { h.close() }
        let v1 = Array("version one".utf8)
        let v2 = Array("version two, saved by an editor".utf8)
        try h.writeNewFile("doc.txt", v1)
        try await h.running {
            try await eventually("doc.txt to be uploaded") { try await h.remote.item(atPath: "/doc.txt") != nil && h.outbox().isEmpty }
            let original = try #require(try await h.remote.item(atPath: "/doc.txt"))
            try await eventually("the echo to be applied") { try await h.caughtUp() }

            // The editor saves while this device cannot reach the server, so that the temp file is
            // certainly not uploaded under its own name before the rename (see InFlightTests).
            h.remote.isOnline = false
            try h.writeNewFile(".doc.txt.swp", v2)
            try h.fs.rename(parent: rootIno, name: n(".doc.txt.swp"), newParent: rootIno, newName: n("doc.txt"), noReplace: false, exchange: false)
            let saved = try h.requireIno("/doc.txt")
            #expect(try h.ino("/.doc.txt.swp") == nil)
            #expect(try h.xattr(saved, "user.ubiq.itemID") == original.id.rawValue, "the saved file keeps the item's identity")
            #expect(sha(try await h.read(saved)) == sha(v2))
            h.remote.isOnline = true

            try await eventually("the save to reach the server") { try h.outbox().isEmpty }
            let now = try #require(try await h.remote.item(atPath: "/doc.txt"))
            #expect(now.id == original.id)
            #expect(now.revision != original.revision)
            #expect(now.digest == sha(v2))
            let serverTree = try await h.remote.tree()
            #expect(serverTree.count == 1, "no temp file on the server: \(serverTree)")
            try await eventually("the echo to be applied") { try await h.caughtUp() }
            #expect(sha(try await h.read(saved)) == sha(v2))
            #expect(try h.xattr(saved, "user.ubiq.isUploaded") == "1")
        }
    }

    @Test("rename, move and delete of uploaded items reach the server", arguments: ServerSetup.allCases)
    func metadataChangesReachServer(_ server: ServerSetup) async throws {
        let h = try await Harness(server)
        defer { h.close() }
        let folder = try h.mkdir("folder")
        try h.writeNewFile("a.txt", Array("a".utf8))
        try h.writeNewFile("gone.txt", Array("gone".utf8))
        try await h.running {
            try await eventually("the first upload") { try await h.remote.tree().count == 3 && h.outbox().isEmpty }
            let aID = try #require(try await h.remote.item(atPath: "/a.txt")).id
            try h.fs.rename(parent: rootIno, name: n("a.txt"), newParent: folder, newName: n("b.txt"), noReplace: false, exchange: false)
            try h.fs.unlink(parent: rootIno, name: n("gone.txt"))
            try await eventually("the changes to reach the server") { try h.outbox().isEmpty }
            #expect(try await h.remote.tree() == [
                "/folder": .init(kind: .folder, digest: nil),
                "/folder/b.txt": .init(kind: .file, digest: sha(Array("a".utf8))),
            ])
            #expect(try await h.remote.item(atPath: "/folder/b.txt")?.id == aID)
        }
    }

    /// Regression: each item's queued move carries only its final name, so two swapped names
    /// each waited for the other, and the outbox sent the two moves to each other thousands of
    /// times a second, never draining (seen in the mount test's random burst).
    @Test("names swapped through a temporary name reach the server, with no conflicted copy")
    func swappedNamesReachServer() async throws {
        try await cycleStartingWithAMovedToT { h, aID, bID in
            try h.fs.rename(parent: rootIno, name: n("b"), newParent: rootIno, newName: n("a"), noReplace: false, exchange: false)
            try h.fs.rename(parent: rootIno, name: n("t"), newParent: rootIno, newName: n("b"), noReplace: false, exchange: false)
            try await h.settled("the swap to reach the server")
            #expect(try await h.remote.tree() == [
                "/a": .init(kind: .file, digest: sha(Array("second".utf8))),
                "/b": .init(kind: .file, digest: sha(Array("first".utf8))),
            ])
            #expect(try await h.remote.item(atPath: "/b")?.id == aID)
            #expect(try await h.remote.item(atPath: "/a")?.id == bID)
            #expect(try h.children() == ["a", "b"])
        }
    }

    /// The cycle runs through a new folder: `a` wants `b`'s name, `b` wants to go into a new
    /// folder named `a`, and that folder's create wants the name `a` still holds on the server.
    @Test("a cycle of names through a new folder reaches the server")
    func cycleThroughNewFolderReachesServer() async throws {
        try await cycleStartingWithAMovedToT { h, _, _ in
            let folder = try h.mkdir("a")
            try h.fs.rename(parent: rootIno, name: n("b"), newParent: folder, newName: n("b"), noReplace: false, exchange: false)
            try h.fs.rename(parent: rootIno, name: n("t"), newParent: rootIno, newName: n("b"), noReplace: false, exchange: false)
            try await h.settled("the cycle to reach the server")
            #expect(try await h.remote.tree() == [
                "/a": .init(kind: .folder, digest: nil),
                "/a/b": .init(kind: .file, digest: sha(Array("second".utf8))),
                "/b": .init(kind: .file, digest: sha(Array("first".utf8))),
            ])
        }
    }

    /// Regression: the item holding the name moves into the new folder that wants it. The
    /// folder's create waits for the holder's move to free the name, and that move waits for
    /// the folder's create (its new parent): the outbox sent the two to each other without end,
    /// on one thread, its memory growing, until the process was killed.
    @Test("a folder moved into a new folder that takes its name reaches the server")
    func holderMovedIntoTheNewFolderTakingItsName() async throws {
        let first = try await Harness()
        defer { first.close() }
        let old = try first.mkdir("a")
        try first.writeNewFile("inside", in: old, Array("kept".utf8))
        try await first.running { try await first.settled("the first folder to reach the server") }
        let oldID = try #require(try await first.remote.item(atPath: "/a")).id
        // Made while no outbox runs, so that the folder's create goes with its final name.
        let h = try await first.restarted()
        let made = try h.mkdir("n")
        try h.fs.rename(parent: rootIno, name: n("a"), newParent: made, newName: n("a"), noReplace: false, exchange: false)
        try h.fs.rename(parent: rootIno, name: n("n"), newParent: rootIno, newName: n("a"), noReplace: false, exchange: false)
        try await h.running {
            try await h.settled("the new folder and the move to reach the server")
            #expect(try await h.remote.tree() == [
                "/a": .init(kind: .folder, digest: nil),
                "/a/a": .init(kind: .folder, digest: nil),
                "/a/a/inside": .init(kind: .file, digest: sha(Array("kept".utf8))),
            ])
            #expect(try await h.remote.item(atPath: "/a/a")?.id == oldID)
            #expect(h.observer.events.filter { $0.isConflict }.isEmpty)
            #expect(!h.observer.events.contains { $0.detail == SyncEngine.loopOfWaits }, "the loop was broken, not cut off")
        }
    }

    /// Where both cycles start: `a` ("first") and `b` ("second") on the server, then `a`
    /// renamed to `t`. `body` gets their item IDs and closes the cycle; after it, no item may
    /// have become a conflicted copy.
    func cycleStartingWithAMovedToT(_ body: (Harness, ItemID, ItemID) async throws -> Void) async throws {
        let h = try await Harness()
        defer { h.close() }
        try h.writeNewFile("a", Array("first".utf8))
        try h.writeNewFile("b", Array("second".utf8))
        try await h.running {
            try await h.settled("the first uploads")
            let (aID, bID) = (try #require(try await h.remote.item(atPath: "/a")).id, try #require(try await h.remote.item(atPath: "/b")).id)
            try h.fs.rename(parent: rootIno, name: n("a"), newParent: rootIno, newName: n("t"), noReplace: false, exchange: false)
            try await body(h, aID, bID)
            #expect(h.observer.events.filter { $0.isConflict }.isEmpty)
        }
    }

    @Test("the engine forgets a file's write generations once it is closed and uploaded: a long-running mount does not keep one per file it ever wrote")
    func writeGenerationsAreForgotten() async throws {
        let h = try await Harness()
        defer { h.close() }
        var inos: [Int64] = []
        for i in 0..<20 { inos.append(try h.writeNewFile("f\(i).txt", Array("content \(i)".utf8))) }
        try await h.overwrite(inos[0], Array("second version".utf8))
        #expect(h.fs.openFiles.filesWithWriteGenerations == 0, "closed files with nothing uploading keep none")

        // A writer that fsyncs keeps its file's entry while it is open, across the upload.
        let writer = try await h.fs.open(inos[1], flags: O_RDWR)
        _ = try h.fs.write(writer.handle, offset: 0, data: Array("fsynced".utf8))
        try h.fs.fsync(writer.handle)
        try await h.running([.outbox, .changeFeed]) {
            try await eventually("the fsynced version to be uploaded") { try await h.remote.content(atPath: "/f1.txt") == Array("fsynced 1".utf8) }
            try await h.settled()
            #expect(h.fs.openFiles.filesWithWriteGenerations == 1, "only the file still open for writing")
            _ = try h.fs.write(writer.handle, offset: 0, data: Array("FSYNCED".utf8))
            h.fs.release(writer.handle)
            try await eventually("the last version to be uploaded") { try await h.remote.content(atPath: "/f1.txt") == Array("FSYNCED 1".utf8) }
            try await h.settled()
            #expect(try await h.remote.content(atPath: "/f19.txt") == Array("content 19".utf8))
            #expect(h.fs.openFiles.filesWithWriteGenerations == 0, "every upload done, no writer open")
        }
    }
}
