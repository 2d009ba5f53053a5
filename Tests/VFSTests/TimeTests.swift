import Foundation
import ItemModel
import Testing
import TestSupport
import VFS

@Suite("Times")
struct TimeTests {
    @Test("utimensat keeps the access time it is given, one before the modification time too; an item never opened here shows its modification time")
    func accessTimeIsKeptAsGiven() async throws {
        let h = try await Harness()
        defer { h.close() }
        let ino = try h.writeNewFile("t.txt", Array("t".utf8))
        let mtime = try h.fs.attributes(ino).mtime
        let dayOne: Timestamp = 86_400 * 1_000_000_000
        _ = try await h.fs.setAttributes(ino, FileSystem.AttributeChanges(atime: dayOne), handle: nil)
        #expect(try h.fs.attributes(ino).atime == dayOne, "an access time before the modification time is kept")
        #expect(try h.fs.attributes(ino).mtime == mtime)
        // The harness's daemon restarted: the time was written, not only held in memory.
        #expect(try await h.restarted().fs.attributes(ino).atime == dayOne)
        let folder = try h.mkdir("d")
        #expect(try h.fs.attributes(folder).atime == h.fs.attributes(folder).mtime)
    }
}
