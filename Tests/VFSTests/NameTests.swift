import Foundation
import ItemModel
import LocalState
import Testing
import VFS

/// A name the server cannot accept, and the errno the mount must answer (SPEC, "The container":
/// refused, never mangled).
struct BadName: Sendable, CustomTestStringConvertible {
    let label: String
    let bytes: [UInt8]
    let errno: Int32
    var testDescription: String { label }

    static let all: [BadName] = [
        BadName(label: "empty", bytes: [], errno: EINVAL),
        BadName(label: "dot", bytes: n("."), errno: EINVAL),
        BadName(label: "dot-dot", bytes: n(".."), errno: EINVAL),
        BadName(label: "slash inside", bytes: n("a/b"), errno: EINVAL),
        BadName(label: "NUL inside", bytes: [0x61, 0x00, 0x62], errno: EINVAL),
        BadName(label: "invalid UTF-8", bytes: [0x61, 0xFF, 0xFE, 0x62], errno: EINVAL),
        BadName(label: "lone continuation byte", bytes: [0x80], errno: EINVAL),
        BadName(label: "256 ASCII bytes", bytes: Array(repeating: UInt8(ascii: "x"), count: 256), errno: ENAMETOOLONG),
        // 128 two-byte characters: 128 characters but 256 bytes, and the limit is in bytes.
        BadName(label: "256 bytes of UTF-8", bytes: Array(String(repeating: "é", count: 128).utf8), errno: ENAMETOOLONG),
    ]
}

@Suite("Names")
struct NameTests {
    /// What an invalid name must leave untouched: the listing of every folder and the outbox.
    struct Snapshot: Equatable {
        var root: [String]
        var folder: [String]
        var outbox: [OutboxEntry]
    }

    func snapshot(_ h: Harness, folder: Int64) throws -> Snapshot {
        Snapshot(root: try h.children(), folder: try h.children(folder), outbox: try h.outbox())
    }

    /// A mount with one folder and one file, so that renames have something to move.
    func setUp() async throws -> (Harness, folder: Int64, file: Int64) {
        let h = try await Harness()
        let folder = try h.mkdir("folder")
        let file = try h.writeNewFile("file.txt", Array("content".utf8))
        return (h, folder, file)
    }

    @Test("create with an invalid name fails and changes nothing", arguments: BadName.all)
    func createRefused(_ bad: BadName) async throws {
        let (h, folder, _) = try await setUp()
        defer { h.close() }
        let before = try snapshot(h, folder: folder)
        let code = errnoOf { try h.fs.createFile(parent: folder, name: bad.bytes, mode: 0o644, flags: O_CREAT | O_WRONLY, uid: 0, gid: 0) }
        #expect(code == bad.errno, "create '\(bad.label)' answered \(errnoName(code))")
        #expect(try snapshot(h, folder: folder) == before)
    }

    @Test("mkdir with an invalid name fails and changes nothing", arguments: BadName.all)
    func mkdirRefused(_ bad: BadName) async throws {
        let (h, folder, _) = try await setUp()
        defer { h.close() }
        let before = try snapshot(h, folder: folder)
        let code = errnoOf { try h.fs.makeDirectory(parent: rootIno, name: bad.bytes, mode: 0o755, uid: 0, gid: 0) }
        #expect(code == bad.errno, "mkdir '\(bad.label)' answered \(errnoName(code))")
        #expect(try snapshot(h, folder: folder) == before)
    }

    @Test("rename to an invalid name fails and changes nothing", arguments: BadName.all)
    func renameToRefused(_ bad: BadName) async throws {
        let (h, folder, _) = try await setUp()
        defer { h.close() }
        let before = try snapshot(h, folder: folder)
        for (parent, name) in [(rootIno, "file.txt"), (rootIno, "folder")] {
            for newParent in [rootIno, folder] where !(name == "folder" && newParent == folder) {
                let code = errnoOf {
                    try h.fs.rename(parent: parent, name: n(name), newParent: newParent, newName: bad.bytes, noReplace: false, exchange: false)
                }
                #expect(code == bad.errno, "rename \(name) to '\(bad.label)' answered \(errnoName(code))")
            }
        }
        #expect(try snapshot(h, folder: folder) == before)
    }

    @Test("rename from an invalid name fails and changes nothing", arguments: BadName.all)
    func renameFromRefused(_ bad: BadName) async throws {
        let (h, folder, _) = try await setUp()
        defer { h.close() }
        let before = try snapshot(h, folder: folder)
        let code = errnoOf {
            try h.fs.rename(parent: rootIno, name: bad.bytes, newParent: folder, newName: n("ok"), noReplace: false, exchange: false)
        }
        #expect(code == bad.errno, "rename from '\(bad.label)' answered \(errnoName(code))")
        #expect(try snapshot(h, folder: folder) == before)
    }

    @Test("lookup of an invalid name finds nothing, and of one too long answers ENAMETOOLONG", arguments: BadName.all)
    func lookupInvalid(_ bad: BadName) async throws {
        let (h, _, _) = try await setUp()
        defer { h.close() }
        // The kernel itself refuses "", "." and ".." and names with "/"; whatever else reaches
        // us is simply absent, but a name no file system could hold is too long (as stat says).
        if bad.errno == ENAMETOOLONG {
            #expect(errnoOf { try h.fs.lookup(parent: rootIno, name: bad.bytes) } == ENAMETOOLONG)
        } else {
            #expect(try h.fs.lookup(parent: rootIno, name: bad.bytes) == nil)
        }
    }

    @Test("names of exactly 255 bytes are accepted, ASCII and multi-byte")
    func longestNames() async throws {
        let h = try await Harness()
        defer { h.close() }
        let ascii = String(repeating: "a", count: 255)
        let multiByte = String(repeating: "é", count: 127) + "b"  // 254 + 1 bytes
        #expect(multiByte.utf8.count == 255)
        try h.writeNewFile(ascii, [1, 2, 3])
        try h.mkdir(multiByte)
        #expect(try h.fs.lookup(parent: rootIno, name: n(ascii))?.kind == .file)
        #expect(try h.fs.lookup(parent: rootIno, name: n(multiByte))?.kind == .folder)
        try h.fs.rename(parent: rootIno, name: n(ascii), newParent: rootIno, newName: n(String(repeating: "z", count: 255)), noReplace: false, exchange: false)
        #expect(try h.children().contains(String(repeating: "z", count: 255)))
    }
}
