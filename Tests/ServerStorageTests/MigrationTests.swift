import Foundation
import GRDB
import ItemModel
@testable import ServerStorage
import TestSupport
import Testing

/// A database an earlier version left behind, opened by this one.
@Suite struct MigrationTests {
    /// A database migrated up to `migration`, as the version that ended there left it.
    func earlierDatabase(upTo migration: String, in dir: TempDirectory, _ fill: (Database) throws -> Void) throws -> String {
        let path = dir.path + "/metadata.sqlite"
        let queue = try DatabaseQueue(path: path)
        try SQLiteMetadataStore.migrator.migrate(queue, upTo: migration)
        try queue.write(fill)
        try queue.close()
        return path
    }

    @Test func accountsAddedBeforeIdentitiesGetOneEach() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = try earlierDatabase(upTo: "v4: earlier versions", in: dir) { db in
            for name in ["alice", "bob", "carol"] {
                try db.execute(sql: "INSERT INTO accounts (name, password_hash, created) VALUES (?, 'x', 0)", arguments: [name])
            }
        }
        let store = try SQLiteMetadataStore(path: path)
        var identities: [String] = []
        for account in try await store.accounts() { identities.append(try await store.identity(of: account)) }
        #expect(identities.count == 3 && identities.allSatisfy(AccountIdentity.isWellFormed), "\(identities)")
        #expect(Set(identities).count == 3, "each its own")
        let reopened = try SQLiteMetadataStore(path: path)
        var again: [String] = []
        for account in try await reopened.accounts() { again.append(try await reopened.identity(of: account)) }
        #expect(again == identities, "made once, kept")
    }

    @Test func containersMadeBeforeKeyValueStoresHaveAnEmptyOne() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = try earlierDatabase(upTo: "v6: account identities", in: dir) { db in
            try db.execute(sql: "INSERT INTO accounts (name, password_hash, created, identity) VALUES ('alice', 'x', 0, 'i')")
            try db.execute(sql: "INSERT INTO containers (account_key, name, created) VALUES (1, 'default', 0)")
        }
        let store = try SQLiteMetadataStore(path: path)
        let alice = try #require(try await store.accounts().first)
        let container = try #require(try await store.container(.default, of: alice, create: false))
        #expect(try await store.keyValueVersion(in: container) == 0)
        #expect(try await store.setValue(Data("1".utf8), for: "k", in: container) == 1)
        #expect(try await store.keyValues(in: container, since: 0).entries == [KeyValueEntry(key: "k", version: 1, value: Data("1".utf8))])
    }
}
