import Foundation
import ItemModel
import ServerStorage
import SyncAPI
import SyncService

/// `ubiq-server` without its process and transport: a `SyncService` over the in-memory storage
/// backends (SQLite in memory and a dictionary of blobs), with one account. Its connections
/// (`connect`) answer as the server does; what a test does to the server itself (collect
/// content, restore a backup, change the account) is here.
public final class InMemoryServer: Sendable {
    public let service: SyncService
    public let account: AccountRef
    let metadata: SQLiteMetadataStore
    let blobs: InMemoryBlobStore

    public convenience init() async throws {
        let metadata = try SQLiteMetadataStore.inMemory()
        let account = try await metadata.addAccount(name: "test", passwordHash: "unused: no login in process")
        self.init(metadata: metadata, blobs: InMemoryBlobStore(), account: account)
    }

    init(metadata: SQLiteMetadataStore, blobs: InMemoryBlobStore, account: AccountRef) {
        self.metadata = metadata
        self.blobs = blobs
        self.account = account
        service = SyncService(storage: ServerStorage.sqlite(metadata, blobs: blobs))
    }

    /// A client's connection to `container`, with the account's token.
    public func connect(container: ContainerID = .default, chunkSize: Int = 64 * 1024) -> ServiceRemote {
        ServiceRemote(service: service, account: account, container: container, chunkSize: chunkSize)
    }

    /// The account's identity, as `whoami` answers it.
    public func identity() async throws -> String {
        try await service.whoami(account).identity
    }

    /// Another account of this server, made on the first call.
    public func otherAccount() async throws -> AccountRef {
        if let found = try await metadata.accounts().first(where: { $0.name == "other" }) { return found }
        return try await metadata.addAccount(name: "other", passwordHash: "unused: no login in process")
    }

    /// Whether content with `digest` is on the server for the account.
    public func hasContent(_ digest: ContentDigest) async throws -> Bool {
        try await service.grantedSize(digest, for: account) != nil
    }

    /// What the server's collection removes, as if the retention of earlier versions and of
    /// unnamed content had passed: every earlier version, and every content nothing names.
    public func collectEverythingUnnamed() async throws {
        let future = WallClock.now() + 1_000_000_000
        _ = try await metadata.forgetEarlierVersions(replacedBefore: future)
        _ = try await service.collectBlobs(grantedBefore: future)
    }

    /// A server restored from a backup of this one made now: the same account and containers
    /// (their creation times included), a change log that stops here.
    public func backup() throws -> InMemoryServer {
        InMemoryServer(metadata: try metadata.backupInMemory(), blobs: blobs.copy(), account: account)
    }
}
