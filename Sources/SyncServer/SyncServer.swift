import Foundation
import HTTPTypes
import Hummingbird
import ItemModel
import Logging
import NIOCore
import ServerStorage
import SyncAPI

public struct SyncServerConfiguration: Sendable {
    /// The largest content upload accepted; larger bodies get 413 `payload_too_large`.
    public var maxUploadBytes: Int64
    /// 1 MiB: the largest JSON body; item metadata with its attributes is far smaller.
    public var maxJSONBytes: Int
    /// How often an idle push stream sends a comment line, so that dead clients are noticed and
    /// proxies keep the connection open.
    public var keepAliveInterval: Duration

    /// 4 MiB: a batch's JSON, with up to `SyncProtocol.maxBatchContent` of base64 content.
    public var maxBatchBytes: Int

    /// How long a checked token (and an account's right to a content) is remembered, so that
    /// it costs no database read; also how long a removed account's tokens may still work.
    public var recentAnswers: Duration

    public init(maxUploadBytes: Int64 = 64 << 30, maxJSONBytes: Int = 1 << 20, maxBatchBytes: Int = 4 << 20, keepAliveInterval: Duration = .seconds(15),
                recentAnswers: Duration = .seconds(10)) {
        self.recentAnswers = recentAnswers
        self.maxBatchBytes = maxBatchBytes
        self.maxUploadBytes = maxUploadBytes
        self.maxJSONBytes = maxJSONBytes
        self.keepAliveInterval = keepAliveInterval
    }
}

/// The sync server's HTTP face: routes, auth and the push stream, over `ServerStorage`.
/// It knows no SQL and no file layout.
public struct SyncServer: Sendable {
    public let storage: ServerStorage
    public let configuration: SyncServerConfiguration
    public let hub: ChangeHub
    let tokens: RecentAnswers<String, AccountRef>
    /// (account key, digest) to the content's size: a grant is never taken back, but its
    /// account can be removed, which the token check notices within the same lifetime.
    let grants: RecentAnswers<GrantKey, Int64>

    struct GrantKey: Hashable, Sendable {
        let account: Int64
        let digest: ContentDigest
    }

    public init(storage: ServerStorage, configuration: SyncServerConfiguration = .init(), hub: ChangeHub = ChangeHub()) {
        self.storage = storage
        self.configuration = configuration
        self.hub = hub
        tokens = RecentAnswers(lifetime: configuration.recentAnswers)
        grants = RecentAnswers(lifetime: configuration.recentAnswers)
    }

    /// The size of `digest`'s content when `account` may use it.
    func grantedSize(_ digest: ContentDigest, for account: AccountRef) async throws -> Int64? {
        try await grants.value(for: GrantKey(account: account.key, digest: digest)) {
            try await storage.metadata.blobSize(digest, for: account)
        }
    }

    public func makeRouter() -> Router<ServerContext> {
        let router = Router(context: ServerContext.self)
        router.add(middleware: ErrorMiddleware())
        router.add(middleware: AuthMiddleware(accounts: storage.accounts, recent: tokens))

        router.get(RouterPath(APIPath.health)) { _, _ in try json(HealthResponse()) }
        router.post(RouterPath(APIPath.token)) { request, context in try await issueToken(request, context) }

        router.get(RouterPath(APIPath.containers)) { _, context in
            let account = try context.requireAccount()
            var infos: [ContainerInfo] = []
            for c in try await storage.metadata.containers(of: account) {
                infos.append(try await info(c))
            }
            return try json(ContainerList(containers: infos))
        }
        router.put("/v1/containers/:container") { _, context in
            let account = try context.requireAccount()
            let id = try containerID(context)
            let (c, created) = try await storage.metadata.ensureContainer(id, of: account)
            return try json(try await info(c), status: created ? .created : .ok)
        }
        router.get("/v1/containers/:container") { _, context in
            try json(try await info(try await container(context)))
        }

        router.get("/v1/containers/:container/items/:item") { _, context in
            let c = try await container(context)
            return try json(try await liveItem(try itemID(context), c))
        }
        router.get("/v1/containers/:container/items/:item/children") { _, context in
            let c = try await container(context)
            return try json(ItemList(items: try await storage.metadata.children(of: try itemID(context), in: c)))
        }
        router.post("/v1/containers/:container/batch") { request, context in try await createBatch(request, context) }
        router.post("/v1/containers/:container/items") { request, context in
            try await createItem(request, context)
        }
        router.patch("/v1/containers/:container/items/:item") { request, context in
            let c = try await container(context)
            let body = try await decode(UpdateItemRequest.self, request)
            let update = ItemUpdate(
                name: try body.name.map(validName), parentID: try body.parentID.map(wellFormed),
                mode: body.mode.map { $0 & 0o7777 }, modified: body.modified)
            let item = try await storage.metadata.updateItem(try itemID(context), base: body.baseRevision, update: update, in: c)
            hub.publish(container: c.key)
            return try json(item)
        }
        router.delete("/v1/containers/:container/items/:item") { request, context in
            let c = try await container(context)
            guard let base = request.uri.queryParameters["baseRevision"].map({ Revision(String($0)) }) else {
                throw APIError(.invalidRequest, "baseRevision is required to delete")
            }
            let recursive = request.uri.queryParameters["recursive"].map { $0 == "true" || $0 == "1" } ?? false
            let tombstones = try await storage.metadata.deleteItem(try itemID(context), base: base, recursive: recursive, in: c)
            hub.publish(container: c.key)
            return try json(DeleteResponse(deleted: tombstones))
        }
        router.put("/v1/containers/:container/items/:item/content") { request, context in
            let c = try await container(context)
            let body = try await decode(UpdateContentRequest.self, request)
            if let content = body.content { try await storeInline(content, declared: body.digest, context) }
            let item = try await storage.metadata.updateContent(
                try itemID(context), base: body.baseRevision, digest: body.digest, declaredSize: body.size,
                modified: body.modified, in: c)
            hub.publish(container: c.key)
            return try json(item)
        }
        router.get("/v1/containers/:container/items/:item/content") { request, context in
            let c = try await container(context)
            let item = try await liveItem(try itemID(context), c)
            guard item.kind == .file, let digest = item.digest else { throw APIError(.notAFile, "item '\(item.id)' is a folder") }
            var response = try await serveBlob(digest, request: request)
            response.headers[.ubiqRevision] = item.revision.rawValue
            return response
        }
        router.put("/v1/containers/:container/items/:item/xattrs") { request, context in
            let c = try await container(context)
            let body = try await decode(SetXattrsRequest.self, request)
            let item = try await storage.metadata.setXattrs(try itemID(context), base: body.baseRevision, xattrs: body.xattrs, in: c)
            hub.publish(container: c.key)
            return try json(item)
        }

        router.get("/v1/containers/:container/changes") { request, context in
            let c = try await container(context)
            let since = ChangeCursor(String(request.uri.queryParameters["since"] ?? "0"))
            let rawLimit = request.uri.queryParameters["limit"].map(String.init) ?? "1000"
            guard let limit = Int(rawLimit), (1...10_000).contains(limit) else {
                throw APIError(.invalidRequest, "limit must be a number of 1…10000, not '\(rawLimit)'")
            }
            let page = try await storage.changes.changes(in: c, since: since, limit: limit)
            return try json(ChangePage(changes: page.changes, cursor: page.cursor, hasMore: page.hasMore))
        }
        router.get("/v1/containers/:container/changes/stream") { request, context in
            let c = try await container(context)
            let since = ChangeCursor(String(request.uri.queryParameters["since"] ?? "0"))
            // Validate the cursor now, while an error can still be a status code.
            _ = try await storage.changes.changes(in: c, since: since, limit: 1)
            return PushStream(storage: storage, hub: hub, container: c, since: since, keepAlive: configuration.keepAliveInterval)
                .response()
        }

        router.head("/v1/blobs/:digest") { _, context in
            let account = try context.requireAccount()
            let digest = try blobDigest(context)
            guard let size = try await grantedSize(digest, for: account) else {
                throw APIError(.blobNotFound, "no content with digest \(digest)")
            }
            return Response(status: .ok, headers: [.contentLength: String(size)])
        }
        router.get("/v1/blobs/:digest") { request, context in
            let account = try context.requireAccount()
            let digest = try blobDigest(context)
            guard try await grantedSize(digest, for: account) != nil else {
                throw APIError(.blobNotFound, "no content with digest \(digest)")
            }
            return try await serveBlob(digest, request: request)
        }
        router.put("/v1/blobs/:digest") { request, context in try await uploadBlob(request, context) }
        return router
    }

    // MARK: Handlers

    func issueToken(_ request: Request, _ context: ServerContext) async throws -> Response {
        let body = try await decode(TokenRequest.self, request)
        // The same answer for an unknown user and a wrong password: no account enumeration.
        let found = try await storage.accounts.passwordHash(account: body.user)
        // An unknown user costs the same scrypt as a wrong password: timing tells nothing either.
        let verified = Credentials.verifyPassword(body.password, against: found?.1 ?? Credentials.decoyHash)
        guard let (account, _) = found, verified else { throw APIError(.invalidCredentials, "unknown user or wrong password") }
        let token = Credentials.newToken()
        try await storage.accounts.addToken(hash: Credentials.hashToken(token), for: account, created: WallClock.now())
        return try json(TokenResponse(token: token, account: account.name), status: .created)
    }

    func createItem(_ request: Request, _ context: ServerContext) async throws -> Response {
        // Read and check the request before the container is created on first use: a refused
        // request changes nothing, not even that.
        let body = try await decode(CreateItemRequest.self, request)
        let new = try newItem(body)
        if let content = body.content { try await storeInline(content, declared: new.digest!, context) }
        let c = try await container(context, create: new.parentID == .root)
        let item = try await storage.metadata.createItem(new, in: c)
        hub.publish(container: c.key)
        return try json(item, status: .created)
    }

    /// A create as the storage layer takes it, once the request is checked.
    func newItem(_ body: CreateItemRequest) throws -> NewItem {
        let name = try validName(body.name)
        let parentID = try wellFormed(body.parentID)
        if body.kind == .folder && (body.digest != nil || (body.size ?? 0) != 0) {
            throw APIError(.invalidRequest, "a folder has no content: omit digest and size")
        }
        if body.content != nil, body.kind != .file || body.digest == nil {
            throw APIError(.invalidRequest, "inline content needs a file and the digest it hashes to")
        }
        let now = WallClock.now()
        return NewItem(
            id: try body.id.map(wellFormed) ?? ItemID.random(), parentID: parentID,
            name: name, kind: body.kind, digest: body.digest, declaredSize: body.size,
            mode: (body.mode ?? ItemMetadata.defaultMode(for: body.kind)) & 0o7777,
            created: body.created ?? now, modified: body.modified ?? body.created ?? now, xattrs: body.xattrs ?? [:])
    }

    /// Several creates in one request and, for those that succeed, one commit. Each create is
    /// checked, its inline content stored, and applied exactly as `createItem` would; a refused
    /// one is answered in its own result and creates nothing (content it carried that hashed to
    /// its digest stays stored for the account, as after a separate upload).
    func createBatch(_ request: Request, _ context: ServerContext) async throws -> Response {
        _ = try context.requireAccount()
        let body = try await decode(BatchRequest.self, request, limit: configuration.maxBatchBytes)
        guard body.creates.count <= SyncProtocol.maxBatchItems else {
            throw APIError(.payloadTooLarge, "a batch holds at most \(SyncProtocol.maxBatchItems) creates; this one has \(body.creates.count)")
        }
        let contentBytes = body.creates.reduce(0) { $0 + ($1.content?.count ?? 0) }
        guard contentBytes <= SyncProtocol.maxBatchContent else {
            throw APIError(.payloadTooLarge, "a batch carries at most \(SyncProtocol.maxBatchContent) bytes of inline content; this one has \(contentBytes)")
        }
        var results = [BatchResponse.Result?](repeating: nil, count: body.creates.count)
        var checked: [(index: Int, item: NewItem)] = []
        for (index, create) in body.creates.enumerated() {
            do { checked.append((index, try newItem(create))) } catch {
                results[index] = .init(error: try APIError(mapping: error).detail)
            }
        }
        guard !checked.isEmpty else { return try json(BatchResponse(results: results.map { $0! })) }
        // Before anything is stored: content is never kept for a request that fails.
        let c = try await container(context, create: checked.contains { $0.item.parentID == .root })
        // The contents are checked here, in memory, and kept by the metadata store in the
        // transaction that creates the items: one commit and one sync for the whole batch.
        var contents: [ContentDigest: Data] = [:]
        for (index, _) in checked {
            guard let content = body.creates[index].content, let declared = body.creates[index].digest else { continue }
            guard content.count <= SyncProtocol.maxInlineContent else {
                results[index] = .init(error: APIError(.payloadTooLarge, "inline content is at most \(SyncProtocol.maxInlineContent) bytes; upload it as a blob").detail)
                continue
            }
            let actual = ContentDigest.of(content)
            guard actual == declared else {
                results[index] = .init(error: APIError(BlobStoreError.digestMismatch(declared: declared, actual: actual)).detail)
                continue
            }
            contents[declared] = content
        }
        checked.removeAll { results[$0.index] != nil }
        let created = try await storage.metadata.createItems(checked.map(\.item), contents: contents, in: c)
        for ((index, _), result) in zip(checked, created) {
            switch result {
            case .success(let item): results[index] = .init(item: item)
            case .failure(let error): results[index] = .init(error: APIError(error).detail)
            }
        }
        hub.publish(container: c.key)
        return try json(BatchResponse(results: results.map { $0! }))
    }

    func uploadBlob(_ request: Request, _ context: ServerContext) async throws -> Response {
        let account = try context.requireAccount()
        let declared = try blobDigest(context)
        if let length = request.headers[.contentLength].flatMap({ Int64($0) }), length > configuration.maxUploadBytes {
            throw APIError(.payloadTooLarge, "the body is \(length) bytes; this server accepts at most \(configuration.maxUploadBytes)")
        }
        let writer = try storage.blobs.makeWriter()
        defer { writer.abort() }
        do {
            for try await buffer in request.body {
                if writer.bytesWritten + Int64(buffer.readableBytes) > configuration.maxUploadBytes {
                    throw APIError(.payloadTooLarge, "the body is larger than \(configuration.maxUploadBytes) bytes; nothing was stored")
                }
                try buffer.withUnsafeReadableBytes { try writer.write($0) }
            }
        } catch let error as APIError {
            throw error
        } catch let error as BlobStoreError {
            throw APIError(error)
        } catch {
            // The client stopped sending before the end of its body.
            throw APIError(.invalidRequest, "the body ended before its declared length; nothing was stored")
        }
        let (digest, size) = try await store(writer, expecting: declared, for: account)
        return try json(BlobInfo(digest: digest, size: size), status: .created)
    }

    /// Commits an uploaded blob on a dispatch thread. The commit waits for two fsyncs (about
    /// a millisecond each here), and the server's tasks run on its event loops: waiting there
    /// would stall every other request of that loop; on other threads the syncs overlap.
    ///
    /// The blob is durable on disk before the account is given access to it, and both before
    /// the answer: an acknowledged upload survives a crash.
    func store(_ writer: any BlobWriter, expecting declared: ContentDigest, for account: AccountRef) async throws -> (digest: ContentDigest, size: Int64) {
        let (digest, size) = try await commit(writer, expecting: declared)
        try await storage.metadata.recordBlob(digest, size: size, for: account)
        return (digest, size)
    }

    /// The blob's commit alone, on a dispatch thread.
    func commit(_ writer: any BlobWriter, expecting declared: ContentDigest) async throws -> (digest: ContentDigest, size: Int64) {
        // The writer belongs to this request alone; it moves to the thread and back.
        struct Owned: @unchecked Sendable { let writer: any BlobWriter }
        let owned = Owned(writer: writer)
        return try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try owned.writer.commit(expecting: declared) })
            }
        }
    }

    /// Stores content sent inline with a create or an update, exactly as an upload of it to
    /// `PUT /v1/blobs/{digest}` would: hashed against the declared digest, durable, then
    /// given to the account.
    func storeInline(_ content: Data, declared: ContentDigest, _ context: ServerContext) async throws {
        let account = try context.requireAccount()
        let (digest, size) = try await commitInline(content, declared: declared)
        try await storage.metadata.recordBlob(digest, size: size, for: account)
    }

    /// Inline content hashed against its declared digest and made durable; not yet the account's.
    func commitInline(_ content: Data, declared: ContentDigest) async throws -> (digest: ContentDigest, size: Int64) {
        guard content.count <= SyncProtocol.maxInlineContent else {
            throw APIError(.payloadTooLarge, "inline content is at most \(SyncProtocol.maxInlineContent) bytes; upload it as a blob")
        }
        let writer = try storage.blobs.makeWriter()
        defer { writer.abort() }
        // A BlobStoreError (a full disk) is answered through APIError(mapping:), as makeWriter's is.
        try content.withUnsafeBytes { try writer.write($0) }
        return try await commit(writer, expecting: declared)
    }

    /// Streams a blob, honouring a single `Range` and `If-Range` (by ETag, the digest).
    func serveBlob(_ digest: ContentDigest, request: Request) async throws -> Response {
        let reader: any BlobReader
        do {
            reader = try storage.blobs.openReader(digest)
        } catch BlobStoreError.notFound(let missing) {
            // A small content that came with a batch of creates is kept by the metadata store.
            guard let data = try await storage.metadata.inlineContent(digest) else { throw BlobStoreError.notFound(missing) }
            reader = DataBlobReader(data)
        }
        let size = reader.size
        let etag = "\"\(digest.hex)\""
        var range = ByteRange.parse(request.headers[.range], size: size)
        if let ifRange = request.headers[.ifRange], ifRange != etag { range = .whole }
        var headers: HTTPFields = [
            .contentType: "application/octet-stream", .eTag: etag, .acceptRanges: "bytes",
        ]
        let span: ClosedRange<Int64>?
        let status: HTTPResponse.Status
        switch range {
        case .whole:
            span = size > 0 ? 0...(size - 1) : nil
            status = .ok
        case .partial(let r):
            span = r
            status = .partialContent
            headers[.contentRange] = "bytes \(r.lowerBound)-\(r.upperBound)/\(size)"
        case .unsatisfiable:
            reader.close()
            var error = APIError(.rangeNotSatisfiable, "the content is \(size) bytes long").makeResponse()
            error.headers[.contentRange] = "bytes */\(size)"
            return error
        }
        guard let span else {
            reader.close()
            return Response(status: status, headers: headers, body: .init())
        }
        let length = span.upperBound - span.lowerBound + 1
        let body = ResponseBody(contentLength: Int(length)) { writer in
            defer { reader.close() }
            // A small first chunk gets the first bytes to the client quickly (a placeholder's
            // open waits for them); then 1 MiB chunks, where per-chunk overhead vanishes.
            var chunk = 16 * 1024
            var offset = span.lowerBound
            let allocator = ByteBufferAllocator()
            while offset <= span.upperBound {
                let want = Int(min(Int64(chunk), span.upperBound - offset + 1))
                var buffer = allocator.buffer(capacity: want)
                let got = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: want) { ptr in
                    try reader.read(at: offset, into: UnsafeMutableRawBufferPointer(rebasing: ptr[0..<want]))
                }
                if got == 0 { throw APIError(.internalError, "content ended early") }
                offset += Int64(got)
                try await writer.write(buffer)
                chunk = 1 << 20
            }
            try await writer.finish(nil)
        }
        return Response(status: status, headers: headers, body: body)
    }

    // MARK: Helpers

    func containerID(_ context: ServerContext) throws -> ContainerID {
        let raw = try context.parameters.require("container")
        do { return try ContainerID(raw) } catch { throw APIError(.invalidContainerID, error.description) }
    }

    func container(_ context: ServerContext, create: Bool = false) async throws -> ContainerRef {
        let account = try context.requireAccount()
        let id = try containerID(context)
        guard let c = try await storage.metadata.container(id, of: account, create: create) else {
            throw APIError(.containerNotFound, "no container '\(id)'")
        }
        return c
    }

    func info(_ c: ContainerRef) async throws -> ContainerInfo {
        ContainerInfo(id: c.id, created: c.created, cursor: try await storage.changes.latestCursor(in: c))
    }

    func itemID(_ context: ServerContext) throws -> ItemID {
        try wellFormed(ItemID(try context.parameters.require("item")))
    }

    func liveItem(_ id: ItemID, _ c: ContainerRef) async throws -> ItemMetadata {
        guard let item = try await storage.metadata.item(id, in: c) else { throw APIError(.itemNotFound, "no item '\(id)'") }
        return item
    }

    func blobDigest(_ context: ServerContext) throws -> ContentDigest {
        let raw = try context.parameters.require("digest")
        do { return try ContentDigest(hex: raw) } catch { throw APIError(.invalidDigest, error.description) }
    }

    func decode<T: Decodable>(_ type: T.Type, _ request: Request, limit: Int? = nil) async throws -> T {
        var request = request
        let buffer = try await request.collectBody(upTo: limit ?? configuration.maxJSONBytes)
        return try JSONDecoder().decode(T.self, from: Data(buffer.readableBytesView))
    }
}

func wellFormed(_ id: ItemID) throws -> ItemID {
    guard id.isWellFormed else { throw APIError(.invalidItemID, "'\(id.rawValue.prefix(80))' is not an item id") }
    return id
}

func validName(_ raw: String) throws -> ItemName {
    do { return try ItemName(raw) } catch { throw APIError(.invalidName, error.description) }
}

func json<T: Encodable>(_ value: T, status: HTTPResponse.Status = .ok) throws -> Response {
    let data = try JSONEncoder().encode(value)
    return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
}
