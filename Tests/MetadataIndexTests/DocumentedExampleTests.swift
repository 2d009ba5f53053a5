import Foundation
import ItemModel
import LocalState
import MetadataIndex
import QueryLanguage
import Testing

/// Every example of docs/QUERY_LANGUAGE.md ("Examples"), read from the document itself and
/// run, compiled to SQL and in memory, over the container the document describes.
struct DocumentedExampleTests {
    static let document = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("../../docs/QUERY_LANGUAGE.md").standardized

    /// The predicate and the paths it finds, from each row of the examples' second table.
    static func examples() throws -> [(predicate: String, finds: Set<String>)] {
        let text = try String(contentsOf: document, encoding: .utf8)
        guard let section = text.components(separatedBy: "## Examples").dropFirst().first?.components(separatedBy: "\n## ").first,
              let table = section.components(separatedBy: "| predicate | finds |").dropFirst().first
        else { return [] }
        var out: [(String, Set<String>)] = []
        for line in table.split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.dropFirst(2).components(separatedBy: " | ")
            guard cells.count == 2 else { continue }
            let predicate = cells[0].trimmingCharacters(in: CharacterSet(charactersIn: "`"))
            let finds = cells[1].components(separatedBy: "`").enumerated().filter { $0.offset % 2 == 1 }.map { String($0.element) }
            out.append((predicate, Set(finds)))
        }
        return out
    }

    static func at(_ day: String) -> Timestamp {
        Timestamp(ISO8601DateFormatter().date(from: day + "T12:00:00Z")!.timeIntervalSince1970) * 1_000_000_000
    }

    /// The container of the document's first table.
    static func container() throws -> LocalStore {
        let store = try LocalStore()
        try store.write { w in
            var n = 0
            func add(_ parent: Int64, _ name: String, _ kind: ItemKind = .file, size: Int64 = 0, modified: String = "2025-01-01",
                     content: ContentState = .current, tags: String? = nil, uploaded: Bool = true, conflict: Bool = false) throws -> Int64 {
                n += 1
                let conflicts = conflict
                    ? [ConflictVersion(id: ItemID("v\(n)"), digest: .of(Data("v".utf8)), size: 1, device: "B", modified: at(modified), base: Revision("r"))] : []
                return try w.insert(LocalItem(
                    itemID: ItemID("i\(n)"), parent: parent, name: name, kind: kind, size: size, mode: 0o644, created: at("2025-01-01"),
                    modified: at(modified), changed: 0, xattrs: tags.map { ["user.xdg.tags": Data($0.utf8)] } ?? [:],
                    revision: uploaded ? Revision("r\(n)") : nil, content: content, conflicts: conflicts)).ino
            }
            let documents = try add(LocalItem.rootIno, "Documents", .folder)
            try add(documents, "notes.xml", size: 2_300, modified: "2026-03-10", tags: "work")
            try add(documents, "Résumé.pdf", size: 120_000, modified: "2025-11-02", content: .placeholder)
            let archive = try add(documents, "Archive", .folder)
            try add(archive, "old.txt", size: 10, modified: "2025-01-05", content: .placeholder)
            try add(LocalItem.rootIno, "todo.txt", size: 40, modified: "2026-03-14", content: .dirty, tags: "work, urgent", uploaded: false)
            try add(LocalItem.rootIno, "photo.JPG", size: 2_000_000, modified: "2026-02-01", content: .placeholder, conflict: true)
            let cache = try add(LocalItem.rootIno, "cache.nosync", .folder)
            try add(cache, "tmp.bin", size: 5, modified: "2026-03-01")
        }
        return store
    }

    @Test("every example in docs/QUERY_LANGUAGE.md finds what the document says, through SQL and in memory")
    func documentedExamples() throws {
        let examples = try Self.examples()
        #expect(examples.count >= 15, "the examples table was read: \(examples.count) rows")
        let store = try Self.container()
        let clock = QueryClock(now: ISO8601DateFormatter().date(from: "2026-03-15T12:00:00Z")!, timeZone: TimeZone(identifier: "UTC")!)
        let transfers = FixedTransfers()
        for (text, finds) in examples {
            let predicate = try QueryParser.parse(text)
            let sql = try store.read { try MetadataQuery.run(predicate, in: $0, transfers: transfers, clock: clock) }.map(\.path)
            let memory = try store.read { r in
                MetadataQuery.evaluate(predicate, items: try r.allItems(), snapshot: try IndexSnapshot(r, transfers: transfers), clock: clock)
            }.map(\.path)
            #expect(Set(sql) == finds, "\(text): SQL found \(sql)")
            #expect(Set(memory) == finds, "\(text): the evaluator found \(memory)")
        }
    }
}
