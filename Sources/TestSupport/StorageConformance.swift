import Foundation
import ItemModel
import NIOCore
import PostgresStorage
import S3BlobStore
import ServerStorage

/// One storage implementation under test: how to make a fresh, empty one. `cleanup` stops what
/// `make` started and removes what it made; it runs whether the check passed or not.
public struct StorageBackend: Sendable, CustomStringConvertible {
    public typealias Made = (storage: ServerStorage, cleanup: @Sendable () async -> Void)
    public let description: String
    public let make: @Sendable () async throws -> Made

    public init(_ name: String, make: @escaping @Sendable () async throws -> Made) {
        self.description = name
        self.make = make
    }

    /// Every implementation the project has. A new backend joins here and the whole suite runs over it.
    public static let all: [StorageBackend] = [
        StorageBackend("sqlite-file+blob-folder") {
            let dir = try TempDirectory("ubiq-storage")
            return (try ServerStorage.embedded(dataDirectory: dir.path), { dir.remove() })
        },
        StorageBackend("sqlite-memory+memory-blobs") {
            let metadata = try SQLiteMetadataStore.inMemory()
            return (ServerStorage.sqlite(metadata, blobs: InMemoryBlobStore()), {})
        },
        // A database of its own in the process's throwaway cluster (PostgresTestCluster), blobs
        // in a bucket of their own on the tests' S3 server (S3TestServer): the scaled-out pair.
        StorageBackend("postgres+s3") {
            let (blobs, removeBucket) = try await s3Blobs()
            let cluster: PostgresTestCluster
            let database: PostgresConfiguration
            let store: PostgresMetadataStore
            do {
                cluster = try await PostgresTestCluster.shared()
                database = try await cluster.makeDatabase()
                do {
                    store = try await PostgresMetadataStore.start(database)
                } catch {
                    try? await cluster.dropDatabase(database)
                    throw error
                }
            } catch {
                await removeBucket()
                throw error
            }
            return (ServerStorage.postgres(store, blobs: blobs), {
                await store.shutdown()
                try? await cluster.dropDatabase(database)
                await removeBucket()
            })
        },
    ]

    /// A bucket of its own on the tests' S3 server, the blobs under a prefix (as a deployment
    /// sharing a bucket would keep them), and how to remove it.
    static func s3Blobs() async throws -> (S3BlobStore, @Sendable () async -> Void) {
        let bucket = try await S3TestServer.makeBucket("conformance")
        let s3 = bucket.configuration
        do {
            let blobs = try S3BlobStore(S3BlobStoreConfiguration(
                endpoint: s3.endpoint, region: s3.region, bucket: s3.bucket, pathStyle: true, keyPrefix: "blobs/", credentials: s3.credentials))
            return (blobs, { try? await bucket.remove() })
        } catch {
            try? await bucket.remove()
            throw error
        }
    }
}

/// A failed expectation inside the conformance suite.
public struct ConformanceFailure: Error, CustomStringConvertible {
    public let description: String
}

func expect(_ condition: Bool, _ message: @autoclosure () -> String, line: Int = #line) throws {
    if !condition { throw ConformanceFailure(description: "line \(line): \(message())") }
}

func expectStorageError<T>(
    _ what: String, line: Int = #line, _ matches: (StorageError) -> Bool, _ body: () async throws -> T
) async throws {
    do {
        _ = try await body()
    } catch let error as StorageError {
        try expect(matches(error), "\(what): unexpected \(error)", line: line)
        return
    }
    throw ConformanceFailure(description: "line \(line): \(what): expected a refusal, got success")
}

/// The storage conformance suite: the behaviour SyncServer relies on, checked on every backend.
public struct StorageConformance: Sendable, CustomStringConvertible {
    public let description: String
    let body: @Sendable (Fixture) async throws -> Void

    public func run(on backend: StorageBackend) async throws {
        let (storage, cleanup) = try await backend.make()
        do {
            try await body(try await Fixture(storage))
        } catch {
            await cleanup()
            throw error
        }
        await cleanup()
    }

    /// A fresh storage with one account ("alice") and her "default" container.
    public struct Fixture: Sendable {
        public let storage: ServerStorage
        public let alice: AccountRef
        public let container: ContainerRef

        init(_ storage: ServerStorage) async throws {
            self.storage = storage
            alice = try await storage.accounts.addAccount(name: "alice", passwordHash: "x")
            container = try await storage.metadata.container(.default, of: alice, create: true)!
        }

        var m: any MetadataStore { storage.metadata }

        func blob(_ text: String) async throws -> ContentDigest {
            let writer = try await storage.blobs.makeWriter()
            try await writer.write(ByteBuffer(string: text))
            let (digest, size) = try await writer.commit(expecting: nil)
            try await m.recordBlob(digest, size: size, for: alice)
            return digest
        }

        func file(_ name: String, in parent: ItemID = .root, _ text: String = "") async throws -> ItemMetadata {
            let digest = try await blob(text)
            return try await m.createItem(newItem(name, parent: parent, kind: .file, digest: digest), in: container)
        }

        func folder(_ name: String, in parent: ItemID = .root) async throws -> ItemMetadata {
            try await m.createItem(newItem(name, parent: parent, kind: .folder), in: container)
        }

        func newItem(
            _ name: String, parent: ItemID = .root, kind: ItemKind, digest: ContentDigest? = nil, id: ItemID = .random(), size: Int64? = nil, target: String? = nil
        ) throws -> NewItem {
            NewItem(id: id, parentID: parent, name: try ItemName(name), kind: kind, digest: digest, declaredSize: size,
                    mode: ItemMetadata.defaultMode(for: kind), created: 1, modified: 2, xattrs: [:], target: target)
        }

        func allChanges(since: ChangeCursor = .start) async throws -> [ItemChange] {
            var out: [ItemChange] = []
            var cursor = since
            while true {
                let page = try await storage.changes.changes(in: container, since: cursor, limit: 3)
                out += page.changes
                cursor = page.cursor
                if !page.hasMore { return out }
            }
        }
    }

    init(_ name: String, _ body: @escaping @Sendable (Fixture) async throws -> Void) {
        self.description = name
        self.body = body
    }

    /// Every check: items, accounts and their tokens, account identities and key-value stores.
    public static let all: [StorageConformance] = items + accounts + identities + keyValues

    static let items: [StorageConformance] = [
        StorageConformance("accounts and tokens") { f in
            let s = f.storage.accounts
            try await expectStorageError("duplicate account", { if case .accountExists = $0 { true } else { false } }) {
                try await s.addAccount(name: "alice", passwordHash: "y")
            }
            try await expectStorageError("bad account name", { if case .invalidAccountName = $0 { true } else { false } }) {
                try await s.addAccount(name: "a b", passwordHash: "y")
            }
            let bob = try await s.addAccount(name: "bob", passwordHash: "h")
            try expect(try await s.accounts().map(\.name) == ["alice", "bob"], "accounts listed by name")
            _ = try await f.m.container(.default, of: bob, create: true)
            _ = try await s.removeAccount(name: "bob")
            try expect(try await s.accounts().map(\.name) == ["alice"], "removed account is gone")
            try await expectStorageError("remove unknown", { if case .accountNotFound = $0 { true } else { false } }) {
                _ = try await s.removeAccount(name: "bob")
            }
        },
        StorageConformance("containers are per account") { f in
            let bob = try await f.storage.accounts.addAccount(name: "bob", passwordHash: "h")
            try expect(try await f.m.container(.default, of: bob, create: false) == nil, "bob does not see alice's container")
            let bobs = try await f.m.container(.default, of: bob, create: true)!
            try expect(bobs.key != f.container.key, "same name, different container")
            _ = try await f.file("a.txt", "alice's")
            try expect(try await f.m.children(of: .root, in: bobs).isEmpty, "bob's container is empty")
            let other = try await f.m.container(try ContainerID("iCloud.com.example.app"), of: f.alice, create: true)!
            try expect(try await f.m.containers(of: f.alice).map(\.id.rawValue) == ["default", "iCloud.com.example.app"], "listing")
            try expect(try await f.m.item(.root, in: other)?.kind == .folder, "a new container has a root folder")
            try expect(try await f.m.container(.default, of: f.alice, create: true) == f.container, "create is idempotent")
        },
        StorageConformance("concurrent creates of one container: exactly one made it") { f in
            let m = f.m, alice = f.alice
            for round in 0..<4 {
                let id = try ContainerID("race-\(round)")
                let made = try await withThrowingTaskGroup(of: (ContainerRef, Bool).self) { group in
                    for _ in 0..<8 { group.addTask { try await m.ensureContainer(id, of: alice) } }
                    return try await group.reduce(into: [(ContainerRef, Bool)]()) { $0.append($1) }
                }
                try expect(made.filter(\.1).count == 1, "round \(round): \(made.filter(\.1).count) calls say they created it")
                try expect(Set(made.map(\.0.key)).count == 1, "round \(round): every call got the same container")
            }
        },
        StorageConformance("create files and folders") { f in
            let docs = try await f.folder("Documents")
            let a = try await f.file("a.txt", in: docs.id, "hello")
            try expect(a.size == 5 && a.digest != nil && a.parentID == docs.id && a.created == 1 && a.modified == 2, "file metadata \(a)")
            let empty = try await f.m.createItem(try f.newItem("empty", kind: .file), in: f.container)
            try expect(empty.size == 0 && empty.digest == .empty, "a file without digest is empty")
            try expect(try await f.m.children(of: docs.id, in: f.container) == [a], "children")
            try await expectStorageError("name clash", { if case .nameExists(let e) = $0 { e.id == a.id } else { false } }) {
                try await f.file("a.txt", in: docs.id)
            }
            try await expectStorageError("missing blob", { if case .blobNotFound = $0 { true } else { false } }) {
                try await f.m.createItem(try f.newItem("b", kind: .file, digest: sha256(Data("never uploaded".utf8))), in: f.container)
            }
            let digest = try await f.blob("12345")
            try await expectStorageError("size mismatch", { if case .sizeMismatch = $0 { true } else { false } }) {
                try await f.m.createItem(try f.newItem("c", kind: .file, digest: digest, size: 4), in: f.container)
            }
            try await expectStorageError("parent is a file", { if case .notAFolder = $0 { true } else { false } }) {
                try await f.file("x", in: a.id)
            }
            try await expectStorageError("parent missing", { if case .itemNotFound = $0 { true } else { false } }) {
                try await f.file("x", in: ItemID.random())
            }
            // A retried create with the same id gives the same item back; another use of the id is refused.
            let id = ItemID.random()
            let first = try await f.m.createItem(try f.newItem("retry", kind: .folder, id: id), in: f.container)
            let again = try await f.m.createItem(try f.newItem("retry", kind: .folder, id: id), in: f.container)
            try expect(first == again, "retried create is idempotent")
            try await expectStorageError("id taken", { if case .itemIDTaken = $0 { true } else { false } }) {
                try await f.m.createItem(try f.newItem("other", kind: .folder, id: id), in: f.container)
            }
            try await expectStorageError("bad xattr", { if case .invalidXattr = $0 { true } else { false } }) {
                var n = try f.newItem("x", kind: .folder)
                n.xattrs = ["user.ubiq.pinned": Data("1".utf8)]
                return try await f.m.createItem(n, in: f.container)
            }
        },
        StorageConformance("links: kept with their target, which a retried create must repeat; FIFOs, sockets and links without a target refused") { f in
            let id = ItemID.random()
            let link = try await f.m.createItem(try f.newItem("latest", kind: .symlink, id: id, target: "reports/11.pdf"), in: f.container)
            try expect(link.kind == .symlink && link.target == "reports/11.pdf" && link.size == 14 && link.digest == nil, "a link as made: \(link)")
            try expect(try await f.m.item(id, in: f.container) == link, "read back")
            try expect(try await f.allChanges().last?.item == link, "the change log carries the target")
            try expect(try await f.m.createItem(try f.newItem("latest", kind: .symlink, id: id, target: "reports/11.pdf"), in: f.container) == link, "a retried create")
            try await expectStorageError("another target under the same id", { if case .itemIDTaken = $0 { true } else { false } }) {
                try await f.m.createItem(try f.newItem("latest", kind: .symlink, id: id, target: "reports/12.pdf"), in: f.container)
            }
            try await expectStorageError("no target", { if case .invalidTarget(.empty) = $0 { true } else { false } }) {
                try await f.m.createItem(try f.newItem("bare", kind: .symlink), in: f.container)
            }
            for kind in [ItemKind.fifo, .socket] {
                try await expectStorageError("a \(kind)", { if case .unsyncedKind(kind) = $0 { true } else { false } }) {
                    try await f.m.createItem(try f.newItem("special", kind: kind), in: f.container)
                }
            }
            let moved = try await f.m.updateItem(id, base: link.revision, update: ItemUpdate(name: try ItemName("newest")), in: f.container)
            try expect(moved.target == "reports/11.pdf" && moved.name == "newest", "a rename keeps the target")
        },
        StorageConformance("content updates check the base revision") { f in
            let a = try await f.file("a.txt", "v1")
            let v2 = try await f.blob("version 2")
            let b = try await f.m.updateContent(a.id, base: a.revision, digest: v2, declaredSize: 9, modified: 7, savedBy: nil, in: f.container)
            try expect(b.revision != a.revision && b.size == 9 && b.digest == v2 && b.modified == 7, "new revision \(b)")
            let v3 = try await f.blob("version 3")
            try await expectStorageError("stale base", { if case .revisionConflict(let cur) = $0 { cur == b } else { false } }) {
                try await f.m.updateContent(a.id, base: a.revision, digest: v3, declaredSize: nil, modified: nil, savedBy: nil, in: f.container)
            }
            try expect(try await f.m.item(a.id, in: f.container) == b, "a refused upload changes nothing")
            try await expectStorageError("folder has no content", { if case .notAFile = $0 { true } else { false } }) {
                try await f.m.updateContent(.root, base: Revision("1"), digest: v3, declaredSize: nil, modified: nil, savedBy: nil, in: f.container)
            }
        },
        StorageConformance("concurrent uploads from one base: exactly one wins") { f in
            let a = try await f.file("a.txt", "base")
            var digests: [ContentDigest] = []
            for i in 0..<16 { digests.append(try await f.blob("edit \(i)")) }
            let m = f.m, container = f.container
            let results = await withTaskGroup(of: Result<ItemMetadata, Error>.self) { group in
                for d in digests {
                    group.addTask {
                        do { return .success(try await m.updateContent(a.id, base: a.revision, digest: d, declaredSize: nil, modified: nil, savedBy: nil, in: container)) }
                        catch { return .failure(error) }
                    }
                }
                var all: [Result<ItemMetadata, Error>] = []
                for await r in group { all.append(r) }
                return all
            }
            let winners = results.compactMap { try? $0.get() }
            try expect(winners.count == 1, "\(winners.count) uploads won")
            for case .failure(let e) in results {
                guard case StorageError.revisionConflict(let current) = e else { throw ConformanceFailure(description: "loser got \(e)") }
                try expect(current == winners[0], "losers see the winner as current")
            }
        },
        StorageConformance("rename and move") { f in
            let a = try await f.folder("A")
            let b = try await f.folder("B", in: a.id)
            let x = try await f.file("x.txt", in: b.id, "x")
            let moved = try await f.m.updateItem(x.id, base: x.revision, update: ItemUpdate(name: try ItemName("y.txt"), parentID: a.id), in: f.container)
            try expect(moved.name == "y.txt" && moved.parentID == a.id && moved.digest == x.digest, "moved \(moved)")
            try await expectStorageError("stale base", { if case .revisionConflict = $0 { true } else { false } }) {
                try await f.m.updateItem(x.id, base: x.revision, update: ItemUpdate(name: try ItemName("z")), in: f.container)
            }
            try await expectStorageError("into itself", { if case .invalidMove = $0 { true } else { false } }) {
                try await f.m.updateItem(a.id, base: a.revision, update: ItemUpdate(parentID: a.id), in: f.container)
            }
            try await expectStorageError("below itself", { if case .invalidMove = $0 { true } else { false } }) {
                try await f.m.updateItem(a.id, base: a.revision, update: ItemUpdate(parentID: b.id), in: f.container)
            }
            try await expectStorageError("name taken", { if case .nameExists = $0 { true } else { false } }) {
                try await f.m.updateItem(b.id, base: b.revision, update: ItemUpdate(name: try ItemName("y.txt")), in: f.container)
            }
            try await expectStorageError("root", { if case .rootIsImmutable = $0 { true } else { false } }) {
                try await f.m.updateItem(.root, base: Revision("1"), update: ItemUpdate(name: try ItemName("r")), in: f.container)
            }
            let chmod = try await f.m.updateItem(moved.id, base: moved.revision, update: ItemUpdate(mode: 0o600, modified: 99), in: f.container)
            try expect(chmod.mode == 0o600 && chmod.modified == 99 && chmod.name == "y.txt", "chmod and touch")
        },
        StorageConformance("delete leaves tombstones") { f in
            let d = try await f.folder("D")
            let e = try await f.folder("E", in: d.id)
            let x = try await f.file("x", in: e.id, "x")
            try await expectStorageError("not empty", { if case .folderNotEmpty = $0 { true } else { false } }) {
                try await f.m.deleteItem(d.id, base: d.revision, recursive: false, in: f.container)
            }
            try await expectStorageError("stale base", { if case .revisionConflict = $0 { true } else { false } }) {
                try await f.m.deleteItem(x.id, base: Revision("999999"), recursive: false, in: f.container)
            }
            let gone = try await f.m.deleteItem(d.id, base: d.revision, recursive: true, in: f.container)
            try expect(gone.map(\.id) == [x.id, e.id, d.id] && gone.allSatisfy(\.deleted), "children first: \(gone.map(\.name))")
            try expect(try await f.m.item(x.id, in: f.container) == nil, "deleted items are not found")
            try expect(try await f.m.children(of: .root, in: f.container).isEmpty, "root is empty")
            let again = try await f.folder("D")
            try expect(again.id != d.id, "a name is free again after delete")
            let log = try await f.allChanges()
            try expect(log.filter { $0.kind == .delete }.map(\.item.id) == [x.id, e.id, d.id], "tombstones in the log")
            try await expectStorageError("root", { if case .rootIsImmutable = $0 { true } else { false } }) {
                try await f.m.deleteItem(.root, base: nil, recursive: true, in: f.container)
            }
        },
        StorageConformance("synced xattrs") { f in
            let a = try await f.file("a", "a")
            let tagged = try await f.m.setXattrs(a.id, base: a.revision, xattrs: ["user.xdg.tags": Data("work".utf8)], in: f.container)
            try expect(tagged.xattrs["user.xdg.tags"] == Data("work".utf8) && tagged.revision != a.revision, "xattr set")
            try await expectStorageError("stale base", { if case .revisionConflict = $0 { true } else { false } }) {
                try await f.m.setXattrs(a.id, base: a.revision, xattrs: [:], in: f.container)
            }
            for bad in ["security.x", "user.ubiq.pinned", "user.", "trusted.x"] {
                try await expectStorageError("xattr \(bad)", { if case .invalidXattr = $0 { true } else { false } }) {
                    try await f.m.setXattrs(a.id, base: nil, xattrs: [bad: Data()], in: f.container)
                }
            }
            try await expectStorageError("too large", { if case .invalidXattr = $0 { true } else { false } }) {
                try await f.m.setXattrs(a.id, base: nil, xattrs: ["user.big": Data(count: 65_537)], in: f.container)
            }
        },
        StorageConformance("change log: ordered, compacted, paged") { f in
            let start = try await f.storage.changes.latestCursor(in: f.container)
            let entriesBefore = try await f.storage.changes.entryCount()
            let a = try await f.file("a", "1")
            let b = try await f.folder("b")
            let a2 = try await f.m.updateItem(a.id, base: a.revision, update: ItemUpdate(name: try ItemName("a2")), in: f.container)
            let c = try await f.file("c", in: b.id, "3")
            let changes = try await f.allChanges(since: start)
            try expect(changes.map(\.item.id) == [b.id, a.id, c.id], "latest change per item, in commit order: \(changes.map(\.item.name))")
            try expect(changes[1].item == a2, "an item's entry is its latest state")
            try expect(try await f.storage.changes.entryCount() - entriesBefore == 3, "the log's length: one entry per item")
            try expect(zip(changes, changes.dropFirst()).allSatisfy { Int($0.cursor.rawValue)! < Int($1.cursor.rawValue)! }, "cursors increase")
            try expect(changes.allSatisfy { $0.item.revision.rawValue == $0.cursor.rawValue }, "revision is the change's position")
            let latest = try await f.storage.changes.latestCursor(in: f.container)
            try expect(latest == changes.last!.cursor, "latest cursor")
            let none = try await f.storage.changes.changes(in: f.container, since: latest, limit: 10)
            try expect(none.changes.isEmpty && none.cursor == latest && !none.hasMore, "nothing after the latest")
            let full = try await f.allChanges()
            try expect(full.first?.item.id == .root && full.count == 4, "since start: a snapshot with the root")
            try await expectStorageError("bad cursor", { if case .invalidCursor = $0 { true } else { false } }) {
                try await f.storage.changes.changes(in: f.container, since: ChangeCursor("abc"), limit: 10)
            }
            // Another account's container has its own log.
            let bob = try await f.storage.accounts.addAccount(name: "bob", passwordHash: "h")
            let bobs = try await f.m.container(.default, of: bob, create: true)!
            let bobLog = try await f.storage.changes.changes(in: bobs, since: .start, limit: 100)
            try expect(bobLog.changes.map(\.item.id) == [.root], "bob's log holds only his root")
        },
        StorageConformance("blobs: digest checked, per-account access, ranges") { f in
            let content = Data((0..<100_000).map { UInt8($0 % 251) })
            let writer = try await f.storage.blobs.makeWriter()
            // In pieces, as a request body arrives.
            for start in stride(from: 0, to: content.count, by: 30_000) {
                try await writer.write(ByteBuffer(bytes: content[start..<min(start + 30_000, content.count)]))
            }
            let (digest, size) = try await writer.commit(expecting: sha256(content))
            try expect(digest == sha256(content) && size == 100_000, "digest and size")
            try expect(try await f.storage.blobs.size(of: digest) == 100_000, "size(of:)")
            let reader = try await f.storage.blobs.openReader(digest)
            try expect(reader.size == 100_000, "the reader's size")
            var chunks: [Int] = []
            var read: [UInt8] = []
            try await reader.read(99_990..<100_000, firstChunkSize: 4, chunkSize: 5) { chunk in
                chunks.append(chunk.readableBytes)
                read += chunk.readableBytesView
            }
            try expect(read == Array(content.suffix(10)) && chunks.allSatisfy { $0 <= 5 } && chunks.first.map { $0 <= 4 } == true,
                       "a range at an offset, in chunks of at most the sizes asked: \(chunks)")
            read = []
            try await reader.read(0..<100_000, chunkSize: 1 << 20) { read += $0.readableBytesView }
            try expect(read == Array(content), "the whole blob")
            reader.close()

            let bad = try await f.storage.blobs.makeWriter()
            try await bad.write(ByteBuffer(string: "not what was declared"))
            do {
                _ = try await bad.commit(expecting: sha256(Data("something else".utf8)))
                throw ConformanceFailure(description: "a mismatching digest was accepted")
            } catch BlobStoreError.digestMismatch {}
            await bad.abort()
            try expect(try await f.storage.blobs.size(of: sha256(Data("not what was declared".utf8))) == nil, "a refused blob is not stored")
            try expect(try await f.storage.blobs.digests(writtenBefore: .max) == [digest], "and not listed")

            try expect(try await f.m.blobSize(digest, for: f.alice) == nil, "not usable before it is recorded")
            let keptBefore = try await f.m.grantedContentBytes()
            try await f.m.recordBlob(digest, size: size, for: f.alice)
            try expect(try await f.m.blobSize(digest, for: f.alice) == 100_000, "usable by the uploader")
            let bob = try await f.storage.accounts.addAccount(name: "bob", passwordHash: "h")
            try await f.m.recordBlob(digest, size: size, for: bob)
            try expect(try await f.m.grantedContentBytes() - keptBefore == 100_000, "content kept is counted once, however many accounts use it")
            let carol = try await f.storage.accounts.addAccount(name: "carol", passwordHash: "h")
            try expect(try await f.m.blobSize(digest, for: carol) == nil, "another account cannot probe it")
            try expect(try await f.m.blobSize(.empty, for: carol) == 0, "everyone has the empty blob")
            try expect(try await f.storage.blobs.openReader(.empty).size == 0, "the empty blob reads")
        },
        StorageConformance("conflict versions: kept with a new revision, resolved by choice") { f in
            let file = try await f.file("notes.txt", "current")
            let theirs = try await f.blob("their edit")
            let version = ConflictVersion(id: .random(), digest: theirs, size: 10, device: "laptop", modified: 7, base: file.revision)
            let kept = try await f.m.addConflictVersion(file.id, version, in: f.container)
            try expect(kept.conflicts == [version] && kept.revision.isNewer(than: file.revision), "kept, with a new revision")
            try expect(kept.digest == file.digest && kept.size == file.size, "the current content stays")
            try expect(try await f.m.item(file.id, in: f.container) == kept, "read back as kept")
            try expect(try await f.allChanges().last?.item == kept, "in the change log")
            try expect(try await f.m.addConflictVersion(file.id, version, in: f.container) == kept, "a retried send adds nothing")
            try await expectStorageError("content not the account's", { if case .blobNotFound = $0 { true } else { false } }) {
                try await f.m.addConflictVersion(file.id, ConflictVersion(id: .random(), digest: sha256(Data("never".utf8)), size: 5, device: "d", modified: 1, base: file.revision), in: f.container)
            }
            try await expectStorageError("size not the content's", { if case .sizeMismatch = $0 { true } else { false } }) {
                try await f.m.addConflictVersion(file.id, ConflictVersion(id: .random(), digest: theirs, size: 3, device: "d", modified: 1, base: file.revision), in: f.container)
            }
            try await expectStorageError("no device", { if case .invalidDevice = $0 { true } else { false } }) {
                try await f.m.addConflictVersion(file.id, ConflictVersion(id: .random(), digest: theirs, size: 10, device: "", modified: 1, base: file.revision), in: f.container)
            }
            let folder = try await f.folder("Folder")
            try await expectStorageError("a folder has no versions", { if case .notAFile = $0 { true } else { false } }) {
                try await f.m.addConflictVersion(folder.id, version, in: f.container)
            }

            // Resolution from what the resolver saw: a version kept since then stays.
            let later = ConflictVersion(id: .random(), digest: try await f.blob("later edit"), size: 10, device: "phone", modified: 8, base: file.revision)
            let both = try await f.m.addConflictVersion(file.id, later, in: f.container)
            try await expectStorageError("a stale base", { if case .revisionConflict = $0 { true } else { false } }) {
                try await f.m.resolveConflicts(file.id, base: kept.revision, settled: [version.id], keep: nil, copies: [], in: f.container)
            }
            try await expectStorageError("an unknown version", { if case .versionNotFound = $0 { true } else { false } }) {
                try await f.m.resolveConflicts(file.id, base: both.revision, settled: [], keep: .random(), copies: [], in: f.container)
            }
            let chosen = try await f.m.resolveConflicts(file.id, base: both.revision, settled: [version.id], keep: version.id, copies: [], in: f.container)
            try expect(chosen.digest == theirs && chosen.size == 10 && chosen.modified == 7, "the chosen version is current")
            try expect(chosen.conflicts == [later], "the version nobody saw stays")
            let settled = try await f.m.resolveConflicts(file.id, base: chosen.revision, settled: [later.id], keep: nil, copies: [], in: f.container)
            try expect(settled.conflicts.isEmpty && settled.digest == theirs, "kept current: the others go")

            _ = try await f.m.addConflictVersion(file.id, ConflictVersion(id: .random(), digest: theirs, size: 10, device: "d", modified: 1, base: settled.revision), in: f.container)
            let tombstone = try await f.m.deleteItem(file.id, base: nil, recursive: false, in: f.container)
            try expect(tombstone.map(\.conflicts) == [[]], "a deleted file's versions go with it")
        },
        StorageConformance("earlier versions: each replaced content is kept, listed newest first, restored as a new revision, forgotten by age") { f in
            let file = try await f.file("notes.txt", "one")
            let two = try await f.blob("two")
            let r2 = try await f.m.updateContent(file.id, base: file.revision, digest: two, declaredSize: 3, modified: 20, savedBy: nil, in: f.container)
            let moved = try await f.m.updateItem(file.id, base: r2.revision, update: ItemUpdate(name: try ItemName("renamed.txt")), in: f.container)
            let three = try await f.blob("three")
            let r3 = try await f.m.updateContent(file.id, base: moved.revision, digest: three, declaredSize: 5, modified: 30, savedBy: nil, in: f.container)
            let same = try await f.m.updateContent(file.id, base: r3.revision, digest: three, declaredSize: 5, modified: 31, savedBy: nil, in: f.container)
            let earlier = try await f.m.earlierVersions(of: file.id, in: f.container)
            try expect(earlier.map(\.revision) == [moved.revision, file.revision], "one per replaced content, newest first (a rename keeps none, nor does the same content): \(earlier.map(\.revision))")
            try expect(earlier.map(\.digest) == [two, file.digest!] && earlier.map(\.size) == [3, 3] && earlier.last?.modified == file.modified,
                       "each with its content, size and time")
            try await expectStorageError("an unknown revision", { if case .earlierVersionNotFound = $0 { true } else { false } }) {
                try await f.m.restore(file.id, base: same.revision, from: Revision("999999"), in: f.container)
            }
            try await expectStorageError("a stale base", { if case .revisionConflict = $0 { true } else { false } }) {
                try await f.m.restore(file.id, base: file.revision, from: file.revision, in: f.container)
            }
            let restored = try await f.m.restore(file.id, base: same.revision, from: file.revision, in: f.container)
            try expect(restored.digest == file.digest && restored.size == 3 && restored.modified == file.modified && restored.revision.isNewer(than: same.revision),
                       "the first content is current again, as a new revision")
            try expect(try await f.allChanges().last?.item == restored, "in the change log")
            try expect(try await f.m.earlierVersions(of: file.id, in: f.container).first?.digest == three, "and the content it replaced is kept")
            try expect(try await f.m.forgetEarlierVersions(replacedBefore: 0) == 0, "none replaced before the epoch")
            try expect(try await f.m.forgetEarlierVersions(replacedBefore: .max) == 3, "all three go")
            try expect(try await f.m.earlierVersions(of: file.id, in: f.container).isEmpty, "none left")
        },
        StorageConformance("unreferenced blobs: their grants go after the cutoff, named ones and renewed ones stay; the files are listed by age and removed") { f in
            let named = try await f.file("named.txt", "named")
            let edited = try await f.file("edited.txt", "before")
            let after = try await f.blob("after")
            _ = try await f.m.updateContent(edited.id, base: edited.revision, digest: after, declaredSize: 5, modified: 3, savedBy: nil, in: f.container)
            let versioned = try await f.file("versioned.txt", "mine")
            let theirs = try await f.blob("theirs")
            _ = try await f.m.addConflictVersion(versioned.id, ConflictVersion(
                id: .random(), digest: theirs, size: 6, device: "B", modified: 4, base: versioned.revision), in: f.container)
            let deleted = try await f.file("deleted.txt", "deleted")
            _ = try await f.m.deleteItem(deleted.id, base: deleted.revision, recursive: false, in: f.container)
            let unnamed = try await f.blob("unnamed")
            let renewed = try await f.blob("renewed")
            let between = WallClock.now()
            let renewedSize = try await f.m.renewBlob(renewed, for: f.alice)
            try expect(renewedSize == 7, "renewing answers the size")
            let beforeEpoch = try await f.m.forgetUnreferencedBlobs(grantedBefore: 0)
            try expect(beforeEpoch == 0, "nothing was granted before the epoch")
            let forgotten = try await f.m.forgetUnreferencedBlobs(grantedBefore: between)
            try expect(forgotten == 2, "the deleted file's content and the unnamed blob: \(forgotten)")
            for gone in [deleted.digest!, unnamed] {
                let size = try await f.m.blobSize(gone, for: f.alice)
                let granted = try await f.m.isGranted(gone)
                try expect(size == nil && !granted, "\(gone) is no longer granted")
            }
            for kept in [named.digest!, edited.digest!, after, versioned.digest!, theirs, renewed] {
                let granted = try await f.m.isGranted(kept)
                try expect(granted, "\(kept): named by a live item, an earlier or a conflict version, or renewed")
            }
            try await expectStorageError("a create naming a forgotten blob", { if case .blobNotFound = $0 { true } else { false } }) {
                try await f.m.createItem(f.newItem("again.txt", kind: .file, digest: unnamed), in: f.container)
            }
            // The files: listed by the time they were written, removed one by one.
            try expect(try await f.storage.blobs.digests(writtenBefore: 0).isEmpty, "none written before the epoch")
            let written = Set(try await f.storage.blobs.digests(writtenBefore: WallClock.now() + 1))
            try expect(written.isSuperset(of: [unnamed, renewed, after]), "every blob written: \(written.count)")
            try await f.storage.blobs.remove(unnamed)
            try await f.storage.blobs.remove(unnamed)
            try expect(try await f.storage.blobs.size(of: unnamed) == nil, "removed, twice without an error")
            try expect(try await f.storage.blobs.size(of: renewed) == 7, "the others stay")
        },
        StorageConformance("conflict versions kept both: each becomes a sibling file in the same commit") { f in
            let file = try await f.file("notes.txt", "current")
            let theirs = try await f.blob("their edit")
            // 2026-11-27 01:02:03 UTC, twice from one device: the second copy is numbered.
            let at: Timestamp = 1_795_741_323_000_000_000
            let first = ConflictVersion(id: .random(), digest: theirs, size: 10, device: "laptop", modified: at, base: file.revision)
            let second = ConflictVersion(id: .random(), digest: try await f.blob("again"), size: 5, device: "laptop", modified: at, base: file.revision)
            _ = try await f.m.addConflictVersion(file.id, first, in: f.container)
            let both = try await f.m.addConflictVersion(file.id, second, in: f.container)
            // A name the first copy would take is already someone's.
            let squatter = try await f.file("notes (conflicted copy from laptop 2026-11-27 010203).txt", "mine")
            let resolved = try await f.m.resolveConflicts(file.id, base: both.revision, settled: [], keep: nil, copies: [first.id, second.id], in: f.container)
            try expect(resolved.conflicts.isEmpty && resolved.digest == file.digest, "the versions go, the current content stays")
            let siblings = try await f.m.children(of: .root, in: f.container).filter { $0.id != file.id && $0.id != squatter.id }
            let named = Dictionary(uniqueKeysWithValues: siblings.map { ($0.name, $0) })
            try expect(Set(named.keys) == ["notes (conflicted copy from laptop 2026-11-27 010203 2).txt", "notes (conflicted copy from laptop 2026-11-27 010203 3).txt"],
                       "named after the device and time, numbered past taken names: \(named.keys.sorted())")
            try expect(Set(siblings.map(\.digest)) == [theirs, second.digest] && Set(siblings.map(\.size)) == [10, 5], "each holds its version's content")
            try expect(siblings.allSatisfy { $0.modified == at && $0.mode == file.mode }, "with the version's time and the file's mode")
            try expect(Set(try await f.allChanges().suffix(3).map(\.item.id)) == Set(siblings.map(\.id) + [file.id]), "the copies and the file are the latest changes")
            try await expectStorageError("a copy of a version the file no longer has", { if case .versionNotFound = $0 { true } else { false } }) {
                try await f.m.resolveConflicts(file.id, base: resolved.revision, settled: [], keep: nil, copies: [first.id], in: f.container)
            }
        },
    ]
}
