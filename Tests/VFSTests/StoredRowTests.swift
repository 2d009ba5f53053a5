import Foundation
import ItemModel
import LocalState
import Testing
import TestSupport

/// The mount's database is read strictly: a value this version does not know is an error that
/// names its row, never a guess (an unknown outbox operation read as an upload would send the
/// wrong change).
@Suite struct StoredRowTests {
    @Test func anUnknownStoredValueIsAnErrorNamingItsRow() async throws {
        let folder = try TempDirectory("ubiq-rows")
        defer { folder.remove() }
        let path = folder.path + "/state.sqlite"
        var seq: Int64 = 0
        var ino: Int64 = 0
        do {
            let store = try LocalStore(path: path)
            let item = try store.write { w in
                try w.insert(LocalItem(
                    ino: 0, itemID: ItemID("0123456789abcdef0123456789abcdef"), parent: LocalItem.rootIno, name: "a.txt",
                    kind: .file, size: 0, mode: 0o644, created: 0, modified: 0, changed: 0, content: .dirty))
            }
            ino = item.ino
            try store.write { try $0.enqueue(.content, ino: item.ino) }
            seq = try #require(try store.read { try $0.outbox() }.first).seq
            try store.checkpoint()
        }
        // The schema's CHECKs would refuse these: a newer version's database may not have them.
        for sql in ["UPDATE outbox SET op = 'teleport' WHERE seq = \(seq)", "PRAGMA ignore_check_constraints = ON; UPDATE items SET content = 'halfway' WHERE ino = \(ino)"] {
            let r = try await run("/usr/bin/sqlite3", [path, sql])
            #expect(r.status == 0, "\(r.stderr)")
        }
        let store = try LocalStore(path: path)
        #expect(throws: LocalStoreError.undecodable(table: "outbox", key: seq, column: "op", value: "teleport")) {
            try store.read { try $0.outbox() }
        }
        #expect(throws: LocalStoreError.undecodable(table: "items", key: ino, column: "content", value: "halfway")) {
            try store.read { try $0.item(ino) }
        }
    }

    /// A row's query columns for its name (`plain_name`, `name_key`), given by the insert and
    /// kept by the rename trigger, are what `NameKey` says of the name.
    @Test func aNamesQueryColumnsFollowItsName() async throws {
        let folder = try TempDirectory("ubiq-rows")
        defer { folder.remove() }
        let path = folder.path + "/state.sqlite"
        let names = ["Notes.TXT", "été.txt", "a\rb", "plain"]
        let renamed = ["x.Md", "PLAIN.2", "ünïcode", "line\rbreak"]
        var inos: [Int64] = []
        func expectColumns(_ expected: [String]) async throws {
            let list = inos.map(String.init).joined(separator: ",")
            let r = try await run("/usr/bin/sqlite3", ["-separator", "|", path, "SELECT plain_name, quote(name_key) FROM items WHERE ino IN (\(list)) ORDER BY ino"])
            let want = expected.map { name in NameKey.of(name).map { "1|'\($0)'" } ?? "0|NULL" }
            #expect(r.stdout.split(separator: "\n").map(String.init) == want, "\(expected)")
        }
        do {
            let store = try LocalStore(path: path)
            for (index, name) in names.enumerated() {
                inos.append(try store.write { w in
                    try w.insert(LocalItem(
                        ino: 0, itemID: ItemID(String(format: "%032x", index + 1)), parent: LocalItem.rootIno, name: name,
                        kind: .file, size: 0, mode: 0o644, created: 0, modified: 0, changed: 0, content: .dirty)).ino
                })
            }
            try store.checkpoint()
        }
        try await expectColumns(names)
        do {
            let store = try LocalStore(path: path)
            for (ino, name) in zip(inos, renamed) {
                try store.write { w in
                    var item = try #require(try w.reader.item(ino))
                    item.name = name
                    try w.update(item)
                }
            }
            try store.checkpoint()
        }
        try await expectColumns(renamed)
    }

    /// The kept totals (items, bytes cached, items by kind and content state) are what counting
    /// the rows gives, after inserts (counted by the triggers, or by a writer that counts its
    /// own), content changes and deletions.
    @Test func theTotalsAreTheRowsCounted() async throws {
        let folder = try TempDirectory("ubiq-rows")
        defer { folder.remove() }
        let store = try LocalStore(path: folder.path + "/state.sqlite")
        func expectCounted(_ when: String) throws {
            let (kept, counted) = try store.read { r in
                ((try r.itemCount(), try r.cachedBytesTotal()), (try r.allItems().count, try r.allItems().reduce(0) { $0 + $1.cachedBytes }))
            }
            #expect(kept == counted, "\(when)")
            let (keptByState, countedByState) = try store.read { r in
                (try r.count(selectedBy: "SELECT COALESCE(SUM(items), 0) FROM status_totals WHERE kind = 'file' AND content = 'current'", arguments: []),
                 try r.allItems().filter { $0.kind == .file && $0.content == .current }.count)
            }
            #expect(keptByState == countedByState, "\(when): current files")
        }
        func newFile(_ index: Int) -> LocalItem {
            LocalItem(
                ino: 0, itemID: ItemID(String(format: "%032x", index + 1)), parent: LocalItem.rootIno, name: "f\(index)",
                kind: .file, size: 100, mode: 0o644, created: 0, modified: 0, changed: 0, content: index % 2 == 0 ? .current : .placeholder,
                cachedBytes: index % 2 == 0 ? 100 : 0)
        }
        var inos: [Int64] = []
        for index in 0..<20 {
            inos.append(try store.write { w in try w.insert(newFile(index)).ino })
        }
        try expectCounted("after the inserts")
        inos += try store.write { w in try w.countingInserts { try (20..<30).map { try w.insert(newFile($0)).ino } } }
        try expectCounted("after inserts the writer counted")
        // A body that fails after inserting, in a transaction that still commits.
        inos += try store.write { w in
            var made: [Int64] = []
            _ = try? w.countingInserts {
                made = try (30..<33).map { try w.insert(newFile($0)).ino }
                throw CancellationError()
            }
            made.append(try w.insert(newFile(33)).ino)  // counted by the triggers again
            return made
        }
        try expectCounted("after a counting writer failed")
        try store.write { w in
            for ino in inos.prefix(5) {
                var item = try #require(try w.reader.item(ino))
                item.cachedBytes = item.cachedBytes == 0 ? 42 : 0
                try w.update(item)
            }
            var other = try #require(try w.reader.item(inos[6]))
            other.cachedBytes = 7
            try w.updateContentState(other)
        }
        try expectCounted("after the content changes")
        try store.write { w in for ino in inos.suffix(8) { try w.delete(ino) } }
        try expectCounted("after the deletions")
    }
}
