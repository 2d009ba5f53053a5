import Foundation
import ItemModel
import PostgresStorage
import ServerStorage
import SyncAPI
import SyncService
import Testing
import TestSupport

/// Two server processes over one database (two stores on one SQLite file, each with its own
/// hub): a commit on one wakes the push streams of the other through the announcements, and
/// announcements lost on the way are made good by the reconnection's wake-up, from the cursor.
@Suite struct AnnouncementTests {
    struct Replica {
        let service: SyncService
        let endpoint: AnnouncementBus.Endpoint
        let following: Task<Void, Never>
    }

    static func replica(_ dir: TempDirectory, _ bus: AnnouncementBus) throws -> Replica {
        let endpoint = bus.endpoint()
        let hub = ChangeHub(announcer: endpoint)
        let service = SyncService(storage: try ServerStorage.embedded(dataDirectory: dir.path), hub: hub)
        return Replica(service: service, endpoint: endpoint, following: Task { await hub.follow() })
    }

    /// The names the stream's reads found after each wake, until `wanted` are all in.
    static func names(
        after wake: AsyncStream<Void>, _ follower: ChangeFollower, from start: ChangeCursor, until wanted: Set<String>
    ) async throws -> (seen: Set<String>, cursor: ChangeCursor) {
        var seen: Set<String> = []
        var cursor = start
        for await _ in wake {
            cursor = try await follower.send(after: cursor) { changes in seen.formUnion(changes.map(\.item.name)) }
            if wanted.isSubset(of: seen) { break }
        }
        return (seen, cursor)
    }

    @Test func aCommitOnOneReplicaWakesTheOthersStreamsAndALostAnnouncementIsMadeGoodByTheReconnection() async throws {
        let dir = try TempDirectory("ubiq-replicas")
        defer { dir.remove() }
        let bus = AnnouncementBus()
        let a = try Self.replica(dir, bus)
        let b = try Self.replica(dir, bus)
        defer { a.following.cancel(); b.following.cancel() }
        let account = try await a.service.storage.accounts.addAccount(name: "alice", passwordHash: "x")
        _ = try await a.service.ensureContainer(.default, of: account)

        let follower = try await b.service.container(.default, of: account).follow(since: .start)
        let subscription = follower.subscribe()
        defer { subscription.close() }
        func create(_ name: String) async throws {
            _ = try await a.service.createItem(CreateItemRequest(parentID: .root, name: name, kind: .folder), in: .default, of: account)
        }

        try await create("first")
        let first = try await withDeadline(.seconds(10)) {
            try await Self.names(after: subscription.signals, follower, from: .start, until: ["first"])
        }
        #expect(first.seen.contains("first"))

        // Lost on the way: B's stream is not told. The reconnection's wake-up makes it read from
        // its cursor, and it finds the change.
        bus.lose(true)
        try await create("second")
        bus.lose(false)
        #expect(bus.lost >= 1)
        b.endpoint.reconnected()
        let second = try await withDeadline(.seconds(10)) {
            try await Self.names(after: subscription.signals, follower, from: first.cursor, until: ["second"])
        }
        #expect(second.seen == ["second"], "only what came after the cursor")
    }
}

extension PostgresAnnouncements: CommitAnnouncer {}

/// The same over PostgreSQL, as replicas run: two stores on one database, each process's
/// announcements through `NOTIFY`/`LISTEN`; then every listening connection is cut, a commit
/// is made meanwhile, and the other replica's stream still finds it once it listens again.
@Suite struct PostgresAnnouncementTests {
    @Test func aCommitOnOneReplicaReachesTheOthersStreamThroughPostgreSQLAlsoAcrossALostListener() async throws {
        let cluster = try await PostgresTestCluster.shared()
        let configuration = try await cluster.makeDatabase()
        let storeA = try await PostgresMetadataStore.start(configuration)
        let storeB = try await PostgresMetadataStore.start(configuration)
        func replica(_ store: PostgresMetadataStore) -> (SyncService, Task<Void, Never>) {
            let hub = ChangeHub(announcer: PostgresAnnouncements(store: store, configuration: configuration))
            return (SyncService(storage: .postgres(store, blobs: InMemoryBlobStore()), hub: hub), Task { await hub.follow() })
        }
        let (a, followingA) = replica(storeA)
        let (b, followingB) = replica(storeB)
        defer {
            followingA.cancel()
            followingB.cancel()
        }
        let account = try await a.storage.accounts.addAccount(name: "alice", passwordHash: "x")
        _ = try await a.ensureContainer(.default, of: account)
        let follower = try await b.container(.default, of: account).follow(since: .start)
        let subscription = follower.subscribe()
        defer { subscription.close() }
        func create(_ name: String) async throws {
            _ = try await a.createItem(CreateItemRequest(parentID: .root, name: name, kind: .folder), in: .default, of: account)
        }

        // B's listener may still be connecting: commits go on until one reaches B.
        var cursor = ChangeCursor.start
        var round = 0
        try await eventually("a commit on A to wake B's stream") {
            round += 1
            try await create("first-\(round)")
            let woken = try await withDeadline(.seconds(2)) { () -> ChangeCursor? in
                for await _ in subscription.signals { return try await follower.send(after: .start) { _ in } }
                return nil
            }
            cursor = woken ?? cursor
            return woken != nil
        }

        try await cluster.admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'", database: configuration.database)
        try await create("second")
        let reached = cursor
        let second = try await withDeadline(.seconds(20)) {
            try await AnnouncementTests.names(after: subscription.signals, follower, from: reached, until: ["second"])
        }
        #expect(second.seen.contains("second"))
        await storeA.shutdown()
        await storeB.shutdown()
        try await cluster.dropDatabase(configuration)
    }
}
