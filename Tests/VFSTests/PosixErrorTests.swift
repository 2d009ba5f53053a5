import Foundation
import ItemModel
import LocalState
import Testing
import VFS

/// The errno of each refused operation, and that a refusal changes nothing.
@Suite("POSIX errors")
struct PosixErrorTests {
    /// /dir (holding /dir/inner/ and /dir/f.txt), /empty/, /a.txt, /b.txt.
    func setUp(_ setup: StoreSetup) async throws -> Harness {
        let h = try await Harness(setup)
        let dir = try h.mkdir("dir")
        try h.mkdir("inner", in: dir)
        try h.writeNewFile("f.txt", in: dir, Array("f".utf8))
        try h.mkdir("empty")
        try h.writeNewFile("a.txt", Array("alpha".utf8))
        try h.writeNewFile("b.txt", Array("bravo".utf8))
        return h
    }

    /// Everything a refused call might have touched.
    func state(_ h: Harness) async throws -> [String: String] {
        var out = try await h.localTree().mapValues(\.description)
        out["#outbox"] = String(try h.outbox().count)
        return out
    }

    @Test("lookup of a missing name answers nil, in a missing folder ENOENT, of a name over 255 bytes ENAMETOOLONG", arguments: StoreSetup.allCases)
    func lookupMissing(_ setup: StoreSetup) async throws {
        let h = try await setUp(setup)
        defer { h.close() }
        #expect(try h.fs.lookup(parent: rootIno, name: n("missing")) == nil)
        #expect(errnoOf { try h.fs.lookup(parent: rootIno, name: n(String(repeating: "x", count: 256))) } == ENAMETOOLONG)
        #expect(try h.fs.lookup(parent: try h.requireIno("/dir"), name: n("a.txt")) == nil)
        #expect(errnoOf { try h.fs.lookup(parent: 987_654, name: n("x")) } == ENOENT)
        #expect(errnoOf { try h.fs.attributes(987_654) } == ENOENT)
    }

    @Test("a file deleted while open has no links (fstat's st_nlink 0); a size past what the cache holds is EFBIG", arguments: StoreSetup.allCases)
    func deletedWhileOpen(_ setup: StoreSetup) async throws {
        let h = try await setUp(setup)
        defer { h.close() }
        let ino = try h.requireIno("/a.txt")
        let opened = try await h.fs.open(ino, flags: O_RDONLY)
        try h.fs.unlink(parent: rootIno, name: n("a.txt"))
        #expect(try h.fs.attributes(ino).nlink == 0)
        h.fs.release(opened.handle)
        #expect(FSError(writeFailure: EFBIG).errno == EFBIG)
    }

    @Test("mkdir over an existing folder or file is EEXIST", arguments: StoreSetup.allCases)
    func mkdirExisting(_ setup: StoreSetup) async throws {
        let h = try await setUp(setup)
        defer { h.close() }
        let before = try await state(h)
        #expect(errnoOf { try h.fs.makeDirectory(parent: rootIno, name: n("dir"), mode: 0o755, uid: 0, gid: 0) } == EEXIST)
        #expect(errnoOf { try h.fs.makeDirectory(parent: rootIno, name: n("a.txt"), mode: 0o755, uid: 0, gid: 0) } == EEXIST)
        #expect(errnoOf { try h.fs.createFile(parent: rootIno, name: n("a.txt"), mode: 0o644, flags: O_CREAT | O_EXCL | O_WRONLY, uid: 0, gid: 0) } == EEXIST)
        #expect(try await state(h) == before)
    }

    /// The kernel's cached name may be older than a change another device made: a create of a
    /// name it held as missing, an open of an item since removed. ESTALE makes the kernel look
    /// the name up again and retry once (do_filp_open), so the caller meets what is there now.
    @Test("a create without O_EXCL of a name that exists, and an open of an item that is gone, are ESTALE", arguments: StoreSetup.allCases)
    func staleKernelNames(_ setup: StoreSetup) async throws {
        let h = try await setUp(setup)
        defer { h.close() }
        let gone = try h.requireIno("/b.txt")
        try h.fs.unlink(parent: rootIno, name: n("b.txt"))
        let before = try await state(h)
        #expect(errnoOf { try h.fs.createFile(parent: rootIno, name: n("a.txt"), mode: 0o644, flags: O_CREAT | O_TRUNC | O_WRONLY, uid: 0, gid: 0) } == ESTALE)
        #expect(errnoOf { try h.fs.openIfLocal(gone, flags: O_RDONLY) } == ESTALE)
        #expect(await errnoOf { try await h.fs.open(gone, flags: O_WRONLY | O_CREAT) } == ESTALE)
        #expect(try await state(h) == before)
        #expect(try await h.read(try h.requireIno("/a.txt")) == Array("alpha".utf8))
    }

    @Test("rmdir of a non-empty folder is ENOTEMPTY, of a file ENOTDIR, of nothing ENOENT", arguments: StoreSetup.allCases)
    func rmdirErrors(_ setup: StoreSetup) async throws {
        let h = try await setUp(setup)
        defer { h.close() }
        let before = try await state(h)
        #expect(errnoOf { try h.fs.removeDirectory(parent: rootIno, name: n("dir")) } == ENOTEMPTY)
        #expect(errnoOf { try h.fs.removeDirectory(parent: rootIno, name: n("a.txt")) } == ENOTDIR)
        #expect(errnoOf { try h.fs.removeDirectory(parent: rootIno, name: n("missing")) } == ENOENT)
        #expect(try await state(h) == before)
        try h.fs.removeDirectory(parent: rootIno, name: n("empty"))
        #expect(try h.ino("/empty") == nil)
    }

    @Test("unlink of a folder is EISDIR, of nothing ENOENT", arguments: StoreSetup.allCases)
    func unlinkErrors(_ setup: StoreSetup) async throws {
        let h = try await setUp(setup)
        defer { h.close() }
        let before = try await state(h)
        #expect(errnoOf { try h.fs.unlink(parent: rootIno, name: n("empty")) } == EISDIR)
        #expect(errnoOf { try h.fs.unlink(parent: rootIno, name: n("missing")) } == ENOENT)
        #expect(try await state(h) == before)
    }

    @Test("rename with RENAME_NOREPLACE onto an existing name is EEXIST", arguments: StoreSetup.allCases)
    func renameNoReplace(_ setup: StoreSetup) async throws {
        let h = try await setUp(setup)
        defer { h.close() }
        let before = try await state(h)
        #expect(errnoOf { try h.fs.rename(parent: rootIno, name: n("a.txt"), newParent: rootIno, newName: n("b.txt"), noReplace: true, exchange: false) } == EEXIST)
        #expect(errnoOf { try h.fs.rename(parent: rootIno, name: n("empty"), newParent: rootIno, newName: n("dir"), noReplace: true, exchange: false) } == EEXIST)
        #expect(try await state(h) == before)
        // Without the flag the same rename replaces.
        try h.fs.rename(parent: rootIno, name: n("a.txt"), newParent: rootIno, newName: n("b.txt"), noReplace: false, exchange: false)
        #expect(try await h.read(try h.requireIno("/b.txt")) == Array("alpha".utf8))
        #expect(try h.ino("/a.txt") == nil)
    }

    @Test("rename with RENAME_EXCHANGE is EINVAL", arguments: StoreSetup.allCases)
    func renameExchange(_ setup: StoreSetup) async throws {
        let h = try await setUp(setup)
        defer { h.close() }
        let before = try await state(h)
        #expect(errnoOf { try h.fs.rename(parent: rootIno, name: n("a.txt"), newParent: rootIno, newName: n("b.txt"), noReplace: false, exchange: true) } == EINVAL)
        #expect(try await state(h) == before)
    }

    @Test("a folder cannot move into itself or below itself: EINVAL", arguments: StoreSetup.allCases)
    func renameIntoOwnChild(_ setup: StoreSetup) async throws {
        let h = try await setUp(setup)
        defer { h.close() }
        let dir = try h.requireIno("/dir")
        let inner = try h.requireIno("/dir/inner")
        let before = try await state(h)
        #expect(errnoOf { try h.fs.rename(parent: rootIno, name: n("dir"), newParent: inner, newName: n("dir"), noReplace: false, exchange: false) } == EINVAL)
        #expect(errnoOf { try h.fs.rename(parent: rootIno, name: n("dir"), newParent: dir, newName: n("x"), noReplace: false, exchange: false) } == EINVAL)
        #expect(try await state(h) == before)
    }

    @Test("rename onto an item of the other kind, or onto a non-empty folder, is refused", arguments: StoreSetup.allCases)
    func renameKindMismatch(_ setup: StoreSetup) async throws {
        let h = try await setUp(setup)
        defer { h.close() }
        let before = try await state(h)
        #expect(errnoOf { try h.fs.rename(parent: rootIno, name: n("a.txt"), newParent: rootIno, newName: n("empty"), noReplace: false, exchange: false) } == EISDIR)
        #expect(errnoOf { try h.fs.rename(parent: rootIno, name: n("empty"), newParent: rootIno, newName: n("a.txt"), noReplace: false, exchange: false) } == ENOTDIR)
        #expect(errnoOf { try h.fs.rename(parent: rootIno, name: n("empty"), newParent: rootIno, newName: n("dir"), noReplace: false, exchange: false) } == ENOTEMPTY)
        #expect(errnoOf { try h.fs.rename(parent: rootIno, name: n("missing"), newParent: rootIno, newName: n("c"), noReplace: false, exchange: false) } == ENOENT)
        #expect(try await state(h) == before)
    }

    @Test("hard links and device nodes are not permitted (EPERM); readlink of a file and a link's bad target are EINVAL; a whiteout rename EINVAL", arguments: StoreSetup.allCases)
    func link(_ setup: StoreSetup) async throws {
        let h = try await setUp(setup)
        defer { h.close() }
        let file = try h.writeNewFile("f", [1])
        #expect(errnoOf { try h.fs.link(file, newParent: rootIno, newName: n("g")) } == EPERM)
        #expect(errnoOf { try h.fs.makeNode(parent: rootIno, name: n("d"), type: .device, mode: 0o600, uid: 0, gid: 0) } == EPERM)
        #expect(errnoOf { try h.fs.symlink(target: [0x66, 0xFF], parent: rootIno, name: n("s"), uid: 0, gid: 0) } == EINVAL)
        #expect(errnoOf { try h.fs.symlink(target: [], parent: rootIno, name: n("s"), uid: 0, gid: 0) } == EINVAL)
        #expect(errnoOf { try h.fs.symlink(target: n("f"), parent: rootIno, name: n("f"), uid: 0, gid: 0) } == EEXIST)
        #expect(errnoOf { try h.fs.readlink(file) } == EINVAL)
        #expect(errnoOf { try h.fs.rename(parent: rootIno, name: n("f"), newParent: rootIno, newName: n("w"), noReplace: false, exchange: false, whiteout: true) } == EINVAL)
        #expect(try h.fs.lookup(parent: rootIno, name: n("f")) != nil)
    }

    @Test("open of a folder is EISDIR, opendir of a file ENOTDIR", arguments: StoreSetup.allCases)
    func openWrongKind(_ setup: StoreSetup) async throws {
        let h = try await setUp(setup)
        defer { h.close() }
        let dir = try h.requireIno("/dir")
        let file = try h.requireIno("/a.txt")
        #expect(await errnoOf { try await h.fs.open(dir, flags: O_RDONLY) } == EISDIR)
        #expect(errnoOf { try h.fs.openDirectory(file) } == ENOTDIR)
        #expect(errnoOf { try h.fs.readDirectory(424_242, from: 0) } == EBADF)
    }
}
