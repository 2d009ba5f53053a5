import AsyncHTTPClient
import Foundation
import ItemModel
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import SyncAPI
import Synchronization

/// The sync protocol over HTTP (docs/SYNC_PROTOCOL.md), for one container of one account.
///
/// Errors are `RemoteError`: `.unreachable` when the server cannot be reached (the engine then
/// counts itself offline and retries), `.refused` with the protocol's code otherwise.
public final class SyncHTTPClient: Sendable {
    /// As the user wrote it (see `ServerURL`).
    public let baseURL: String
    /// What request paths are appended to, one per address: the replicas of one deployment when
    /// the user named several. Requests go to one of them until it cannot be reached; the
    /// next then go to the next (`movedOn`), which the engine's retry of the failed request
    /// reaches. A replica serves any account and cursor of the deployment, so nothing else
    /// changes.
    let requestBases: [String]
    /// The index in `requestBases` requests use now.
    let currentBase = Atomic<Int>(0)
    var requestBase: String { requestBases[currentBase.load(ordering: .relaxed)] }
    public let container: ContainerID
    let tokenBox: Mutex<String>
    var token: String { tokenBox.withLock { $0 } }
    /// Asked when the server refuses the token: a newer one (`ubiq login` run again while the
    /// mount runs), or nil. The next request uses it, so a mount need not be restarted.
    let freshToken: (@Sendable () -> String?)?
    let http: HTTPClient
    /// The authorities requests trust (`ServerTrust`); nil: the system's.
    let tls: TLSConfiguration?

    /// Connect fails fast (2 s) so that an offline mount answers at once; reads may idle up to
    /// 60 s because the push stream sends a keep-alive every 15 s. Writes too: an upload whose
    /// bytes stop moving for a minute is cut, however long it ran before.
    static let configuration: HTTPClient.Configuration = {
        var c = HTTPClient.Configuration()
        c.timeout = .init(connect: .seconds(2), read: .seconds(60), write: .seconds(60))
        c.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: 16)
        // A refused connection means offline: fail the request now instead of retrying until
        // its deadline, so that an open of a placeholder answers EIO at once.
        c.connectionPool.retryConnectionEstablishment = false
        c.decompression = .disabled
        return c
    }()

    /// The longest a request other than a transfer of content may take, answer included.
    /// Uploads, downloads and creates or updates that carry content inline have none: a large file on a slow link takes as long as it takes,
    /// and only bytes that stop moving (the idle timeouts above) end it. With this deadline on
    /// uploads, a file that needed more than a minute to go up was cut every time, retried
    /// forever, and made the mount count itself offline at each try.
    let requestDeadline: TimeAmount

    public init(
        baseURL: String, token: String, container: ContainerID, http: HTTPClient? = nil,
        requestDeadline: TimeAmount = .seconds(60), freshToken: (@Sendable () -> String?)? = nil, trust: ServerTrust = ServerTrust()
    ) {
        self.requestDeadline = requestDeadline
        self.tls = trust.tlsConfiguration()
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.requestBases = ServerURL.addresses(self.baseURL).map(ServerURL.requestBase)
        self.tokenBox = Mutex(token)
        self.freshToken = freshToken
        self.container = container
        self.http = http ?? HTTPClient(eventLoopGroupProvider: .singleton, configuration: Self.configuration)
        downloadLoop = self.http.eventLoopGroup.next()
        downloads = HTTPClient(eventLoopGroupProvider: .shared(downloadLoop), configuration: Self.configuration)
        longDownloads = HTTPClient(eventLoopGroupProvider: .shared(downloadLoop), configuration: Self.configuration)
    }

    /// Downloads run on one event loop, in a client of their own whose connections all live on
    /// that loop: the thread that reads a download's bytes off the socket writes them into the
    /// cache file. With one client for everything, a download could get an idle connection of
    /// the other loop and hand every part of the body across threads (a wake-up each, about a
    /// millisecond on an idle CPU of this virtual machine, in an open's wait for its first bytes).
    let downloadLoop: any EventLoop
    let downloads: HTTPClient
    /// Long transfers (the rest of a file after its head) get connections of their own. A
    /// transfer cut short (an evict, a newer version) closes its connection, and the head of
    /// the next file opened would then wait for a new connection's handshake (0.3 ms on
    /// loopback, a round trip or more to a remote server); short requests keep theirs.
    let longDownloads: HTTPClient
    /// Ranges longer than this are long transfers: above a priority fetch (4 MiB).
    static let longDownloadBytes: Int64 = 8 << 20

    public func shutdown() async {
        try? await downloads.shutdown()
        try? await longDownloads.shutdown()
        try? await http.shutdown()
    }

    /// For one-off requests (login, health): the same fail-fast configuration.
    static let shared = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)

    /// Trades a password for a bearer token. `device`: what this machine is called, shown in
    /// the account's list of tokens.
    public static func login(server: String, user: String, password: String, device: String? = nil, trust: ServerTrust = ServerTrust()) async throws -> TokenResponse {
        let body = try JSONEncoder().encode(TokenRequest(user: user, password: password, device: device))
        let (status, answer) = try await sendToFirstAnswering(server) { base in
            var request = HTTPClientRequest(url: base + APIPath.token)
            request.tlsConfiguration = trust.tlsConfiguration()
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: body))
            return request
        }
        guard status == 201 else { throw error(status: status, body: answer) }
        return try decode(TokenResponse.self, answer)
    }

    /// Revokes `token` on the server: nothing can use it any more.
    public static func logout(server: String, token: String, trust: ServerTrust = ServerTrust()) async throws {
        let (status, body) = try await sendToFirstAnswering(server) { base in
            var request = HTTPClientRequest(url: base + APIPath.token)
            request.tlsConfiguration = trust.tlsConfiguration()
            request.method = .DELETE
            request.headers.add(name: "Authorization", value: "Bearer \(token)")
            return request
        }
        guard status == 204 else { throw error(status: status, body: body) }
    }

    public static func health(server: String) async throws -> HealthResponse {
        let (status, body) = try await sendToFirstAnswering(server) { HTTPClientRequest(url: $0 + APIPath.health) }
        guard status == 200 else { throw error(status: status, body: body) }
        return try decode(HealthResponse.self, body)
    }

    /// The request made for each address of `server` in turn, until one can be reached.
    static func sendToFirstAnswering(_ server: String, _ request: (String) -> HTTPClientRequest) async throws -> (Int, ByteBuffer) {
        let bases = ServerURL.addresses(server).map(ServerURL.requestBase)
        for base in bases.dropLast() {
            do { return try await send(Self.shared, request(base)) } catch RemoteError.unreachable {}
        }
        return try await send(Self.shared, request(bases.last ?? ServerURL.requestBase(server)))
    }

    /// A request to `url` found its server unreachable: later requests go to the next address,
    /// unless another request moved on already (then `url` is not the current one's).
    func movedOn(from url: String) {
        guard requestBases.count > 1, !Task.isCancelled else { return }
        let index = currentBase.load(ordering: .relaxed)
        // Paths start with a slash: `http://h:1` must not claim `http://h:10/…`.
        guard url.hasPrefix(requestBases[index] + "/") else { return }
        _ = currentBase.compareExchange(expected: index, desired: (index + 1) % requestBases.count, ordering: .relaxed)
    }

    /// `Self.send`, moving on to the next address when this one cannot be reached.
    func send(_ request: HTTPClientRequest, deadline: TimeAmount?) async throws -> (Int, ByteBuffer) {
        do {
            return try await Self.send(http, request, deadline: deadline)
        } catch RemoteError.unreachable(let why) {
            movedOn(from: request.url)
            throw RemoteError.unreachable(why)
        }
    }

    // MARK: Requests

    func request(_ method: HTTPMethod, _ path: String) -> HTTPClientRequest {
        var r = HTTPClientRequest(url: requestBase + path)
        r.tlsConfiguration = tls
        r.method = method
        r.headers.add(name: "Authorization", value: "Bearer \(token)")
        return r
    }

    /// `carriesContent`: the body may hold files' bytes (inline content), so the request has
    /// no deadline (`requestDeadline`).
    func call<T: Decodable>(
        _ method: HTTPMethod, _ path: String, json body: (some Encodable)? = Optional<Int>.none, carriesContent: Bool = false,
        expect: Set<Int> = [200, 201]
    ) async throws -> T {
        var r = request(method, path)
        if let body {
            r.headers.add(name: "Content-Type", value: "application/json")
            r.body = .bytes(ByteBuffer(bytes: try JSONEncoder().encode(body)))
        }
        let (status, data) = try await send(r, deadline: carriesContent ? nil : requestDeadline)
        guard expect.contains(status) else { throw failure(status: status, body: data) }
        return try Self.decode(T.self, data)
    }

    /// 64 MiB: far above any metadata answer (10,000 items are about 4 MiB of JSON).
    static let maxJSONResponse = 64 << 20

    /// `deadline`: nil for none (a transfer of content).
    static func send(_ client: HTTPClient, _ request: HTTPClientRequest, deadline: TimeAmount? = .seconds(60)) async throws -> (Int, ByteBuffer) {
        do {
            let response = try await client.execute(request, deadline: deadline.map { .now() + $0 } ?? .distantFuture)
            let body = try await response.body.collect(upTo: maxJSONResponse)
            return (Int(response.status.code), body)
        } catch let error as RemoteError {
            throw error
        } catch {
            throw Self.transportError(error)
        }
    }

    /// A failure below HTTP. A certificate that is not trusted is told apart: it is no network
    /// trouble, and waiting will not mend it.
    static func transportError(_ error: Error) -> RemoteError {
        if let tls = error as? NIOSSLError, case .handshakeFailed(let reasons) = tls {
            return .untrustedServer("the TLS handshake failed (the server's certificate is not trusted, or its name does not match): \(reasons)")
        }
        if error is NIOSSLError || error is NIOSSLExtraError { return .untrustedServer("TLS: \(error)") }
        return .unreachable(String(describing: error))
    }

    static func decode<T: Decodable>(_ type: T.Type, _ body: ByteBuffer) throws -> T {
        do { return try JSONDecoder().decode(T.self, from: Data(body.readableBytesView)) } catch {
            throw RemoteError.protocolError("cannot read the server's answer as \(T.self): \(error)")
        }
    }

    /// `error(status:body:)`, and on a refused token the switch to a fresh one, if any.
    func failure(status: Int, body: ByteBuffer) -> RemoteError {
        let error = Self.error(status: status, body: body)
        if case .unauthorized = error, let fresh = freshToken?(), !fresh.isEmpty {
            tokenBox.withLock { $0 = fresh }
        }
        return error
    }

    static func error(status: Int, body: ByteBuffer) -> RemoteError {
        let answered = try? JSONDecoder().decode(APIErrorBody.self, from: Data(body.readableBytesView))
        if status == 401 { return .unauthorized(answered?.error.message ?? "the server answered 401") }
        if let e = answered {
            return .refused(code: e.error.code, message: e.error.message, current: e.error.current)
        }
        // A gateway that cannot reach the server: offline. Other 5xx answers: the server is
        // there but failed; retry later without calling the mount offline.
        if status == 502 || status == 503 || status == 504 { return .unreachable("server answered \(status)") }
        return .protocolError("server answered \(status)")
    }

    /// The account this client's token belongs to, and its identity (`WhoAmI`).
    public func whoami() async throws -> WhoAmI {
        try await call(.GET, APIPath.whoami)
    }

    // MARK: The RemoteStore operations

    public func ensureContainer() async throws -> ContainerInfo {
        try await call(.PUT, APIPath.container(container))
    }

    public func changes(since: ChangeCursor, limit: Int) async throws -> ChangePage {
        try await call(.GET, APIPath.changes(container) + "?since=\(since.rawValue)&limit=\(limit)")
    }

    public func item(_ id: ItemID) async throws -> ItemMetadata {
        try await call(.GET, APIPath.item(container, id))
    }

    public func children(of id: ItemID) async throws -> [ItemMetadata] {
        let list: ItemList = try await call(.GET, APIPath.children(container, id))
        return list.items
    }

    public func createItem(_ body: CreateItemRequest) async throws -> ItemMetadata {
        try await call(.POST, APIPath.items(container), json: body, carriesContent: true)
    }

    public func createItems(_ requests: [CreateItemRequest]) async throws -> [Result<ItemMetadata, RemoteError>] {
        let answer: BatchResponse = try await call(.POST, APIPath.batch(container), json: BatchRequest(creates: requests), carriesContent: true)
        guard answer.results.count == requests.count else {
            throw RemoteError.protocolError("the server answered \(answer.results.count) results for a batch of \(requests.count)")
        }
        return try answer.results.map { result in
            if let item = result.item { return .success(item) }
            guard let e = result.error else { throw RemoteError.protocolError("a batch result with neither item nor error") }
            return .failure(.refused(code: e.code, message: e.message, current: e.current))
        }
    }

    public func updateContent(_ id: ItemID, _ body: UpdateContentRequest) async throws -> ItemMetadata {
        try await call(.PUT, APIPath.content(container, id), json: body, carriesContent: true)
    }

    public func updateItem(_ id: ItemID, _ body: UpdateItemRequest) async throws -> ItemMetadata {
        try await call(.PATCH, APIPath.item(container, id), json: body)
    }

    public func deleteItem(_ id: ItemID, base: Revision, recursive: Bool) async throws -> [ItemMetadata] {
        let response: DeleteResponse = try await call(
            .DELETE, APIPath.item(container, id) + "?baseRevision=\(base.rawValue)&recursive=\(recursive)")
        return response.deleted
    }

    public func setXattrs(_ id: ItemID, _ body: SetXattrsRequest) async throws -> ItemMetadata {
        try await call(.PUT, APIPath.xattrs(container, id), json: body)
    }

    public func addConflictVersion(_ id: ItemID, _ body: AddConflictVersionRequest) async throws -> ItemMetadata {
        try await call(.POST, APIPath.conflicts(container, id), json: body, carriesContent: body.content != nil)
    }

    public func resolveConflicts(_ id: ItemID, _ body: ResolveConflictsRequest) async throws -> ItemMetadata {
        try await call(.POST, APIPath.resolve(container, id), json: body)
    }

    public func earlierVersions(of id: ItemID) async throws -> [EarlierVersion] {
        let list: EarlierVersionList = try await call(.GET, APIPath.versions(container, id))
        return list.versions
    }

    public func restore(_ id: ItemID, _ body: RestoreRequest) async throws -> ItemMetadata {
        try await call(.POST, APIPath.restore(container, id), json: body)
    }

    public func hasBlob(_ digest: ContentDigest) async throws -> Bool {
        let (status, body) = try await send(request(.HEAD, APIPath.blob(digest)), deadline: requestDeadline)
        switch status {
        case 200: return true
        case 404: return false
        default: throw failure(status: status, body: body)
        }
    }

    public func uploadBlob(
        _ digest: ContentDigest, size: Int64, fromFile path: String, progress: @escaping @Sendable (Int64) -> Void = { _ in }
    ) async throws {
        var r = request(.PUT, APIPath.blob(digest))
        r.headers.add(name: "Content-Type", value: "application/octet-stream")
        let chunks = try FileChunks(path: path, size: size, progress: progress)
        r.body = .stream(chunks, length: .known(size))
        let (status, body) = try await send(r, deadline: nil)
        guard status == 201 || status == 200 else { throw failure(status: status, body: body) }
    }

    /// Hands the bytes to `receive` on the connection's event loop as they arrive, without a
    /// copy or a task hop in between: this path carries whole files, and on two cores every
    /// copy and thread switch shows in the rate. The next read from the socket waits for
    /// `receive` to return, which is the back pressure.
    public func download(
        _ digest: ContentDigest, range: Range<Int64>, receive: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void
    ) async throws {
        try await beginDownload(digest, range: range, receive: receive)()
    }

    public func beginDownload(
        _ digest: ContentDigest, range: Range<Int64>, receive: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void
    ) -> @Sendable () async throws -> Void {
        var headers = HTTPHeaders([("Authorization", "Bearer \(token)")])
        if !range.isEmpty { headers.add(name: "Range", value: "bytes=\(range.lowerBound)-\(range.upperBound - 1)") }
        let request: HTTPClient.Request
        do {
            request = try HTTPClient.Request(url: requestBase + APIPath.blob(digest), method: .GET, headers: headers, tlsConfiguration: tls)
        } catch {
            return { throw RemoteError.protocolError("cannot build a request: \(error)") }
        }
        let delegate = DownloadDelegate(range: range, receive: receive)
        let url = request.url.absoluteString
        let client = range.count > Self.longDownloadBytes || range.isEmpty ? longDownloads : downloads
        let task = client.execute(request: request, delegate: delegate, eventLoop: .delegate(on: downloadLoop))
        return {
            do {
                try await withTaskCancellationHandler {
                    try await task.futureResult.get()
                } onCancel: {
                    task.cancel()
                }
            } catch let error as RemoteError {
                throw error
            } catch {
                // What `receive` threw (a full disk) is the cause; the transport's error only says
                // the request was torn down because of it.
                if let cause = delegate.receiveError { throw cause }
                let failure = Self.transportError(error)
                if case .unreachable = failure { self.movedOn(from: url) }
                throw failure
            }
        }
    }

    public func changeStream(since: ChangeCursor) -> AsyncThrowingStream<ChangeStreamEvent, Error> {
        let r = request(.GET, APIPath.changeStream(container) + "?since=\(since.rawValue)")
        let http = self.http
        return AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    let response: HTTPClientResponse
                    do { response = try await http.execute(r, deadline: .distantFuture) } catch {
                        throw Self.transportError(error)
                    }
                    let status = Int(response.status.code)
                    guard status == 200 else {
                        throw failure(status: status, body: try await response.body.collect(upTo: 1 << 20))
                    }
                    var parser = ServerSentEventParser()
                    for try await buffer in response.body {
                        for event in parser.feed(buffer.readableBytesView) {
                            if let known = try Self.streamEvent(event) { continuation.yield(known) }
                        }
                    }
                    continuation.finish()
                } catch let error as RemoteError {
                    if case .unreachable = error { movedOn(from: r.url) }
                    continuation.finish(throwing: error)
                } catch is DecodingError {
                    continuation.finish(throwing: RemoteError.protocolError("bad event on the push stream"))
                } catch {
                    movedOn(from: r.url)
                    continuation.finish(throwing: RemoteError.unreachable(String(describing: error)))
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
}

extension SyncHTTPClient {
    /// What a push-stream event means; nil for an event this client does not know, which it
    /// skips: a newer server may send more kinds of events, and an older client must keep
    /// following the ones it knows.
    static func streamEvent(_ event: ServerSentEventParser.Event) throws -> ChangeStreamEvent? {
        let data = Data(event.data.utf8)
        switch event.name {
        case "change": return .change(try JSONDecoder().decode(ItemChange.self, from: data))
        case "ready": return .ready(try JSONDecoder().decode(StreamReady.self, from: data).cursor)
        case "kv": return .keyValues(version: try JSONDecoder().decode(StreamKeyValues.self, from: data).version)
        default: return nil
        }
    }
}

/// Reads a file in 1 MiB chunks for a streamed upload body.
struct FileChunks: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let path: String
    let size: Int64
    /// Told the bytes handed to the connection so far. The body is pulled as the connection
    /// writes (back pressure), so this runs ahead of what reached the server by a chunk and
    /// what the kernel's socket buffers hold (a few megabytes).
    let progress: @Sendable (Int64) -> Void

    init(path: String, size: Int64, progress: @escaping @Sendable (Int64) -> Void) throws {
        guard access(path, R_OK) == 0 else { throw RemoteError.protocolError("cannot read \(path)") }
        self.path = path
        self.size = size
        self.progress = progress
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        let fd: Int32
        let size: Int64
        let progress: @Sendable (Int64) -> Void
        var offset: Int64 = 0

        mutating func next() async throws -> ByteBuffer? {
            guard offset < size else {
                close(fd)
                return nil
            }
            let want = Int(Swift.min(1 << 20, size - offset))
            var buffer = ByteBufferAllocator().buffer(capacity: want)
            let got = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: want) { ptr -> Int in
                let n = pread(fd, ptr.baseAddress, want, off_t(offset))
                if n < 0 { throw RemoteError.protocolError("read failed: errno \(errno)") }
                return n
            }
            // The file shrank under us: send what is there; the server's digest check refuses it.
            if got == 0 {
                close(fd)
                return nil
            }
            offset += Int64(got)
            progress(offset)
            return buffer
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(fd: open(path, O_RDONLY | O_CLOEXEC), size: size, progress: progress)
    }
}

/// Incremental Server-Sent Events parser (text/event-stream).
struct ServerSentEventParser {
    struct Event {
        var name = "message"
        var data = ""
        var id: String?
    }

    var pending: [UInt8] = []
    var current = Event()

    mutating func feed(_ bytes: some Collection<UInt8>) -> [Event] {
        pending.append(contentsOf: bytes)
        var out: [Event] = []
        var start = 0
        while let nl = pending[start...].firstIndex(of: UInt8(ascii: "\n")) {
            var line = String(decoding: pending[start..<nl], as: UTF8.self)
            if line.hasSuffix("\r") { line.removeLast() }
            start = nl + 1
            if line.isEmpty {
                if !current.data.isEmpty { out.append(current) }
                current = Event()
            } else if line.hasPrefix(":") {
                continue
            } else if let colon = line.firstIndex(of: ":") {
                let field = line[..<colon]
                var value = line[line.index(after: colon)...]
                if value.hasPrefix(" ") { value = value.dropFirst() }
                switch field {
                case "event": current.name = String(value)
                case "data": current.data += current.data.isEmpty ? String(value) : "\n" + value
                case "id": current.id = String(value)
                default: break
                }
            }
        }
        pending.removeFirst(start)
        return out
    }
}

/// Streams a ranged download into a callback on the event loop (see `SyncHTTPClient.download`).
final class DownloadDelegate: HTTPClientResponseDelegate {
    typealias Response = Void

    struct State {
        var status = 0
        /// A 200 answers the whole content: the bytes before the range are skipped here,
        /// and those after it (`remaining` counts down) are not handed on.
        var skip: Int64 = 0
        var remaining: Int64 = .max
        var errorBody = ByteBuffer()
        var receiveError: Error?
    }

    let range: Range<Int64>
    let receive: @Sendable (UnsafeRawBufferPointer) throws -> Void
    let state = Mutex(State())

    /// An empty `range` asks for the whole content.
    init(range: Range<Int64>, receive: @escaping @Sendable (UnsafeRawBufferPointer) throws -> Void) {
        self.range = range
        self.receive = receive
    }

    var receiveError: Error? { state.withLock { $0.receiveError } }

    func didReceiveHead(task: HTTPClient.Task<Void>, _ head: HTTPResponseHead) -> EventLoopFuture<Void> {
        let status = Int(head.status.code)
        state.withLock { s in
            s.status = status
            s.skip = status == 200 ? range.lowerBound : 0
            s.remaining = range.isEmpty ? .max : Int64(range.count)
        }
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
        var buffer = buffer
        let kept = state.withLock { s -> (Int, Int)? in
            guard s.status == 200 || s.status == 206 else {
                // An error answer: keep up to 1 MiB of its JSON for the message.
                if s.errorBody.readableBytes < 1 << 20 { s.errorBody.writeImmutableBuffer(buffer) }
                return nil
            }
            let n = Int(Swift.min(Int64(buffer.readableBytes), s.skip))
            s.skip -= Int64(n)
            let take = Swift.min(Int64(buffer.readableBytes - n), s.remaining)
            s.remaining -= take
            return (n, Int(take))
        }
        guard let (skip, take) = kept else { return task.eventLoop.makeSucceededVoidFuture() }
        buffer.moveReaderIndex(forwardBy: skip)
        buffer = buffer.getSlice(at: buffer.readerIndex, length: take) ?? ByteBuffer()
        guard buffer.readableBytes > 0 else { return task.eventLoop.makeSucceededVoidFuture() }
        do {
            try buffer.withUnsafeReadableBytes { try receive($0) }
        } catch {
            state.withLock { $0.receiveError = error }
            return task.eventLoop.makeFailedFuture(error)
        }
        return task.eventLoop.makeSucceededVoidFuture()
    }

    func didFinishRequest(task: HTTPClient.Task<Void>) throws {
        let (status, body) = state.withLock { ($0.status, $0.errorBody) }
        guard status == 200 || status == 206 else { throw SyncHTTPClient.error(status: status, body: body) }
    }
}
