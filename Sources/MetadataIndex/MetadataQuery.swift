import Foundation
import ItemModel
import LocalState
import QueryLanguage

/// Where a query looks (`ubiq query --scope`): iCloud's documents scope is the container's
/// `Documents` folder, its data scope everything else.
public enum QueryScope: String, Sendable, CaseIterable {
    case all, documents, data

    /// The `Documents` folder itself is in the data scope: what it holds is the documents.
    func contains(_ path: String) -> Bool {
        let inDocuments = path.hasPrefix("/Documents/")
        switch self {
        case .all: return true
        case .documents: return inDocuments
        case .data: return !inDocuments
        }
    }
}

/// A one-shot query over the mount's rows: every item (placeholders too: the rows hold every
/// item's metadata) that matches, in the scope, sorted.
public enum MetadataQuery {
    /// `sort`: keys to order by, ascending (`-KEY` descending), then by path.
    public static func run(
        _ predicate: QueryPredicate, items: [LocalItem], versionsFolder: Int64?, scope: QueryScope = .all, sort: [(Key, descending: Bool)] = [],
        clock: QueryClock, status: (LocalItem) -> ItemStatus
    ) -> [QueryRecord] {
        let byIno = Dictionary(items.map { ($0.ino, $0) }, uniquingKeysWith: { a, _ in a })
        var paths: [Int64: String?] = [LocalItem.rootIno: ""]
        func path(_ ino: Int64, depth: Int = 0) -> String? {
            if let known = paths[ino] { return known }
            guard depth < 4096, ino != versionsFolder, let item = byIno[ino], let parent = item.parent, let above = path(parent, depth: depth + 1) else {
                paths[ino] = .some(nil)
                return nil
            }
            let full = above + "/" + item.name
            paths[ino] = full
            return full
        }
        let predicate = predicate.fixingTimes(clock)
        var matched: [QueryRecord] = []
        for item in items where item.ino != LocalItem.rootIno {
            guard let p = path(item.ino), scope.contains(p) else { continue }
            let record = QueryRecord(item: item, path: p, status: status(item))
            if predicate.matches(record.value, clock: clock) { matched.append(record) }
        }
        return matched.sorted { a, b in
            for (key, descending) in sort {
                let (x, y) = (a.value(key), b.value(key))
                if x == y { continue }
                guard let x else { return !descending }  // missing values first when ascending
                guard let y else { return descending }
                let before = QueryValue.precedes(x, y)
                return descending ? !before : before
            }
            return a.path.unicodeScalars.lexicographicallyPrecedes(b.path.unicodeScalars)
        }
    }
}

extension QueryValue {
    /// An order of values of one key, for `--sort`.
    static func precedes(_ a: QueryValue, _ b: QueryValue) -> Bool {
        switch (a, b) {
        case (.number(let x), .number(let y)): x < y
        case (.date(let x), .date(let y)): x < y
        case (.string(let x), .string(let y)): x.unicodeScalars.lexicographicallyPrecedes(y.unicodeScalars)
        case (.bool(let x), .bool(let y)): !x && y
        case (.strings(let x), .strings(let y)): x.joined(separator: ",") < y.joined(separator: ",")
        default: false
        }
    }
}

extension QueryRecord {
    /// The key's value as text, for `--group-by` and `--values`: numbers without a needless
    /// fraction, dates in ISO 8601 (UTC), booleans `1`/`0`, several values one by one; nothing
    /// for a missing value.
    public func texts(_ key: Key) -> [String] {
        switch value(key) {
        case nil: return []
        case .string(let s): return [s]
        case .number(let n): return [n == n.rounded() && abs(n) < 1e15 ? String(Int64(n)) : String(n)]
        case .date(let d): return [d.formatted(.iso8601)]
        case .bool(let b): return [b ? "1" : "0"]
        case .strings(let all): return all
        }
    }
}

/// Each distinct value of a key among a query's results, with how many results have it
/// (NSMetadataQuery's value lists): the most frequent first, then by value.
public func valueCounts(of key: Key, in records: [QueryRecord]) -> [(value: String, count: Int)] {
    var counts: [String: Int] = [:]
    for record in records { for text in Set(record.texts(key)) { counts[text, default: 0] += 1 } }
    return counts.map { ($0.key, $0.value) }.sorted { $0.count != $1.count ? $0.count > $1.count : $0.value < $1.value }
}
