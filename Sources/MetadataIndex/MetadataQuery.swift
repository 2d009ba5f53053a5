import Foundation
import GRDB
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
    /// Compiled to SQL (`SQLCompiler`), in one read transaction: only the matching rows leave
    /// the database. `sort`: keys to order by, ascending (`-KEY` descending), then by path.
    public static func run(
        _ predicate: QueryPredicate, in reader: LocalReader, transfers: any TransfersInFlight, scope: QueryScope = .all,
        sort: [(Key, descending: Bool)] = [], clock: QueryClock
    ) throws -> [QueryRecord] {
        let (snapshot, query) = try prepare(predicate, in: reader, transfers: transfers, clock: clock)
        let rows = try reader.items(selectedBy: query.statement(scope: scope), arguments: StatementArguments(query.arguments))
        return sorted(records(rows, snapshot: snapshot, scope: scope), by: sort)
    }

    /// How many items `run` would answer, counted by SQL alone.
    public static func count(
        _ predicate: QueryPredicate, in reader: LocalReader, transfers: any TransfersInFlight, scope: QueryScope = .all, clock: QueryClock
    ) throws -> Int {
        if scope == .all, let statuses = statuses(acceptedBy: predicate, clock: clock) {
            return try reader.count(downloadingStatuses: statuses)
        }
        let query = try prepare(predicate, in: reader, transfers: transfers, clock: clock).query
        return try reader.count(selectedBy: query.statement(scope: scope, counting: true), arguments: StatementArguments(query.arguments))
    }

    /// The statuses a predicate that asks nothing but `downloadingStatus` accepts (each tried
    /// with the evaluator); nil for any other predicate. Such a count needs no row of its own.
    static func statuses(acceptedBy predicate: QueryPredicate, clock: QueryClock) -> Set<String>? {
        guard predicate.keys.allSatisfy({ $0.name == "downloadingStatus" }) else { return nil }
        let predicate = predicate.fixingTimes(clock)
        return Set(ItemStatus.downloadingStatuses.filter { status in
            predicate.matches({ $0.name == "downloadingStatus" ? .string(status) : nil }, clock: clock)
        })
    }

    /// The snapshot read in `reader`'s transaction, its functions registered on the
    /// connection, and the predicate compiled.
    static func prepare(
        _ predicate: QueryPredicate, in reader: LocalReader, transfers: any TransfersInFlight, clock: QueryClock
    ) throws -> (snapshot: IndexSnapshot, query: SQLQuery) {
        let snapshot = try IndexSnapshot(reader, transfers: transfers)
        reader.register(snapshot.functions)
        return (snapshot, SQLCompiler.compile(predicate, clock: clock))
    }

    /// The same query evaluated in memory, row by row (`QueryPredicate.matches`): what the
    /// SQL must agree with.
    public static func evaluate(
        _ predicate: QueryPredicate, items: [LocalItem], snapshot: IndexSnapshot, scope: QueryScope = .all,
        sort: [(Key, descending: Bool)] = [], clock: QueryClock
    ) -> [QueryRecord] {
        let predicate = predicate.fixingTimes(clock)
        let all = records(items.filter { $0.ino != LocalItem.rootIno }, snapshot: snapshot, scope: scope)
        return sorted(all.filter { predicate.matches($0.value, clock: clock) }, by: sort)
    }

    /// Rows with a path (not in the versions folder, reaching the root) in the scope.
    static func records(_ rows: [LocalItem], snapshot: IndexSnapshot, scope: QueryScope) -> [QueryRecord] {
        rows.compactMap { item in
            guard let path = snapshot.path(of: item), scope.contains(path) else { return nil }
            return QueryRecord(item: item, path: path, status: snapshot.status(of: item))
        }
    }

    static func sorted(_ records: [QueryRecord], by sort: [(Key, descending: Bool)]) -> [QueryRecord] {
        records.sorted { a, b in
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
