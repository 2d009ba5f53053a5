import GRDB
import Synchronization

/// The totals of inserted rows (`totals`, `status_totals`), counted in memory while a writer
/// asks (`LocalWriter.countingInserts`) and added once at its end, instead of by the two
/// triggers on every insert. Each trigger's update of its one row was a fifth of what an
/// insert cost a first sync. One per store: only its writer connection inserts.
final class InsertTotals: Sendable {
    struct Counts {
        var counting = false
        var items = 0
        var cachedBytes: Int64 = 0
        var byState: [StateKey: Int] = [:]
    }

    struct StateKey: Hashable {
        let kind: String
        let content: String
    }

    let counts = Mutex(Counts())

    /// `ubiq_triggers_count_inserts()`: false while a writer counts its inserts itself. The
    /// insert triggers run only when it is true.
    static let triggerCondition = "ubiq_triggers_count_inserts"

    var sqlFunction: DatabaseFunction {
        DatabaseFunction(Self.triggerCondition, argumentCount: 0, pure: false) { [self] _ in
            !self.counts.withLock { $0.counting }
        }
    }

    /// A row just inserted: counted here while a writer counts (else its triggers did).
    func count(_ item: LocalItem) {
        counts.withLock { c in
            guard c.counting else { return }
            c.items += 1
            c.cachedBytes += item.cachedBytes
            c.byState[StateKey(kind: item.kind.rawValue, content: item.content.rawValue), default: 0] += 1
        }
    }

    /// Starts counting; false when a writer up the call chain already does.
    func start() -> Bool {
        counts.withLock { c in
            if c.counting { return false }
            c.counting = true
            return true
        }
    }

    /// Stops counting and adds what was counted to the tables.
    func finish(_ db: Database) throws {
        let done = counts.withLock { c in
            defer { c = Counts() }
            return c
        }
        guard done.items > 0 else { return }
        try db.cachedStatement(sql: "UPDATE totals SET items = items + ?, cached_bytes = cached_bytes + ? WHERE id = 1")
            .execute(arguments: [done.items, done.cachedBytes])
        let byState = try db.cachedStatement(sql: "UPDATE status_totals SET items = items + ? WHERE kind = ? AND content = ?")
        for (key, n) in done.byState { try byState.execute(arguments: [n, key.kind, key.content]) }
    }
}
