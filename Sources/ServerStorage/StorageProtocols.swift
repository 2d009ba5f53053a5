import Foundation
import ItemModel
import NIOCore

// The server's storage, behind these seams so that other backends (PostgreSQL for metadata and
// the change log, an S3-compatible store for blobs) can join without SyncServer changing.
// `Tests/ServerStorageTests` runs one conformance suite (TestSupport's `StorageConformance`)
// over every implementation.

public struct AccountRef: Sendable, Hashable {
    public let key: Int64
    public let name: String
    public init(key: Int64, name: String) {
        self.key = key
        self.name = name
    }
}

/// A container the caller may use: resolved through its account, so holding one proves access.
public struct ContainerRef: Sendable, Hashable {
    public let key: Int64
    public let account: AccountRef
    public let id: ContainerID
    public let created: Timestamp
    public init(key: Int64, account: AccountRef, id: ContainerID, created: Timestamp) {
        self.key = key
        self.account = account
        self.id = id
        self.created = created
    }
}

/// What storage refuses, and why. SyncServer maps each case to one protocol error code.
public enum StorageError: Error, Sendable, Equatable {
    case accountExists(String)
    case accountNotFound(String)
    case invalidAccountName(String)
    case containerNotFound(ContainerID)
    case itemNotFound(ItemID)
    case blobNotFound(ContentDigest)
    case invalidName(ItemName.Invalid)
    case invalidXattr(SyncedXattr.Invalid)
    case notAFolder(ItemID)
    case notAFile(ItemID)
    case rootIsImmutable
    /// A folder cannot move into itself or below itself.
    case invalidMove(ItemID)
    /// The base revision is not the current one; nothing was changed.
    case revisionConflict(current: ItemMetadata)
    /// The parent already holds a live item with that name.
    case nameExists(existing: ItemMetadata)
    case folderNotEmpty(ItemID)
    case sizeMismatch(declared: Int64, actual: Int64)
    case digestMismatch(declared: ContentDigest, actual: ContentDigest)
    case itemIDTaken(ItemID)
    /// The item has no conflict version with that identifier.
    case versionNotFound(ItemID)
    /// The file has no earlier content of that revision (never, or no longer kept).
    case earlierVersionNotFound(Revision)
    /// A conflict version's device name is empty or longer than `ConflictVersion.maxDeviceBytes`.
    case invalidDevice(String)
    /// A link without a target, or with one `SymlinkTarget` refuses.
    case invalidTarget(SymlinkTarget.Invalid)
    /// FIFOs and sockets stay on the device that made them.
    case unsyncedKind(ItemKind)
    case invalidCursor(String)
    /// A key-value write past one of the store's limits; nothing was stored.
    case keyValueLimit(KeyValueRefusal)
    /// The database's disk is full: nothing was changed.
    case diskFull
}

/// Accounts and their bearer tokens. Passwords and tokens are stored hashed only.
public protocol AccountStore: Sendable {
    func addAccount(name: String, passwordHash: String) async throws -> AccountRef
    func accounts() async throws -> [AccountRef]
    /// Removes the account with its tokens, containers, items, versions and shares, and takes
    /// back its grants of contents. Contents no other account holds are queued for deletion
    /// (`MetadataStore.pendingBlobDeletions`): their files go where the blob store's writers
    /// are known (`SyncService.deletePendingBlobs`).
    func removeAccount(name: String) async throws -> AccountRemoval
    func passwordHash(account name: String) async throws -> (AccountRef, String)?
    /// The account's identity (`AccountIdentity`): made when the account was added, the same
    /// for as long as it exists. `accountNotFound` once it is removed.
    func identity(of account: AccountRef) async throws -> String

    func addToken(_ token: StoredToken) async throws
    /// The token with this hash, expired or not; nil when there is none (never issued, revoked,
    /// or forgotten after it expired).
    func token(hash: String) async throws -> StoredToken?
    /// A use of the token moved its expiry on (sliding expiry).
    func renewToken(hash: String, used: Timestamp, expires: Timestamp) async throws
    /// The account's tokens, oldest first; `accountNotFound` when there is no such account.
    func tokens(ofAccount name: String) async throws -> [StoredToken]
    /// Revokes the account's tokens whose `id` is in `ids` (every token when nil); returns those revoked.
    func revokeTokens(ofAccount name: String, ids: Set<String>?) async throws -> [StoredToken]
    /// Revokes one token (a logout); false when there was none.
    func revokeToken(hash: String) async throws -> Bool
    /// Forgets tokens that expired before `cutoff`; returns how many.
    func forgetTokens(expiredBefore cutoff: Timestamp) async throws -> Int
}

/// A bearer token as the server keeps it: the hash, never the token.
public struct StoredToken: Sendable, Equatable {
    public var hash: String
    public var account: AccountRef
    /// What the client called itself when it logged in (a host name), if it said.
    public var device: String?
    public var created: Timestamp
    /// The last use that moved the expiry on (uses are recorded that coarsely, see `TokenPolicy`).
    public var used: Timestamp
    public var expires: Timestamp

    /// How lists name the token, and what `revoke` takes: the start of its hash, which tells
    /// nothing of the token itself.
    public var id: String { String(hash.prefix(Self.idLength)) }
    public static let idLength = 12

    public init(hash: String, account: AccountRef, device: String?, created: Timestamp, used: Timestamp, expires: Timestamp) {
        self.hash = hash
        self.account = account
        self.device = device
        self.created = created
        self.used = used
        self.expires = expires
    }
}

/// What removing an account removed.
public struct AccountRemoval: Sendable, Equatable {
    public var containers = 0
    /// Live items (files, folders and links).
    public var items = 0
    public var earlierVersions = 0
    public var shares = 0
    public var tokens = 0
    /// Contents only this account held, queued for deletion, and their bytes.
    public var contents = 0
    public var contentBytes: Int64 = 0
    public init() {}
}

public struct NewItem: Sendable {
    public var id: ItemID
    public var parentID: ItemID
    public var name: ItemName
    public var kind: ItemKind
    public var digest: ContentDigest?
    public var declaredSize: Int64?
    public var mode: UInt32
    public var created: Timestamp
    public var modified: Timestamp
    public var xattrs: [String: Data]
    /// The device that saved the content, if the writer named one.
    public var savedBy: String?
    /// A link's target; nil for every other kind.
    public var target: String?

    public init(
        id: ItemID, parentID: ItemID, name: ItemName, kind: ItemKind, digest: ContentDigest?,
        declaredSize: Int64?, mode: UInt32, created: Timestamp, modified: Timestamp, xattrs: [String: Data], savedBy: String? = nil,
        target: String? = nil
    ) {
        self.savedBy = savedBy
        self.target = target
        self.id = id
        self.parentID = parentID
        self.name = name
        self.kind = kind
        self.digest = digest
        self.declaredSize = declaredSize
        self.mode = mode
        self.created = created
        self.modified = modified
        self.xattrs = xattrs
    }

    /// A file's content: the one given, or the empty content; nil for every other kind.
    public var contentDigest: ContentDigest? { kind == .file ? (digest ?? .empty) : nil }

    /// The item this makes, at revision 0, once the store knows the size of a file's content
    /// (`fileSize`, from the account's grant of `contentDigest`); a link's size is its target's.
    public func metadata(fileSize: Int64) -> ItemMetadata {
        let size: Int64 =
            switch kind {
            case .file: fileSize
            case .symlink: Int64(target?.utf8.count ?? 0)
            case .folder, .fifo, .socket: 0
            }
        return ItemMetadata(
            id: id, parentID: parentID, name: name.rawValue, kind: kind, revision: Revision("0"),
            size: size, digest: contentDigest, mode: mode, created: created, modified: modified,
            xattrs: xattrs, target: kind == .symlink ? target : nil)
    }
}

public struct ItemUpdate: Sendable {
    public var name: ItemName?
    public var parentID: ItemID?
    public var mode: UInt32?
    public var modified: Timestamp?
    public init(name: ItemName? = nil, parentID: ItemID? = nil, mode: UInt32? = nil, modified: Timestamp? = nil) {
        self.name = name
        self.parentID = parentID
        self.mode = mode
        self.modified = modified
    }
}

/// Containers and items. Every mutation checks its base revision, commits the item's new state
/// and its change-log entry in one transaction, and is durable when it returns.
public protocol MetadataStore: Sendable {
    /// The bytes of every content some account may use, each digest once: what the blob store
    /// keeps for the accounts, for metrics.
    func grantedContentBytes() async throws -> Int64
    func containers(of account: AccountRef) async throws -> [ContainerRef]
    /// Looks a container up; with `create`, makes it (and its root folder) when missing.
    func container(_ id: ContainerID, of account: AccountRef, create: Bool) async throws -> ContainerRef?
    /// Makes the container (and its root folder) when missing. `created` is true for exactly
    /// one of any number of concurrent calls: the one that made it.
    func ensureContainer(_ id: ContainerID, of account: AccountRef) async throws -> (container: ContainerRef, created: Bool)
    /// A live item; tombstones answer nil.
    func item(_ id: ItemID, in container: ContainerRef) async throws -> ItemMetadata?
    func children(of folder: ItemID, in container: ContainerRef) async throws -> [ItemMetadata]
    func createItem(_ item: NewItem, in container: ContainerRef) async throws -> ItemMetadata
    /// Keeps `contents` (small contents, already checked against their digests) and gives the
    /// account their use, then creates each item as `createItem` would, in order, each
    /// succeeding or failing on its own; all in one transaction, durable when it returns. A
    /// folder of small files costs one commit and one sync, not a commit per file and two
    /// syncs per content file.
    func createItems(_ items: [NewItem], contents: [ContentDigest: Data], in container: ContainerRef) async throws -> [Result<ItemMetadata, StorageError>]
    /// A content kept by `createItems`, or nil: the content store has the others.
    func inlineContent(_ digest: ContentDigest) async throws -> Data?
    /// `savedBy`: the device that saved the content, if the writer named one; an earlier
    /// version keeps it (`EarlierVersion.device`).
    func updateContent(
        _ id: ItemID, base: Revision, digest: ContentDigest, declaredSize: Int64?, modified: Timestamp?, savedBy: String?,
        in container: ContainerRef
    ) async throws -> ItemMetadata
    func updateItem(_ id: ItemID, base: Revision, update: ItemUpdate, in container: ContainerRef) async throws -> ItemMetadata
    /// Deletes an item (a folder with `recursive`, its whole subtree); returns the tombstones.
    func deleteItem(_ id: ItemID, base: Revision?, recursive: Bool, in container: ContainerRef) async throws -> [ItemMetadata]
    func setXattrs(_ id: ItemID, base: Revision?, xattrs: [String: Data], in container: ContainerRef) async throws -> ItemMetadata
    /// Keeps `version` beside the file's current content as a conflict version, and gives the
    /// file a new revision, so that every device hears of it; the content stays. The version's
    /// content must be the account's. A version already kept (a retried send) changes nothing.
    func addConflictVersion(_ id: ItemID, _ version: ConflictVersion, in container: ContainerRef) async throws -> ItemMetadata
    /// Resolves the file's conflicts as seen at `base`: drops the versions in `settled`, after
    /// making the content of `keep` (one of them) current and each of `copies` a sibling file
    /// (`ItemMetadata.conflictCopies`), all in one commit. A version kept since `base` is not
    /// in `settled` and stays, so two resolutions at once lose nothing nobody chose.
    func resolveConflicts(_ id: ItemID, base: Revision, settled: Set<ItemID>, keep: ItemID?, copies: Set<ItemID>, in container: ContainerRef) async throws -> ItemMetadata
    /// The file's earlier contents still kept, the most recently replaced first. Every change
    /// of a file's content (an update, a kept conflict version, a restore) keeps the content it
    /// replaces, with the revision that had it.
    func earlierVersions(of id: ItemID, in container: ContainerRef) async throws -> [EarlierVersion]
    /// Makes the earlier content of `revision` the file's content again, as a new revision from
    /// `base`.
    func restore(_ id: ItemID, base: Revision, from revision: Revision, in container: ContainerRef) async throws -> ItemMetadata
    /// Forgets every earlier content replaced before `cutoff`; returns how many went.
    func forgetEarlierVersions(replacedBefore cutoff: Timestamp) async throws -> Int

    /// Records that `account` uploaded (and so may use) the blob. Existence of content is
    /// answered per account: one account cannot probe what another has stored.
    func recordBlob(_ digest: ContentDigest, size: Int64, for account: AccountRef) async throws
    /// The blob's size if `account` may use it.
    func blobSize(_ digest: ContentDigest, for account: AccountRef) async throws -> Int64?
    /// `blobSize`, and the grant made new: a client asks before it names content it does not
    /// send again, and the blob must outlive that (`forgetUnreferencedBlobs`).
    func renewBlob(_ digest: ContentDigest, for account: AccountRef) async throws -> Int64?
    /// Takes back every account's grant of each blob that nothing names (no live item, no
    /// conflict version, no earlier version) and that no account was granted since `cutoff`,
    /// with the small contents kept inline; returns how many blobs. From then on no request
    /// can name them without sending them again, and their files may go.
    func forgetUnreferencedBlobs(grantedBefore cutoff: Timestamp) async throws -> Int
    /// Whether any account may use the blob.
    func isGranted(_ digest: ContentDigest) async throws -> Bool
    /// Contents queued for deletion when their last account went (`AccountStore.removeAccount`).
    func pendingBlobDeletions(limit: Int) async throws -> [ContentDigest]
    /// The queued deletion of `digest` is done (or no longer wanted: an account holds it again).
    func finishBlobDeletion(_ digest: ContentDigest) async throws
}

/// The ordered change log of each container.
///
/// The log is compacted: for each item it keeps only the latest change, so `since: .start`
/// is a full snapshot (with tombstones) and any cursor yields the latest state of every item
/// changed after it. An item may come before its parent within one answer when the parent
/// changed later; clients hold such items until the parent arrives.
public protocol ChangeLog: Sendable {
    /// A page of the log with each item as the JSON the log keeps of it (an `ItemMetadata`
    /// encoding): a server sends it on without decoding and encoding it again, which was most
    /// of its time in a large container's first sync.
    func encodedChanges(in container: ContainerRef, since: ChangeCursor, limit: Int) async throws -> EncodedChangePage
    func latestCursor(in container: ContainerRef) async throws -> ChangeCursor
    /// The entries of every container's log together (one per item, its latest change): the
    /// log's length, for metrics.
    func entryCount() async throws -> Int
}

/// A page of the change log as stored: items still in their JSON.
public struct EncodedChangePage: Sendable {
    public struct Entry: Sendable {
        public var cursor: ChangeCursor
        public var kind: ItemChange.Kind
        /// The item's `ItemMetadata`, JSON-encoded.
        public var item: Data
        public init(cursor: ChangeCursor, kind: ItemChange.Kind, item: Data) {
            self.cursor = cursor
            self.kind = kind
            self.item = item
        }
    }

    public var entries: [Entry]
    public var cursor: ChangeCursor
    public var hasMore: Bool
    public init(entries: [Entry], cursor: ChangeCursor, hasMore: Bool) {
        self.entries = entries
        self.cursor = cursor
        self.hasMore = hasMore
    }
}

extension ChangeLog {
    /// The page with its items decoded.
    public func changes(in container: ContainerRef, since: ChangeCursor, limit: Int) async throws -> (changes: [ItemChange], cursor: ChangeCursor, hasMore: Bool) {
        let page = try await encodedChanges(in: container, since: since, limit: limit)
        let decoder = JSONDecoder()
        let changes = try page.entries.map { ItemChange(cursor: $0.cursor, kind: $0.kind, item: try decoder.decode(ItemMetadata.self, from: $0.item)) }
        return (changes, page.cursor, page.hasMore)
    }
}

/// The key-value store of each container (NSUbiquitousKeyValueStore): key to value, the last
/// write to reach the server winning.
///
/// Each store has a version, 0 until its first change, that every write and every removal of a
/// key that is there moves up by one, in the transaction that changes the key, and each key
/// keeps the version of its last change. A removal leaves a tombstone at its version, so that a
/// read from an earlier version reports it. Values are opaque bytes here (the service checks
/// that they are JSON) and come back exactly as written. Removing the account removes its
/// containers' stores.
public protocol KeyValueStore: Sendable {
    /// Sets `key` to `value`; returns the store's version after it. A write past a limit
    /// (`KeyValueLimits`) throws `keyValueLimit` and stores nothing.
    func setValue(_ value: Data, for key: String, in container: ContainerRef) async throws -> Int64
    /// Removes `key`, leaving a tombstone; returns the store's version after it. A key that is
    /// not there changes nothing, and the version stays.
    func removeValue(for key: String, in container: ContainerRef) async throws -> Int64
    /// Every key changed after version `since`, once, in its latest state, ordered by version,
    /// with the store's version read in the same snapshot. From 0, the live keys only: a reader
    /// that starts from nothing has nothing to remove. A version ahead of the store's is
    /// `invalidCursor` (the store is not the one the reader knew).
    func keyValues(in container: ContainerRef, since: Int64) async throws -> (version: Int64, entries: [KeyValueEntry])
    /// The store's version.
    func keyValueVersion(in container: ContainerRef) async throws -> Int64
}

/// Content, addressed by SHA-256.
///
/// Asynchronous, because a store may be across a network (S3); bytes travel as `ByteBuffer`s,
/// so that a chunk goes from the socket to the store and from the store to the socket without a
/// copy.
public protocol BlobStore: Sendable {
    /// Starts a new blob. Nothing is visible until `commit` verifies the digest.
    func makeWriter() async throws -> any BlobWriter
    func size(of digest: ContentDigest) async throws -> Int64?
    func openReader(_ digest: ContentDigest) async throws -> any BlobReader
    /// The blobs last written before `cutoff`.
    func digests(writtenBefore cutoff: Timestamp) async throws -> [ContentDigest]
    /// Deletes the blob; one that is not there is no error.
    func remove(_ digest: ContentDigest) async throws
}

/// Owned by one upload at a time; not shared between tasks.
public protocol BlobWriter: AnyObject {
    var bytesWritten: Int64 { get }
    func write(_ bytes: ByteBuffer) async throws
    /// Verifies the digest when one is expected, then makes the blob durable before returning
    /// (the file store: fsync, rename, fsync of the folder; S3: the object acknowledged under its
    /// digest). On a mismatch nothing is stored.
    func commit(expecting: ContentDigest?) async throws -> (digest: ContentDigest, size: Int64)
    /// Drops what was written. Safe to call after a failed commit; a no-op after a good one. A
    /// writer dropped without a commit or an abort cleans up after itself too, later.
    func abort() async
}

/// Owned by one response stream at a time; `Sendable` so it can move into that stream.
public protocol BlobReader: AnyObject, Sendable {
    var size: Int64 { get }
    /// Hands the bytes of `range` to `sink` in order, in chunks of at most `chunkSize` bytes (the
    /// first at most `firstChunkSize`), each awaited before the next is read: a slow receiver
    /// holds the reading back. Delivers exactly `range.count` bytes or throws. A range must lie
    /// within the blob.
    func read(_ range: Range<Int64>, firstChunkSize: Int, chunkSize: Int, into sink: (ByteBuffer) async throws -> Void) async throws
    func close()
}

extension BlobReader {
    /// `read` in chunks of one size.
    public func read(_ range: Range<Int64>, chunkSize: Int, into sink: (ByteBuffer) async throws -> Void) async throws {
        try await read(range, firstChunkSize: chunkSize, chunkSize: chunkSize, into: sink)
    }
}

/// The server's storage: everything SyncServer needs, in one value.
public struct ServerStorage: Sendable {
    public var accounts: any AccountStore
    public var metadata: any MetadataStore
    public var changes: any ChangeLog
    public var keyValues: any KeyValueStore
    public var blobs: any BlobStore
    public var shares: any ShareStore

    public init(
        accounts: any AccountStore, metadata: any MetadataStore, changes: any ChangeLog, keyValues: any KeyValueStore, blobs: any BlobStore,
        shares: any ShareStore
    ) {
        self.shares = shares
        self.accounts = accounts
        self.metadata = metadata
        self.changes = changes
        self.keyValues = keyValues
        self.blobs = blobs
    }
}
