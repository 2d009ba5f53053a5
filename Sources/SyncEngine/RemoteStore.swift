import Foundation
import ItemModel
import SyncAPI

/// The engine's view of the sync server. SyncClient's `SyncHTTPClient` has these methods and the
/// mount daemon conforms it here (the consumer owns the protocol); TestSupport has
/// an in-memory one. Every call is async and may throw `RemoteError`.
public protocol RemoteStore: Sendable {
    /// Creates the container when missing and returns its info (cursor of the latest change).
    func ensureContainer() async throws -> ContainerInfo

    /// One page of the change log after `since`.
    func changes(since: ChangeCursor, limit: Int) async throws -> ChangePage

    /// The push stream: catch-up changes after `since`, then `.ready(cursor)`, then live changes,
    /// until the stream ends (server gone, cancelled). The caller reconnects with its last cursor.
    func changeStream(since: ChangeCursor) -> AsyncThrowingStream<ChangeStreamEvent, Error>

    func item(_ id: ItemID) async throws -> ItemMetadata

    /// The live items directly in the folder `id`.
    func children(of id: ItemID) async throws -> [ItemMetadata]

    /// Fetches `range` of the content with `digest` (by digest, so a later upload cannot splice
    /// another version into a resumed download) and hands its bytes to `receive`, in order, as
    /// they arrive, on whatever thread the transport delivers them: `receive` must be quick (a
    /// write into the page cache) and must not keep the buffer. Returns once the range has been
    /// delivered; throws `RemoteError`, or what `receive` threw.
    func download(
        _ digest: ContentDigest, range: Range<Int64>, receive: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void
    ) async throws

    /// `download`, with the request handed to the transport before this returns, on the
    /// caller's thread: an open waiting for a placeholder's first bytes does not wait first for
    /// a task to be scheduled. The closure returned waits for the end, returning or throwing as
    /// `download` does; cancelling the task that waits stops the request.
    func beginDownload(
        _ digest: ContentDigest, range: Range<Int64>, receive: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void
    ) -> @Sendable () async throws -> Void

    /// Whether the server already has this content for the account (then the upload is skipped).
    func hasBlob(_ digest: ContentDigest) async throws -> Bool

    /// Uploads `size` bytes of the file at `path`, declared to hash to `digest`. The server
    /// refuses (`RemoteError.digestMismatch`) if the bytes sent do not match: a file changed
    /// while it was being sent is never stored under the old digest. `progress` hears how many
    /// bytes have gone out so far, as they go.
    func uploadBlob(_ digest: ContentDigest, size: Int64, fromFile path: String, progress: @escaping @Sendable (Int64) -> Void) async throws

    func createItem(_ request: CreateItemRequest) async throws -> ItemMetadata
    /// Several creates in one request (at most `SyncProtocol.maxBatchItems`): one result per
    /// create, in order. A refused create is its `.failure` and the others still happen; what
    /// fails the whole request (offline, unauthorized) is thrown, as by a single call.
    func createItems(_ requests: [CreateItemRequest]) async throws -> [Result<ItemMetadata, RemoteError>]
    func updateContent(_ id: ItemID, _ request: UpdateContentRequest) async throws -> ItemMetadata
    func updateItem(_ id: ItemID, _ request: UpdateItemRequest) async throws -> ItemMetadata
    func deleteItem(_ id: ItemID, base: Revision, recursive: Bool) async throws -> [ItemMetadata]
    func setXattrs(_ id: ItemID, _ request: SetXattrsRequest) async throws -> ItemMetadata
    func addConflictVersion(_ id: ItemID, _ request: AddConflictVersionRequest) async throws -> ItemMetadata
    func resolveConflicts(_ id: ItemID, _ request: ResolveConflictsRequest) async throws -> ItemMetadata
    /// The file's earlier contents the server still keeps, the most recently replaced first.
    func earlierVersions(of id: ItemID) async throws -> [EarlierVersion]
    func restore(_ id: ItemID, _ request: RestoreRequest) async throws -> ItemMetadata

    /// The account the token belongs to, and its identity.
    func whoami() async throws -> WhoAmI
    /// The key-value store's version, and every key changed after version `since` (0: every
    /// live key), each at its latest; a removal is an entry without a value. `since` ahead of
    /// the store's version: `.refused(.invalidCursor)`.
    func keyValues(since: Int64) async throws -> KeyValuePage
    /// Sets a key to the bytes of one JSON document; the store's version after the write. A
    /// limit passed: `.refused` with one of the `kv_…` codes, and nothing stored.
    func setKeyValue(_ key: String, json: Data) async throws -> Int64
    /// Removes a key (no error when it is not there); the store's version after it.
    func removeKeyValue(_ key: String) async throws -> Int64
}

extension RemoteStore {
    /// For a store without a transport of its own to start on the spot: `download` in a task.
    public func beginDownload(
        _ digest: ContentDigest, range: Range<Int64>, receive: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void
    ) -> @Sendable () async throws -> Void {
        let task = Task { try await download(digest, range: range, receive: receive) }
        return { try await withTaskCancellationHandler { try await task.value } onCancel: { task.cancel() } }
    }
}
