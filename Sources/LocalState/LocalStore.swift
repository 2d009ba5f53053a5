import Foundation
import GRDB

/// The mount's database: every item's metadata (so listings work offline and at once after a
/// restart), the outbox of changes for the server, the change-log cursor.
///
/// One `DatabasePool` (WAL): reads run concurrently with the single writer.
///
/// `synchronous = NORMAL`: a commit is in the WAL file when it returns, so it survives a crash
/// or `kill -9` of the daemon (the promise "your closed file will reach the server"); only a
/// power loss or kernel crash can take back the last commits, exactly as it can take back the
/// unsynced content of the cache files they describe. A commit per created or closed file
/// costs ~20 µs this way against 0.2–3 ms with an fsync each, which decided how fast `cp -r`
/// of small files runs. An application's `fsync(2)` asks for more: `makeDurable` gives it.
///
/// `wal_autocheckpoint = 10000` pages (40 MiB of WAL), not SQLite's 1000: the checkpoint runs
/// in the committing thread, which is a FUSE thread, and ends with two fsyncs. A `cp -r` of
/// small files made one every 14 files; now it is a tenth as many, and the rows every commit
/// touches (the folder, the index pages) are copied back once per checkpoint, not ten times.
public final class LocalStore: Sendable {
    let pool: any DatabaseWriter
    /// The database file; nil in memory.
    let path: String?
    let insertTotals = InsertTotals()

    /// What the schema's triggers call, on every connection.
    static func sqlFunctions(_ insertTotals: InsertTotals) -> [DatabaseFunction] { [NameKey.sqlFunction, insertTotals.sqlFunction] }

    public init(path: String) throws {
        self.path = path
        var config = Configuration()
        let functions = Self.sqlFunctions(insertTotals)
        config.prepareDatabase { db in
            for function in functions { db.add(function: function) }
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
            try db.execute(sql: "PRAGMA wal_autocheckpoint = 10000")
            // Once checkpointed and reset, the WAL file is cut back to 8 MiB, not left at its peak.
            try db.execute(sql: "PRAGMA journal_size_limit = 8388608")
            // A statement that fires triggers (every insert and rename of an item) keeps the
            // pages it changes in a statement journal, to undo itself alone should it fail
            // midway. In a temporary file by default: a first sync of 10,000 items wrote 230 MB
            // into such files, page by page, a system call each. In memory instead: the journal
            // lives only as long as its statement and holds no more than the pages it touched.
            try db.execute(sql: "PRAGMA temp_store = MEMORY")
        }
        config.busyMode = .timeout(5)
        pool = try DatabasePool(path: path, configuration: config)
        try Self.migrator.migrate(pool)
    }

    /// An in-memory database, for unit tests of the layers above.
    public init(inMemory: Void = ()) throws {
        path = nil
        var config = Configuration()
        let functions = Self.sqlFunctions(insertTotals)
        config.prepareDatabase { db in
            for function in functions { db.add(function: function) }
        }
        pool = try DatabaseQueue(configuration: config)
        try Self.migrator.migrate(pool)
    }

    /// Copies what the WAL file holds into the database file and empties the WAL file. For a
    /// clean stop: the daemon exits without closing the database, so SQLite's own checkpoint
    /// at close never ran, and the index lived in its WAL file (15 MB seen, up to the 40 MiB
    /// autocheckpoint), which the next start reads whole to rebuild the WAL's index. Waits
    /// for readers (a request still served) up to the busy timeout.
    public func checkpoint() throws {
        guard path != nil else { return }
        // Only the emptied WAL matters here, not the frame counts the checkpoint answers.
        _ = try pool.writeWithoutTransaction { try $0.checkpoint(.truncate) }
    }

    /// Makes every commit so far survive a power loss. Every commit is in the WAL file (or,
    /// after a checkpoint, in the database file): fsync both. A checkpoint would not do: it
    /// skips its sync when a reader keeps it from copying any frame.
    public func makeDurable() throws {
        guard let path else { return }
        for file in [path + "-wal", path] {
            let fd = open(file, O_RDONLY | O_CLOEXEC)
            if fd < 0 && errno == ENOENT { continue }
            guard fd >= 0 else { throw CocoaError(.fileReadUnknown) }
            defer { close(fd) }
            guard fsync(fd) == 0 else { throw CocoaError(.fileWriteUnknown) }
        }
    }

    /// Yields after each commit that changed items, queued changes or resolutions, until
    /// `stop` is called: what a live query re-reads on. (The yield is all that runs in the
    /// committing thread.)
    public func commits() -> (commits: AsyncStream<Void>, stop: @Sendable () -> Void) {
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let observation = DatabaseRegionObservation(tracking: Table("items"), Table("outbox"), Table("resolutions"))
        let cancellable = observation.start(in: pool, onError: { _ in continuation.finish() }, onChange: { _ in continuation.yield() })
        return (stream, {
            cancellable.cancel()
            continuation.finish()
        })
    }

    public func read<T>(_ body: (LocalReader) throws -> T) throws -> T {
        try pool.read { db in try body(LocalReader(db: db)) }
    }

    public func write<T>(_ body: (LocalWriter) throws -> T) throws -> T {
        try Self.namingFullDisk { try pool.write { db in try body(LocalWriter(db: db, insertTotals: insertTotals)) } }
    }

    public func asyncRead<T: Sendable>(_ body: @escaping @Sendable (LocalReader) throws -> T) async throws -> T {
        try await pool.read { db in try body(LocalReader(db: db)) }
    }

    public func asyncWrite<T: Sendable>(_ body: @escaping @Sendable (LocalWriter) throws -> T) async throws -> T {
        do {
            return try await pool.write { db in try body(LocalWriter(db: db, insertTotals: insertTotals)) }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_FULL {
            throw LocalStoreError.diskFull
        }
    }

    /// A full volume as the one error callers tell apart from every other database failure.
    static func namingFullDisk<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as DatabaseError where error.resultCode == .SQLITE_FULL {
            throw LocalStoreError.diskFull
        }
    }
}
