import Foundation
import ItemModel
import LocalState
import SyncAPI
import Testing
import TestSupport
import VFS

/// Which server a case runs against: the in-memory one, or a live `ubiq-server` on loopback
/// reached through `SyncHTTPClient`. Both answer with the same rules (`SyncService`); these
/// cases check that the HTTP between them changes nothing the file system sees.
enum ServerKind: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case inMemory, live
    var testDescription: String { rawValue }
}

/// Runs a case over a harness on the server of that kind, and always closes both.
func run(_ check: some EndToEndCase, over kind: ServerKind) async throws {
    switch kind {
    case .inMemory:
        let h = try Harness()
        defer { h.close() }
        try await check.run(h)
    case .live:
        let server = try await LiveServer.start()
        do {
            let h = try VFSHarness(remote: server)
            defer { h.close() }
            try await check.run(h)
        } catch {
            await server.stop()
            throw error
        }
        await server.stop()
    }
}

/// A case written once, for a harness over either kind of server.
protocol EndToEndCase {
    func run<R: TestServer>(_ h: VFSHarness<R>) async throws
}

@Suite("End to end: the same cases over the in-memory server and a live ubiq-server")
struct EndToEndTests {
    @Test("a new file goes up with its content and is marked uploaded", arguments: ServerKind.allCases)
    func upload(_ kind: ServerKind) async throws {
        try await run(Upload(), over: kind)
    }

    struct Upload: EndToEndCase {
        func run<R: TestServer>(_ h: VFSHarness<R>) async throws {
            let content = pattern(300_000, seed: 3)
            let ino = try h.writeNewFile("doc.bin", content)
            try await h.running {
                try await h.settled()
                #expect(h.remote.content(atPath: "/doc.bin") == content)
                #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "1")
                #expect(h.remote.tree() == ["/doc.bin": .init(kind: .file, digest: sha(content))])
            }
        }
    }

    @Test("a remote edit that arrives while the file is open for writing is not overwritten by the upload at close", arguments: ServerKind.allCases)
    func conflictRefused(_ kind: ServerKind) async throws {
        try await run(ConflictRefused(), over: kind)
    }

    struct ConflictRefused: EndToEndCase {
        func run<R: TestServer>(_ h: VFSHarness<R>) async throws {
            let theirs = Array("the other device's edit".utf8)
            let mine = Array("this device's edit".utf8)
            let ino = try h.writeNewFile("shared.txt", Array("base".utf8))
            try await h.running {
                try await h.settled()
                let id = try #require(h.remote.item(atPath: "/shared.txt")).id

                let opened = try await h.fs.open(ino, flags: O_WRONLY | O_TRUNC)
                _ = try h.fs.write(opened.handle, offset: 0, data: mine)
                let other = try h.remote.otherDevice.updateContent(id, to: theirs)
                try await eventually("the remote edit to be applied") { try h.caughtUp() }
                h.fs.release(opened.handle)

                try await eventually("the upload to be refused") { try h.xattr(ino, "user.ubiq.uploadingError") != nil }
                #expect(try h.xattr(ino, "user.ubiq.uploadingError")?.contains("conflict") == true)
                #expect(h.remote.content(of: id) == theirs, "the other device's edit was overwritten: nothing may be lost silently")
                #expect(h.remote.item(atPath: "/shared.txt")?.revision == other.revision)
                #expect(try h.pending(ino) == [.content], "the local edit stays queued")
                #expect(try await h.read(ino) == mine, "the local edit is kept")
            }
        }
    }

    @Test("a rename into another folder here moves the same item on the server", arguments: ServerKind.allCases)
    func move(_ kind: ServerKind) async throws {
        try await run(Move(), over: kind)
    }

    struct Move: EndToEndCase {
        func run<R: TestServer>(_ h: VFSHarness<R>) async throws {
            let content = Array("moved".utf8)
            let folder = try h.mkdir("dest")
            try h.writeNewFile("a.txt", content)
            try await h.running {
                try await h.settled()
                let id = try #require(h.remote.item(atPath: "/a.txt")).id
                try h.fs.rename(parent: rootIno, name: n("a.txt"), newParent: folder, newName: n("b.txt"), noReplace: false, exchange: false)
                try await h.settled("the move")
                #expect(h.remote.item(atPath: "/dest/b.txt")?.id == id)
                #expect(h.remote.tree() == ["/dest": .init(kind: .folder, digest: nil), "/dest/b.txt": .init(kind: .file, digest: sha(content))])
            }
        }
    }

    @Test("a folder deleted with its subtree on another device goes here; one emptied here goes there", arguments: ServerKind.allCases)
    func deleteSubtree(_ kind: ServerKind) async throws {
        try await run(DeleteSubtree(), over: kind)
    }

    struct DeleteSubtree: EndToEndCase {
        func run<R: TestServer>(_ h: VFSHarness<R>) async throws {
            try await h.running {
                let top = try h.remote.otherDevice.createFolder("top", in: .root, xattrs: [:])
                let inner = try h.remote.otherDevice.createFolder("inner", in: top.id, xattrs: [:])
                try h.remote.otherDevice.createFile("f.txt", in: inner.id, content: Array("f".utf8), mode: 0o644, xattrs: [:])
                _ = try await h.appeared("/top/inner/f.txt")
                let tombstones = try h.remote.otherDevice.delete(top.id, recursive: true)
                #expect(tombstones.map(\.name) == ["f.txt", "inner", "top"], "children before their folder")
                try await eventually("the subtree to go") { try h.children().isEmpty }

                let here = try h.mkdir("here")
                let sub = try h.mkdir("sub", in: here)
                try h.writeNewFile("g.txt", in: sub, Array("g".utf8))
                try await h.settled("the new subtree")
                #expect(h.remote.tree().keys.sorted() == ["/here", "/here/sub", "/here/sub/g.txt"])
                try h.fs.unlink(parent: sub, name: n("g.txt"))
                try h.fs.removeDirectory(parent: here, name: n("sub"))
                try h.fs.removeDirectory(parent: rootIno, name: n("here"))
                try await h.settled("the deletes")
                #expect(h.remote.tree().isEmpty)
            }
        }
    }

    @Test("a file made on another device is a placeholder until opened, then reads whole and becomes current", arguments: ServerKind.allCases)
    func placeholderDownload(_ kind: ServerKind) async throws {
        try await run(PlaceholderDownload(), over: kind)
    }

    struct PlaceholderDownload: EndToEndCase {
        func run<R: TestServer>(_ h: VFSHarness<R>) async throws {
            let content = pattern(1_500_000, seed: 5)
            try await h.running {
                let remote = try h.remote.otherDevice.createFile("remote.bin", in: .root, content: content, mode: 0o640, xattrs: [:])
                let ino = try await h.appeared("/remote.bin")
                #expect(try h.downloadingStatus(ino) == "notDownloaded")
                #expect(try h.fs.attributes(ino).size == Int64(content.count))
                #expect(try h.fs.attributes(ino).blocks == 0)
                #expect(sha(try await h.read(ino)) == sha(content))
                try await eventually("the status to become current") { try h.downloadingStatus(ino) == "current" }
                #expect(try h.xattr(ino, "user.ubiq.revision") == remote.revision.rawValue)
                #expect(try h.xattr(ino, "user.ubiq.percentDownloaded") == "100")
            }
        }
    }
}
