import Foundation
import ItemModel
import LocalState
@testable import SyncEngine
import Testing
import TestSupport

/// A page of the server's changes goes into the index in one transaction, and its new files
/// in statements of many rows (`FeedBatch.wait`). Whatever the page holds, the index must end
/// as the same changes applied one at a time leave it.
@Suite("A page of changes")
struct FeedPageTests {
    static func item(_ id: String, in parent: String, _ name: String, _ kind: ItemKind = .file, revision: Int, deleted: Bool = false) -> ItemChange {
        ItemChange(cursor: .start, kind: deleted ? .delete : .upsert, item: ItemMetadata(
            id: ItemID(id), parentID: ItemID(parent), name: name, kind: kind, revision: Revision("\(revision)"),
            size: kind == .file ? 3 : 0, digest: kind == .file ? ContentDigest.of(Array("abc".utf8)) : nil,
            mode: kind == .folder ? 0o755 : 0o644, created: 1, modified: 1, deleted: deleted))
    }

    /// New files waiting in the batch meet: their own later change (a rename, a move), a
    /// deletion and a new item of the same name, the deletion of their folder, a new folder's
    /// children, files of the same name in other folders, a new item given the same name.
    static let page: [ItemChange] = [
        item("f1", in: "root", "F", .folder, revision: 1),
        item("a1", in: "f1", "a", revision: 2),
        item("b1", in: "f1", "b", revision: 3),
        item("a1", in: "f1", "c", revision: 4),  // renamed while waiting
        item("x1", in: "root", "x", revision: 5),
        item("x1", in: "root", "x", revision: 6, deleted: true),
        item("x2", in: "root", "x", revision: 7),  // the same name, another item
        item("g1", in: "root", "G", .folder, revision: 8),
        item("g2", in: "g1", "g", revision: 9),
        item("g1", in: "root", "G", .folder, revision: 10, deleted: true),  // its file still waiting
        item("h1", in: "root", "H", .folder, revision: 11),
        item("h2", in: "h1", "a", revision: 12),
        item("b1", in: "h1", "b", revision: 13),  // moved to another folder while waiting
        item("y1", in: "root", "y", revision: 14),
        item("p1", in: "root", "p", revision: 15),
        item("p2", in: "root", "p", revision: 16),  // a name the page gives twice
    ]

    func snapshot(_ h: Harness) throws -> [String] {
        try h.store.read { r in
            try r.allItems().filter { $0.ino != LocalItem.rootIno && $0.name != LocalItem.versionsFolderName }
                .map { "\($0.itemID.rawValue) \(try r.path(of: $0.ino) ?? "?") \($0.kind) r\($0.revision?.rawValue ?? "-")" }.sorted()
        }
    }

    @Test("one page leaves the index as the same changes one at a time, its totals counted")
    func aPageEndsAsItsChangesOneByOne() async throws {
        let together = try await Harness(inMemoryDatabase: true)
        defer { together.close() }
        let oneByOne = try await Harness(inMemoryDatabase: true)
        defer { oneByOne.close() }
        _ = try together.engine.apply(Self.page, cursor: nil)
        for change in Self.page { _ = try oneByOne.engine.apply([change], cursor: nil) }
        let expected = try snapshot(oneByOne)
        #expect(try snapshot(together) == expected)
        #expect(expected.contains { $0.hasPrefix("a1 /F/c ") } && expected.contains { $0.hasPrefix("b1 /H/b ") }
                && expected.contains { $0.hasPrefix("x2 /x ") } && !expected.contains { $0.hasPrefix("g") })
        let (kept, counted) = try together.store.read { r in (try r.itemCount(), try r.allItems().count) }
        #expect(kept == counted)
    }
}
