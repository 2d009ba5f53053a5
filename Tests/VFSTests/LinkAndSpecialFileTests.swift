import Foundation
import ItemModel
import LocalState
import SyncAPI
import SyncEngine
import Testing
import TestSupport
import VFS

@Suite("Links and special files")
struct LinkAndSpecialFileTests {
    @Test("links made here reach the server with their targets as given; renames and deletes follow", arguments: ServerSetup.allCases)
    func linksGoUp(_ server: ServerSetup) async throws {
        let h = try await Harness(server)
        defer { h.close() }
        let folder = try h.mkdir("folder")
        let targets = ["relative": "../folder/x", "absolute": "/etc/hosts", "dangling": "nowhere/at all", "unicode": "Fotos/Überblick ☃"]
        var made: [String: Int64] = [:]
        for (name, target) in targets {
            let a = try h.fs.symlink(target: n(target), parent: rootIno, name: n(name), uid: getuid(), gid: getgid())
            #expect(a.kind == .symlink && a.size == Int64(target.utf8.count) && a.mode == 0o777)
            #expect(try h.fs.readlink(a.ino) == n(target))
            made[name] = a.ino
        }
        #expect(try h.fs.listXattrs(made["relative"]!) == [], "Linux keeps user.* attributes off links")
        try await h.running {
            try await eventually("the links to reach the server") {
                guard try h.outbox().isEmpty else { return false }
                return try await h.remote.tree().count == 5
            }
            var expected = Dictionary(uniqueKeysWithValues: targets.map { ("/" + $0.key, ServerView.TreeEntry.link($0.value)) })
            expected["/folder"] = .init(kind: .folder, digest: nil)
            #expect(try await h.remote.tree() == expected)
            #expect(try h.xattr(made["dangling"]!, "user.ubiq.isUploaded") == "1")
            #expect(try h.xattr(made["dangling"]!, "user.ubiq.downloadingStatus") == "current")

            try h.fs.rename(parent: rootIno, name: n("relative"), newParent: folder, newName: n("moved"), noReplace: false, exchange: false)
            try h.fs.unlink(parent: rootIno, name: n("absolute"))
            try await eventually("the rename and the delete to reach the server") {
                guard try h.outbox().isEmpty else { return false }
                return try await h.remote.tree()["/folder/moved"] == .link("../folder/x")
            }
            #expect(try await h.remote.tree()["/absolute"] == nil)
        }
    }

    @Test("a link from another device appears with its target, and `ln -sf` over it replaces it", arguments: ServerSetup.allCases)
    func linksComeDown(_ server: ServerSetup) async throws {
        let h = try await Harness(server)
        defer { h.close() }
        try await h.running {
            try await h.remote.otherDevice.createLink("latest", target: "reports/2026-11.pdf")
            let ino = try await h.appeared("/latest")
            let a = try h.fs.attributes(ino)
            #expect(a.kind == .symlink && a.size == 19 && a.blocks == 0)
            #expect(try h.fs.readlink(ino) == n("reports/2026-11.pdf"))
            #expect(try h.local(ino)?.content == .current, "a link has nothing to download")

            // `ln -sf`: a new link under a temporary name, renamed over the old one.
            _ = try h.fs.symlink(target: n("reports/2026-12.pdf"), parent: rootIno, name: n(".latest.tmp"), uid: getuid(), gid: getgid())
            try h.fs.rename(parent: rootIno, name: n(".latest.tmp"), newParent: rootIno, newName: n("latest"), noReplace: false, exchange: false)
            try await eventually("the new link to replace the old one on the server") {
                guard try h.outbox().isEmpty else { return false }
                return try await h.remote.tree() == ["/latest": .link("reports/2026-12.pdf")]
            }
        }
    }

    @Test("FIFOs and sockets are made here and stay here: never sent, status excluded, gone with their folder's move out of .nosync too", arguments: ServerSetup.allCases)
    func specialFilesStayLocal(_ server: ServerSetup) async throws {
        let h = try await Harness(server)
        defer { h.close() }
        let fifo = try h.fs.makeNode(parent: rootIno, name: n("pipe"), type: .fifo, mode: 0o600, uid: getuid(), gid: getgid())
        let socket = try h.fs.makeNode(parent: rootIno, name: n("sock"), type: .socket, mode: 0o755, uid: getuid(), gid: getgid())
        #expect(fifo.kind == .fifo && fifo.mode == 0o600 && socket.kind == .socket)
        #expect(try h.outbox().isEmpty, "nothing to send")
        #expect(try h.xattr(fifo.ino, "user.ubiq.downloadingStatus") == "excluded")
        // A folder that stops being local-only goes up without the FIFO it holds.
        let quiet = try h.mkdir("work.nosync")
        _ = try h.fs.makeNode(parent: quiet, name: n("ctl"), type: .fifo, mode: 0o600, uid: getuid(), gid: getgid())
        try h.writeNewFile("notes.txt", in: quiet, Array("notes".utf8))
        try h.fs.rename(parent: rootIno, name: n("work.nosync"), newParent: rootIno, newName: n("work"), noReplace: false, exchange: false)
        // Renamed, the FIFO is still local-only.
        try h.fs.rename(parent: rootIno, name: n("pipe"), newParent: rootIno, newName: n("pipe2"), noReplace: false, exchange: false)
        try await h.running {
            try await eventually("the folder to reach the server") {
                guard try h.outbox().isEmpty else { return false }
                return try await h.remote.tree().count == 2
            }
            #expect(try await h.remote.tree() == [
                "/work": .init(kind: .folder, digest: nil),
                "/work/notes.txt": .init(kind: .file, digest: sha(Array("notes".utf8))),
            ])
            #expect(try h.ino("/work/ctl") != nil && h.ino("/pipe2") != nil && h.ino("/sock") != nil)
            // A file renamed over a FIFO replaces it, and goes up.
            try h.writeNewFile("draft", Array("d".utf8))
            try h.fs.rename(parent: rootIno, name: n("draft"), newParent: rootIno, newName: n("sock"), noReplace: false, exchange: false)
            try await eventually("the file that replaced the socket to reach the server") {
                guard try h.outbox().isEmpty else { return false }
                return try await h.remote.tree()["/sock"] == .init(kind: .file, digest: sha(Array("d".utf8)))
            }
        }
    }

    @Test("a folder's link count is 2 plus its subfolders")
    func folderLinkCount() async throws {
        let h = try await Harness()
        defer { h.close() }
        let top = try h.mkdir("top")
        #expect(try h.fs.attributes(top).nlink == 2)
        try h.mkdir("a", in: top)
        try h.mkdir("b", in: top)
        try h.writeNewFile("f", in: top, [1])
        _ = try h.fs.symlink(target: n("a"), parent: top, name: n("l"), uid: getuid(), gid: getgid())
        #expect(try h.fs.attributes(top).nlink == 4)
        try h.fs.removeDirectory(parent: top, name: n("a"))
        #expect(try h.fs.attributes(top).nlink == 3)
        #expect(try h.fs.attributes(try h.requireIno("/top/f")).nlink == 1)
    }

    @Test("the server keeps links and refuses FIFOs, sockets and links without a valid target")
    func serverRules() async throws {
        let h = try await Harness()
        defer { h.close() }
        let remote = h.remote.server.connection
        _ = try await remote.ensureContainer()
        func refusal(_ request: CreateItemRequest) async -> APIErrorCode? {
            do {
                _ = try await remote.createItem(request)
                return nil
            } catch let RemoteError.refused(code, _, _) {
                return code
            } catch {
                return .internalError
            }
        }
        #expect(await refusal(CreateItemRequest(parentID: .root, name: "p", kind: .fifo)) == .invalidRequest)
        #expect(await refusal(CreateItemRequest(parentID: .root, name: "s", kind: .socket)) == .invalidRequest)
        #expect(await refusal(CreateItemRequest(parentID: .root, name: "l", kind: .symlink)) == .invalidTarget)
        #expect(await refusal(CreateItemRequest(parentID: .root, name: "l", kind: .symlink, target: "")) == .invalidTarget)
        #expect(await refusal(CreateItemRequest(parentID: .root, name: "l", kind: .symlink, target: "a\u{0}b")) == .invalidTarget)
        #expect(await refusal(CreateItemRequest(parentID: .root, name: "l", kind: .symlink, target: String(repeating: "x", count: 4096))) == .invalidTarget)
        #expect(await refusal(CreateItemRequest(parentID: .root, name: "l", kind: .symlink, digest: .empty, target: "t")) == .invalidRequest)
        #expect(await refusal(CreateItemRequest(parentID: .root, name: "f", kind: .file, target: "t")) == .invalidRequest)
        let id = ItemID.random()
        let link = try await remote.createItem(CreateItemRequest(parentID: .root, name: "l", kind: .symlink, id: id, target: "t"))
        #expect(link.kind == .symlink && link.target == "t" && link.size == 1 && link.digest == nil)
        // A retried create gets the same link back; a different target under the same id is refused.
        #expect(try await remote.createItem(CreateItemRequest(parentID: .root, name: "l", kind: .symlink, id: id, target: "t")) == link)
        #expect(await refusal(CreateItemRequest(parentID: .root, name: "l", kind: .symlink, id: id, target: "u")) == .itemIDTaken)
        #expect(try await h.remote.tree() == ["/l": .link("t")])
    }
}
