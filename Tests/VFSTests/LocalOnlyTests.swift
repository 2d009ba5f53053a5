import Foundation
import ItemModel
import TestSupport
import Testing
@testable import VFS

@Suite("Local-only items")
struct LocalOnlyTests {
    @Test("a synced folder with files, moved into a .nosync folder, is deleted from the server and stays here")
    func syncedFolderMovedIntoALocalOnlyFolder() async throws {
        let h = try await Harness()
        defer { h.close() }
        let folder = try h.mkdir("photos")
        _ = try h.writeNewFile("a.jpg", in: folder, Array("a".utf8))
        let quiet = try h.mkdir("work.nosync")
        try await h.running {
            try await h.settled()
            #expect(try await h.remote.tree().keys.sorted() == ["/photos", "/photos/a.jpg"])
            try h.fs.rename(parent: rootIno, name: n("photos"), newParent: quiet, newName: n("photos"), noReplace: false, exchange: false)
            try await h.settled("the deletion")
            let left = try await h.remote.tree().keys.sorted()
            #expect(left.isEmpty, "the server still has \(left)")
            #expect(try h.children() == ["work.nosync"])
            #expect(try h.children(quiet) == ["photos"])
            #expect(try h.children(folder) == ["a.jpg"])
        }
    }

    @Test("a file moved into a .nosync folder after its create landed with the answer lost is deleted from the server")
    func fileMovedIntoALocalOnlyFolderAfterALostCreate() async throws {
        let h = try await Harness()
        defer { h.close() }
        let quiet = try h.mkdir("work.nosync")
        h.remote.loseAnswer(.createItem, times: 1_000)
        h.remote.loseAnswer(.createItems, times: 1_000)
        _ = try h.writeNewFile("draft.txt", Array("draft".utf8))
        try await h.running([.outbox]) {
            try await eventually("the create to land on the server") { try await h.remote.item(atPath: "/draft.txt") != nil }
            try h.fs.rename(parent: rootIno, name: n("draft.txt"), newParent: quiet, newName: n("draft.txt"), noReplace: false, exchange: false)
            h.remote.stopLosingAnswers()
            try await eventually("the outbox to settle") { try h.outbox().isEmpty }
            let left = try await h.remote.tree().keys.sorted()
            #expect(left.isEmpty, "the server still has \(left)")
            #expect(try h.children(quiet) == ["draft.txt"])
        }
    }
}
