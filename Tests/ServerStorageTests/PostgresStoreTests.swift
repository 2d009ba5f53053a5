import Foundation
import ItemModel
import PostgresStorage
import ServerStorage
import Synchronization
import TestSupport
import Testing

/// What the PostgreSQL store promises beyond the conformance suite: concurrency across
/// connections and processes, cursors in commit order, migrations, and durability across a
/// killed server. Each test has a database of its own in the shared throwaway cluster (the
/// crash test a cluster of its own).
@Suite struct PostgresStoreTests {
    /// A fresh database, and `body` with it; the stores `body` starts are its to shut down, the
    /// database is dropped whatever happens.
    func withDatabase(_ body: (PostgresTestCluster, PostgresConfiguration) async throws -> Void) async throws {
        let cluster = try await PostgresTestCluster.shared()
        let database = try await cluster.makeDatabase()
        do {
            try await body(cluster, database)
        } catch {
            try? await cluster.dropDatabase(database)
            throw error
        }
        try await cluster.dropDatabase(database)
    }

    /// `body` with a running store; the store is shut down whatever happens.
    func withStore<T>(_ configuration: PostgresConfiguration, _ body: (PostgresMetadataStore) async throws -> T) async throws -> T {
        let store = try await PostgresMetadataStore.start(configuration)
        do {
            let value = try await body(store)
            await store.shutdown()
            return value
        } catch {
            await store.shutdown()
            throw error
        }
    }

    /// alice, her default container, and a file in it.
    func aliceWithFile(_ store: PostgresMetadataStore, content: String = "base") async throws -> (ContainerRef, ItemMetadata) {
        let alice = try await store.addAccount(name: "alice", passwordHash: "x")
        let container = try await store.container(.default, of: alice, create: true)!
        let digest = sha256(Data(content.utf8))
        try await store.recordBlob(digest, size: Int64(content.utf8.count), for: alice)
        let file = try await store.createItem(NewItem(
            id: .random(), parentID: .root, name: try ItemName("a.txt"), kind: .file, digest: digest, declaredSize: nil,
            mode: 0o644, created: 1, modified: 1, xattrs: [:]), in: container)
        return (container, file)
    }

    /// What `ubiq-server migrate` relies on: a SQLite store's rows go into an empty database in
    /// one piece and read back byte for byte (a decomposed name stays decomposed), the cursors
    /// go on above every copied one, and a database that holds anything refuses a second copy.
    @Test func aSQLiteStoresDumpGoesInWholeAndReadsBackByteForByte() async throws {
        let folder = try TempDirectory("ubiq-dump")
        defer { folder.remove() }
        let sqlite = try SQLiteMetadataStore(path: folder.path + "/metadata.sqlite")
        let alice = try await sqlite.addAccount(name: "alice", passwordHash: "x")
        let container = try await sqlite.container(.default, of: alice, create: true)!
        let decomposed = "Cafe\u{301}"
        let folderItem = try await sqlite.createItem(NewItem(
            id: .random(), parentID: .root, name: try ItemName(decomposed), kind: .folder, digest: nil, declaredSize: nil,
            mode: 0o755, created: 1, modified: 1, xattrs: [:]), in: container)
        let content = Data("menu".utf8)
        try await sqlite.recordBlob(sha256(content), size: Int64(content.count), for: alice)
        _ = try await sqlite.createItem(NewItem(
            id: .random(), parentID: folderItem.id, name: try ItemName("menu.txt"), kind: .file, digest: sha256(content), declaredSize: nil,
            mode: 0o644, created: 2, modified: 2, xattrs: ["user.color": Data("blue".utf8)]), in: container)
        _ = try await sqlite.setValue(Data("\"dark\"".utf8), for: "theme", in: container)
        let dump = try await sqlite.exportAll()
        #expect(dump.items.count == 3 && dump.changes.count >= 2 && dump.keyValues.count == 1)

        try await withDatabase { _, database in
            try await withStore(database) { pg in
                try await pg.importAll(dump)
                let back = try await pg.exportAll()
                #expect(try dump.firstDifference(from: back) == nil)
                #expect(back.items.contains { Array($0.item.name.utf8) == Array(decomposed.utf8) })
                var composed = back
                let index = try #require(composed.items.firstIndex { $0.item.name == decomposed })
                composed.items[index].item.name = decomposed.precomposedStringWithCanonicalMapping
                #expect(try dump.firstDifference(from: composed) == "items", "a name changed to its composed form is a difference")

                let highest = try #require(dump.changes.map(\.seq).max())
                let account = try #require(try await pg.accounts().first)
                let copied = try #require(try await pg.container(.default, of: account, create: false))
                _ = try await pg.setValue(Data("1".utf8), for: "after", in: copied)
                let made = try await pg.createItem(NewItem(
                    id: .random(), parentID: .root, name: try ItemName("after.txt"), kind: .file, digest: sha256(content), declaredSize: nil,
                    mode: 0o644, created: 3, modified: 3, xattrs: [:]), in: copied)
                #expect(Int64(made.revision.rawValue)! > highest, "a new change's cursor is above every copied one")
                await #expect(throws: ImportRefused.self) { try await pg.importAll(dump) }
            }
        }
    }

    @Test func concurrentUpdatesFromOneBaseThroughSeparateServersExactlyOneWins() async throws {
        try await withDatabase { _, database in
            try await withStore(database) { first in
                let (container, file) = try await aliceWithFile(first)
                // One store per update: each its own pool, as separate server processes would be.
                let writers = 12
                var stores: [PostgresMetadataStore] = []
                do {
                    for _ in 0..<writers { stores.append(try await PostgresMetadataStore.start(database)) }
                } catch {
                    for store in stores { await store.shutdown() }
                    throw error
                }
                var digests: [ContentDigest] = []
                for i in 0..<writers {
                    let text = "edit \(i)"
                    digests.append(sha256(Data(text.utf8)))
                    try await first.recordBlob(digests[i], size: Int64(text.utf8.count), for: container.account)
                }
                let results = await withTaskGroup(of: Result<ItemMetadata, any Error>.self) { group in
                    for (store, digest) in zip(stores, digests) {
                        group.addTask {
                            do {
                                return .success(try await store.updateContent(
                                    file.id, base: file.revision, digest: digest, declaredSize: nil, modified: nil, savedBy: nil, in: container))
                            } catch { return .failure(error) }
                        }
                    }
                    return await group.reduce(into: []) { $0.append($1) }
                }
                for store in stores { await store.shutdown() }
                let winners = results.compactMap { try? $0.get() }
                #expect(winners.count == 1, "\(winners.count) updates won")
                for case .failure(let error) in results {
                    guard case StorageError.revisionConflict(let current) = error else {
                        Issue.record("a loser got \(error)")
                        continue
                    }
                    #expect(current == winners.first, "a loser sees the winner as current")
                }
                #expect(try await first.item(file.id, in: container) == winners.first, "the winner's state is stored")
                #expect(try await first.earlierVersions(of: file.id, in: container).map(\.revision) == [file.revision], "one content replaced, once")
            }
        }
    }

    @Test func aReaderFollowingTheLogDuringConcurrentCreatesSeesEveryItemOnceInOrder() async throws {
        try await withDatabase { _, database in
            try await withStore(database) { store in
                let alice = try await store.addAccount(name: "alice", passwordHash: "x")
                let container = try await store.container(.default, of: alice, create: true)!
                let start = try await store.latestCursor(in: container)
                let writers = 8, perWriter = 40
                let done = Atomic(false)

                // The reader polls the log by cursor while the writers run, as a push stream
                // does; what it collects must be every created item once, cursors rising.
                let reader = Task { () throws -> (ids: [String], backwards: [String]) in
                    var cursor = start
                    var ids: [String] = []
                    var backwards: [String] = []
                    var last = start.position!
                    while true {
                        let finished = done.load(ordering: .acquiring)
                        while true {
                            let page = try await store.encodedChanges(in: container, since: cursor, limit: 7)
                            for entry in page.entries {
                                let position = entry.cursor.position!
                                if position <= last { backwards.append("\(position) after \(last)") }
                                last = position
                                ids.append(try JSONDecoder().decode(ItemMetadata.self, from: entry.item).id.rawValue)
                            }
                            cursor = page.cursor
                            if !page.hasMore { break }
                        }
                        // One full pass after the writers finished, then stop.
                        if finished { return (ids, backwards) }
                        await Task.yield()
                    }
                }
                let created = try await withThrowingTaskGroup(of: [String].self) { group in
                    for w in 0..<writers {
                        group.addTask {
                            var made: [String] = []
                            for i in 0..<perWriter {
                                let item = try await store.createItem(NewItem(
                                    id: .random(), parentID: .root, name: try ItemName("w\(w)-\(i)"), kind: .folder, digest: nil,
                                    declaredSize: nil, mode: 0o755, created: 1, modified: 1, xattrs: [:]), in: container)
                                made.append(item.id.rawValue)
                            }
                            return made
                        }
                    }
                    return try await group.reduce(into: [String]()) { $0 += $1 }
                }
                done.store(true, ordering: .releasing)
                let seen = try await reader.value
                #expect(seen.backwards.isEmpty, "cursors went backwards: \(seen.backwards.prefix(5))")
                let missed = Set(created).subtracting(seen.ids), strangers = Set(seen.ids).subtracting(created)
                #expect(missed.isEmpty, "\(missed.count) of \(created.count) committed entries were never read: skipped behind the reader's cursor")
                #expect(strangers.isEmpty && seen.ids.count == created.count, "\(seen.ids.count) entries read for \(created.count) items: each once")
                #expect(try await store.latestCursor(in: container).position == start.position! + Int64(writers * perWriter), "one cursor per change, none lost")
            }
        }
    }

    @Test func oneNameAddedByManyAtOnceIsOneAccountAndTheOthersAreToldItExists() async throws {
        try await withDatabase { _, database in
            try await withStore(database) { store in
                let results = await withTaskGroup(of: Result<AccountRef, any Error>.self) { group in
                    for _ in 0..<8 {
                        group.addTask {
                            do { return .success(try await store.addAccount(name: "carol", passwordHash: "h")) } catch { return .failure(error) }
                        }
                    }
                    return await group.reduce(into: []) { $0.append($1) }
                }
                let made = results.filter { (try? $0.get()) != nil }.count
                let told = results.filter { if case .failure(StorageError.accountExists("carol")) = $0 { true } else { false } }.count
                #expect(made == 1 && told == results.count - 1, "\(made) made, \(told) told it exists: \(results)")
                let names = try await store.accounts().map(\.name)
                #expect(names == ["carol"])
            }
        }
    }

    @Test func migrationsRunOnceAndASecondStartChangesNothing() async throws {
        try await withDatabase { _, database in
            let first = try await withStore(database) { try await $0.appliedMigrations() }
            #expect(first.map(\.version) == Array(1...PostgresMetadataStore.schemaVersion), "every migration, in order: \(first.map(\.version))")
            let second = try await withStore(database) { store in
                _ = try await store.addAccount(name: "alice", passwordHash: "x")
                return try await store.appliedMigrations()
            }
            #expect(second.map(\.version) == first.map(\.version) && second.map(\.applied) == first.map(\.applied), "the second start applied nothing")
            let names = try await withStore(database) { try await $0.accounts().map(\.name) }
            #expect(names == ["alice"], "the first start's data is there after the second")
        }
    }

    @Test func storesStartingAtOnceOnAFreshDatabaseAllComeUp() async throws {
        // Three rounds, each on a database of its own: the race is in the first migration.
        for round in 0..<3 {
            try await withDatabase { _, database in
                let started = await withTaskGroup(of: Result<PostgresMetadataStore, any Error>.self) { group in
                    for _ in 0..<4 {
                        group.addTask {
                            do { return .success(try await PostgresMetadataStore.start(database)) } catch { return .failure(error) }
                        }
                    }
                    return await group.reduce(into: []) { $0.append($1) }
                }
                let stores = started.compactMap { try? $0.get() }
                for case .failure(let error) in started { Issue.record("round \(round): a store did not start: \(error)") }
                if let store = stores.first {
                    let applied = try? await store.appliedMigrations()
                    #expect(applied?.map(\.version) == Array(1...PostgresMetadataStore.schemaVersion), "each migration recorded once")
                }
                for store in stores { await store.shutdown() }
            }
        }
    }

    @Test func aKilledServerKeepsEveryAcknowledgedWrite() async throws {
        // A cluster of its own: the others' tests must not see their server die.
        let cluster = try await PostgresTestCluster.start()
        do {
            let database = try await cluster.makeDatabase()
            // Acknowledged writes of every kind, then the server killed (no checkpoint, no
            // shutdown: the next start replays the WAL).
            let (container, items, versions, renamed) = try await withStore(database) { store in
                let (container, file) = try await aliceWithFile(store)
                var items: [ItemMetadata] = [file]
                for i in 0..<50 {
                    items.append(try await store.createItem(NewItem(
                        id: .random(), parentID: .root, name: try ItemName("folder \(i)"), kind: .folder, digest: nil, declaredSize: nil,
                        mode: 0o755, created: 1, modified: 1, xattrs: [:]), in: container))
                }
                let renamed = try await store.updateItem(items[1].id, base: items[1].revision, update: ItemUpdate(name: try ItemName("renamed")), in: container)
                var versions: [Int64] = []
                for i in 0..<5 { versions.append(try await store.setValue(Data("\(i)".utf8), for: "key \(i)", in: container)) }
                try await cluster.stopServer(mode: "immediate")
                return (container, items, versions, renamed)
            }
            try await cluster.startServer()
            try await withStore(database) { store in
                let root = try await store.children(of: .root, in: container)
                let expected = Set(items.map(\.id)).subtracting([renamed.id])
                #expect(Set(root.map(\.id)) == expected.union([renamed.id]), "every created item is there")
                #expect(root.first { $0.id == renamed.id } == renamed, "the rename is there")
                let all = try await store.changes(in: container, since: .start, limit: 1_000)
                #expect(all.changes.count == items.count + 1, "the log: the root and every item")
                #expect(try await store.latestCursor(in: container) == ChangeCursor(renamed.revision.rawValue), "the latest cursor is the last acknowledged change")
                let kv = try await store.keyValues(in: container, since: 0)
                #expect(kv.version == versions.last && kv.entries.count == 5, "every key-value write: \(kv.version)")
            }
        } catch {
            await cluster.remove()
            throw error
        }
        await cluster.remove()
    }

    @Test func theConnectionURLNamesNoPasswordAndTheEnvironmentOrAFileGivesIt() throws {
        let fromEnvironment = try PostgresConfiguration(
            url: "postgres://ubiq@db.example:6432/metadata?sslmode=require&pool_max=5", password: .environment(["PGPASSWORD": "secret"]))
        #expect(fromEnvironment == PostgresConfiguration(
            host: "db.example", port: 6432, user: "ubiq", database: "metadata", password: "secret", tls: .require, maximumConnections: 5))
        #expect(!"\(fromEnvironment)".contains("secret"), "a configuration never shows its password: \(fromEnvironment)")
        #expect(try PostgresConfiguration(url: "postgresql://ubiq@localhost/m", password: .environment([:])).password == nil)
        let dir = try TempDirectory()
        defer { dir.remove() }
        FileManager.default.createFile(atPath: dir.path + "/pw", contents: Data("from file\nignored\n".utf8))
        #expect(try PostgresConfiguration(url: "postgres://ubiq@localhost/m", password: .file(dir.path + "/pw")).password == "from file")
        for bad in ["postgres://ubiq:secret@localhost/m", "mysql://ubiq@localhost/m", "postgres://ubiq@localhost/", "postgres://localhost/m", "postgres://ubiq@localhost/m?colour=blue"] {
            #expect(throws: PostgresConfiguration.Invalid.self, "\(bad)") { try PostgresConfiguration(url: bad, password: .none) }
        }
    }
}
