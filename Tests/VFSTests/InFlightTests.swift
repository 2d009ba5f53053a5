import Foundation
import ItemModel
import LocalState
import SyncAPI
import Testing
import TestSupport
import VFS

/// Local changes made while the outbox has a request for the same item in flight. The remote
/// holds the request at a gate, so each interleaving is exact rather than left to timing.
@Suite("Changes during an upload")
struct InFlightTests {
    /// Waits until nothing is queued and every change is applied.
    func settled(_ h: Harness) async throws {
        try await h.settled("the outbox to drain and the echo to be applied")
    }

    /// Opens the gate and waits until the held call has its answer.
    func release(_ gate: CallGate, _ operation: FaultInjectingRemote.Operation, _ h: Harness) async throws {
        let before = h.remote.answered(operation)
        gate.open()
        try await eventually("the held \(operation) to be answered") { h.remote.answered(operation) > before }
    }

    @Test(
        "an edit made while the previous version uploads is sent after it"
    )
    func editDuringContentUpload() async throws {
        let h = try await Harness()
        defer { h.close() }
        let ino = try h.writeNewFile("a.txt", Array("v1".utf8))
        try await h.running {
            try await settled(h)
            let gate = h.remote.hold(.updateContent)
            try await h.overwrite(ino, Array("v2".utf8))
            try await eventually("v2's upload to be in flight") { gate.arrivals == 1 }
            try await h.overwrite(ino, Array("v3".utf8))
            try await release(gate, .updateContent, h)
            try await settled(h)
            #expect(try await h.remote.content(atPath: "/a.txt") == Array("v3".utf8))
            #expect(try await h.read(ino) == Array("v3".utf8))
            #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "1")
        }
    }

    /// A large file goes up from its cache file itself, hashed first and sent after: a writer
    /// between the two (here while the send waits at the gate) leaves bytes that do not match
    /// the declared digest, or fewer of them; the server stores nothing, and the newer version
    /// goes up instead. The server never holds a mix as the file's content.
    @Test("a large file rewritten between its hash and its send goes up as the newer version")
    func largeFileRewrittenDuringItsSend() async throws {
        let h = try await Harness()
        defer { h.close() }
        let size = 600 << 10  // past the inline limit: sent as a blob
        func version(_ byte: UInt8, count: Int = size) -> [UInt8] { [UInt8](repeating: byte, count: count) }
        let ino = try h.writeNewFile("big.bin", version(1))
        try await h.running {
            try await settled(h)
            for (index, newer) in [version(3), version(4, count: 300 << 10)].enumerated() {
                let gate = h.remote.hold(.uploadBlob)
                try await h.overwrite(ino, version(2))
                try await eventually("the blob's send to wait at the gate (\(index))") { gate.arrivals == 1 }
                try await h.overwrite(ino, newer)
                gate.open()
                try await settled(h)
                #expect(gate.arrivals >= 2, "the send was made again (\(index))")
                #expect(try await h.remote.content(atPath: "/big.bin") == newer, "(\(index))")
                #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "1")
            }
        }
    }

    /// Found by the jitter run (seed 13758878939048665277): this device moved `b` out of
    /// `c/f` and then `c/f` into `b`. The first move's request failed and waited to be tried
    /// again; the second went meanwhile, and the server refused it as a move below itself.
    /// That cycle was this device's own order, not another device's move: the second move
    /// must wait for the first, not be undone.
    @Test("a folder moved into a folder that an earlier move of this device, still waiting, takes out of it stays moved")
    func aMoveAheadOfTheMoveItNeedsWaitsForIt() async throws {
        let h = try await Harness()
        defer { h.close() }
        let c = try h.mkdir("c")
        let f = try h.mkdir("f", in: c)
        let b = try h.mkdir("b", in: f)
        try await h.running {
            try await settled(h)
            h.remote.failNext(.updateItem, with: .protocolError("injected: the server failed"))
            try h.fs.rename(parent: f, name: n("b"), newParent: rootIno, newName: n("b"), noReplace: false, exchange: false)
            try h.fs.rename(parent: c, name: n("f"), newParent: b, newName: n("f"), noReplace: false, exchange: false)
            try await eventually("both moves to reach the server") { try await h.remote.item(atPath: "/b/f") != nil && h.outbox().isEmpty }
            #expect(try h.ino("/b/f") == f, "the folder stays where it was moved here")
            #expect(try await h.remote.item(atPath: "/c/f") == nil)
        }
    }

    /// Found by the random operations (seed 3): a file moved out of a folder, the folder
    /// removed, and the move's request failed and waited. The folder's deletion went meanwhile,
    /// and the server refused it as not empty, for the file this device had already moved out:
    /// the folder came back, and a file made at its name became a conflicted copy. The move
    /// must go first, then the deletion.
    @Test("a folder emptied by a move that waits is deleted after that move, not brought back", arguments: ServerSetup.allCases)
    func aFolderDeletionWaitsForTheMoveThatEmptiesIt(server: ServerSetup) async throws {
        let h = try await Harness(server)
        defer { h.close() }
        let c = try h.mkdir("c")
        try h.writeNewFile("f", in: c, Array("f".utf8))
        try await h.running {
            try await settled(h)
            h.remote.failNext(.updateItem, with: .protocolError("injected: the server failed"))
            try h.fs.rename(parent: c, name: n("f"), newParent: rootIno, newName: n("f"), noReplace: false, exchange: false)
            try h.fs.removeDirectory(parent: rootIno, name: n("c"))
            try h.writeNewFile("c", Array("a file now".utf8))
            try await settled(h)
            #expect(try await h.remote.tree() == h.localTree())
            #expect(try h.children() == ["c", "f"])
            #expect(try await h.remote.content(atPath: "/c") == Array("a file now".utf8))
            #expect(!h.observer.events.contains { $0.kind == .reconciled }, "nothing to reconcile: \(h.observer.events.filter { $0.kind == .reconciled })")
        }
    }

    @Test(
        "a second rename made while the first one is being sent reaches the server"
    )
    func renameDuringMove() async throws {
        let h = try await Harness()
        defer { h.close() }
        try h.writeNewFile("a.txt", Array("x".utf8))
        try await h.running {
            try await settled(h)
            let gate = h.remote.hold(.updateItem)
            try h.fs.rename(parent: rootIno, name: n("a.txt"), newParent: rootIno, newName: n("b.txt"), noReplace: false, exchange: false)
            try await eventually("the first move to be in flight") { gate.arrivals == 1 }
            try h.fs.rename(parent: rootIno, name: n("b.txt"), newParent: rootIno, newName: n("c.txt"), noReplace: false, exchange: false)
            try await release(gate, .updateItem, h)
            try await settled(h)
            #expect(try await h.remote.tree().keys.sorted() == ["/c.txt"])
            #expect(try h.children() == ["c.txt"])
        }
    }

    /// Regression: the create in flight carried the old name and nothing followed it up.
    @Test("a rename made while the file's create is in flight reaches the server")
    func renameDuringCreate() async throws {
        let h = try await Harness()
        defer { h.close() }
        try await h.running {
            let gate = h.remote.hold(.createItem)
            try h.writeNewFile("draft.txt", Array("text".utf8))
            try await eventually("the create to be in flight") { gate.arrivals == 1 }
            try h.fs.rename(parent: rootIno, name: n("draft.txt"), newParent: rootIno, newName: n("final.txt"), noReplace: false, exchange: false)
            try await release(gate, .createItem, h)
            try await settled(h)
            #expect(try await h.remote.tree() == ["/final.txt": .init(kind: .file, digest: sha(Array("text".utf8)))])
            #expect(try h.children() == ["final.txt"])
        }
    }

    /// Regression (found by the random-operations test under load): the move of a file out of
    /// a folder was queued only when the file's create was answered, behind the folder's
    /// deletion. The server refused that deletion (not empty), the folder came back as a
    /// "conflict", and a new file of the folder's name became a conflicted copy.
    @Test("a file moved out of its folder while its create is in flight lets the folder go, with no conflict")
    func moveOutDuringCreateThenRemoveFolder() async throws {
        let h = try await Harness()
        defer { h.close() }
        try await h.running {
            let folder = try h.mkdir("c")
            try await settled(h)
            let gate = h.remote.hold(.createItem)
            try h.writeNewFile("e.txt", in: folder, Array("moved".utf8))
            try await eventually("the create to be in flight") { gate.arrivals == 1 }
            try h.fs.rename(parent: folder, name: n("e.txt"), newParent: rootIno, newName: n("d.txt"), noReplace: false, exchange: false)
            try h.fs.removeDirectory(parent: rootIno, name: n("c"))
            try h.writeNewFile("c", Array("new".utf8))
            try await release(gate, .createItem, h)
            try await settled(h)
            #expect(try await h.remote.tree() == [
                "/d.txt": .init(kind: .file, digest: sha(Array("moved".utf8))),
                "/c": .init(kind: .file, digest: sha(Array("new".utf8))),
            ])
            #expect(try h.children() == ["c", "d.txt"])
            let conflicts = h.observer.events.filter { $0.isConflict }
            #expect(conflicts.isEmpty, "false conflicts: \(conflicts.map { "\($0.path ?? "") \($0.detail ?? "")" })")
        }
    }

    /// Regression: the create in flight landed anyway and its echo brought the file back.
    @Test("a delete made while the file's create is in flight removes it from the server")
    func deleteDuringCreate() async throws {
        let h = try await Harness()
        defer { h.close() }
        try await h.running {
            let gate = h.remote.hold(.createItem)
            try h.writeNewFile("scratch.txt", Array("temp".utf8))
            try await eventually("the create to be in flight") { gate.arrivals == 1 }
            try h.fs.unlink(parent: rootIno, name: n("scratch.txt"))
            try await release(gate, .createItem, h)
            try await settled(h)
            let serverTree = try await h.remote.tree()
            #expect(serverTree.isEmpty, "the server still has \(serverTree.keys.sorted())")
            let children = try h.children()
            #expect(children.isEmpty, "the deleted file came back: \(children)")
        }
    }

    @Test(
        "a delete made while the file's new content uploads deletes it on the server"
    )
    func deleteDuringContentUpdate() async throws {
        let h = try await Harness()
        defer { h.close() }
        let ino = try h.writeNewFile("a.txt", Array("v1".utf8))
        try await h.running {
            try await settled(h)
            let gate = h.remote.hold(.updateContent)
            try await h.overwrite(ino, Array("v2".utf8))
            try await eventually("the content update to be in flight") { gate.arrivals == 1 }
            try h.fs.unlink(parent: rootIno, name: n("a.txt"))
            try await release(gate, .updateContent, h)
            try await settled(h)
            let serverTree = try await h.remote.tree()
            #expect(serverTree.isEmpty, "the server still has \(serverTree.keys.sorted())")
            let children = try h.children()
            #expect(children.isEmpty, "the deleted file came back: \(children)")
        }
    }

    @Test(
        "safe save while the temp file's create is in flight: the server ends with the new content under the real name"
    )
    func safeSaveDuringTempCreate() async throws {
        let h = try await Harness()
        defer { h.close() }
        let v1 = Array("old".utf8)
        let v2 = Array("new, saved by an editor".utf8)
        try h.writeNewFile("doc.txt", v1)
        try await h.running {
            try await settled(h)
            let gate = h.remote.hold(.createItem)
            try h.writeNewFile("doc.txt.tmp", v2)
            try await eventually("the temp file's create to be in flight") { gate.arrivals == 1 }
            try h.fs.rename(parent: rootIno, name: n("doc.txt.tmp"), newParent: rootIno, newName: n("doc.txt"), noReplace: false, exchange: false)
            try await release(gate, .createItem, h)
            try await settled(h)
            #expect(try await h.remote.tree() == ["/doc.txt": .init(kind: .file, digest: sha(v2))])
            #expect(try h.children() == ["doc.txt"])
            #expect(try await h.read(try h.requireIno("/doc.txt")) == v2)
        }
    }

    /// Regression: `sed -i`, git and `mv f.tmp f` loops made conflicted copies of a device's
    /// own saves, left temp files on the server and showed a renamed temp file again. The temp
    /// file's create, on its way at the rename, made a server item nobody stood for; its
    /// deletion was queued only once the create was answered, so the next temp file's create
    /// (queued before it) met that item under the temp name, and its echo showed it here.
    @Test(
        "safe saves in a row while the first temp file's create is in flight: that create's item is deleted first, no conflicted copy"
    )
    func safeSavesInARowDuringTempCreate() async throws {
        let h = try await Harness()
        defer { h.close() }
        let v3 = Array("third".utf8)
        try h.writeNewFile("doc.txt", Array("first".utf8))
        try await h.running {
            try await settled(h)
            let gate = h.remote.hold(.createItem)
            let temp = try h.writeNewFile("doc.txt.tmp", Array("second".utf8))
            let tempID = try #require(try h.local(temp)).itemID
            try await eventually("the temp file's create to be in flight") { gate.arrivals == 1 }
            try h.fs.rename(parent: rootIno, name: n("doc.txt.tmp"), newParent: rootIno, newName: n("doc.txt"), noReplace: false, exchange: false)
            #expect(try h.outbox().contains { $0.op == .delete && $0.itemID == tempID }, "the deletion of the temp file's server item waits in the outbox")
            try h.writeNewFile("doc.txt.tmp", v3)
            gate.open()
            try await settled(h)
            try h.fs.rename(parent: rootIno, name: n("doc.txt.tmp"), newParent: rootIno, newName: n("doc.txt"), noReplace: false, exchange: false)
            try await settled(h)
            #expect(try await h.remote.tree() == ["/doc.txt": .init(kind: .file, digest: sha(v3))])
            #expect(try h.children() == ["doc.txt"])
            #expect(!h.observer.events.contains { $0.isConflict }, "\(h.observer.events.map { "\($0.kind) \($0.detail ?? "")" })")
        }
    }

    /// Regression: a new file whose create was on its way when another device's file of the
    /// same name arrived was named a conflicted copy by the arrival, then again by the create's
    /// refusal: "same (conflicted copy …) (conflicted copy …).txt".
    @Test("a create refused for a name its file has already left gets no second conflicted-copy suffix")
    func createRefusedAfterTheArrivalRenamedIt() async throws {
        let h = try await Harness()
        defer { h.close() }
        try await h.running {
            try await settled(h)
            let gate = h.remote.hold(.createItem)
            let mine = try h.writeNewFile("same.txt", Array("mine".utf8))
            try await eventually("this device's create to be in flight") { gate.arrivals == 1 }
            try await h.remote.otherDevice.createFile("same.txt", content: Array("theirs".utf8))
            try await eventually("the other device's file to arrive") { try h.local(mine)?.name != "same.txt" }
            try await release(gate, .createItem, h)
            try await settled(h)
            let names = try h.children()
            #expect(names.count == 2 && names.contains("same.txt"), "\(names)")
            let copy = try #require(try h.local(mine)).name
            #expect(copy.components(separatedBy: "conflicted copy").count == 2, "one suffix: \(copy)")
            #expect(Set(try await h.remote.tree().keys) == Set(names.map { "/" + $0 }))
        }
    }

    /// Regression: the saved file took the revision the replaced file had when it was renamed
    /// over it, while that file's own edit was still on its way. The edit's answer (the next
    /// revision) went to a deleted row, so the save went up from the older revision and the
    /// server refused it as a conflict with this device's own edit. `sed -i` after `truncate`
    /// did this in about one round in five.
    @Test(
        "safe save while the replaced file's previous edit uploads: the save goes up from the revision that edit made, no conflict"
    )
    func safeSaveDuringTargetUpload() async throws {
        let h = try await Harness()
        defer { h.close() }
        let saved = Array("saved by an editor".utf8)
        let ino = try h.writeNewFile("doc.txt", Array("hello world".utf8))
        try await h.running {
            try await settled(h)
            let edit = h.remote.hold(.updateContent)
            try await h.overwrite(ino, Array("hello".utf8))
            try await eventually("the edit of doc.txt to be in flight") { edit.arrivals == 1 }
            // The temp file's create waits behind the edit in flight, so the temp file has no
            // revision when it is renamed over: that is what makes the rename a safe save.
            try h.writeNewFile("doc.txt.tmp", saved)
            try h.fs.rename(parent: rootIno, name: n("doc.txt.tmp"), newParent: rootIno, newName: n("doc.txt"), noReplace: false, exchange: false)
            try await release(edit, .updateContent, h)
            try await settled(h)
            #expect(try await h.remote.tree() == ["/doc.txt": .init(kind: .file, digest: sha(saved))])
            let now = try h.requireIno("/doc.txt")
            #expect(try h.xattr(now, "user.ubiq.uploadingError") == nil)
            #expect(try await h.read(now) == saved)
        }
    }

    @Test("a safe save keeps the saved file's own mode and attributes on the server, not the replaced file's")
    func safeSaveSendsModeAndAttributes() async throws {
        let h = try await Harness()
        defer { h.close() }
        let ino = try h.writeNewFile("doc.txt", Array("v1".utf8))
        try await h.running {
            try await settled(h)
            try h.fs.setXattr(ino, name: "user.k", value: Array("old".utf8), create: false, replace: false)
            try h.fs.setXattr(ino, name: "user.same", value: Array("kept".utf8), create: false, replace: false)
            try await settled(h)
            let id = try #require(try await h.remote.item(atPath: "/doc.txt")).id
            // Offline, so that the temp file is still new when it is renamed over: a safe save.
            h.remote.isOnline = false
            try await eventually("the engine to notice it is offline") { !h.engine.isConnected }
            let tmp = try h.writeNewFile("doc.txt.tmp", Array("v2".utf8))
            try h.fs.setXattr(tmp, name: "user.k", value: Array("new".utf8), create: false, replace: false)
            try h.fs.setXattr(tmp, name: "user.extra", value: Array("1".utf8), create: false, replace: false)
            try h.fs.setXattr(tmp, name: "user.same", value: Array("kept".utf8), create: false, replace: false)
            _ = try await h.fs.setAttributes(tmp, .init(mode: 0o600), handle: nil)
            try h.fs.rename(parent: rootIno, name: n("doc.txt.tmp"), newParent: rootIno, newName: n("doc.txt"), noReplace: false, exchange: false)
            h.remote.isOnline = true
            try await settled(h)
            let item = try #require(try await h.remote.liveItem(id), "the same item, a new version")
            #expect(try await h.remote.content(of: id) == Array("v2".utf8))
            #expect(item.xattrs == ["user.k": Data("new".utf8), "user.extra": Data("1".utf8), "user.same": Data("kept".utf8)])
            #expect(item.mode & 0o7777 == 0o600)
            #expect(try h.store.read { try $0.xattrChanges(of: tmp) }.isEmpty)
        }
    }

    /// Regression: while every upload in flight waited on the network, the outbox did not look
    /// for new entries, so a file saved during a long upload waited for that upload to end.
    @Test("a small file saved while a large upload is in flight goes up without waiting for it")
    func smallFileDuringLargeUpload() async throws {
        let h = try await Harness()
        defer { h.close() }
        try await h.running {
            let gate = h.remote.hold(.uploadBlob)
            try h.writeNewFile("large.bin", pattern(1 << 20))
            try await eventually("the large file's content to be in flight") { gate.arrivals == 1 }
            try h.writeNewFile("note.txt", Array("saved meanwhile".utf8))
            try await eventually("note.txt to reach the server while large.bin is held") {
                try await h.remote.tree()["/note.txt"] != nil
            }
            #expect(try await h.remote.tree()["/large.bin"] == nil, "the large upload was held at its gate")
            try await release(gate, .uploadBlob, h)
            try await settled(h)
            #expect(try await h.remote.tree().keys.sorted() == ["/large.bin", "/note.txt"])
        }
    }
}
