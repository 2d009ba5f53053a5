import Foundation
import Hummingbird
import ItemModel
import Logging
import MetadataIndex
import QueryLanguage
import ServiceLifecycle
import SyncAPI
import SyncEngine
import VFS

/// The control socket: `ubiq status`, `ubiq unmount` and `ubiq monitor` talk to the daemon here.
struct ControlServer {
    let engine: SyncEngine
    let shares: ShareControl
    /// Where queries learn of the transfers under way (`MountTransfers`).
    let fs: FileSystem
    let configuration: MountConfiguration
    let events: EventFanOut
    let metrics: MountMetrics
    let requestUnmount: @Sendable () -> Void

    func makeApplication(socketPath: String, logger: Logger) -> some ApplicationProtocol {
        let router = Router()
        router.get(RouterPath(ControlPath.status)) { _, _ in try json(try report()) }
        router.get(RouterPath(ControlPath.metrics)) { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: metrics.text(try report()))))
        }
        router.post(RouterPath(ControlPath.flush)) { request, _ in
            let seconds = request.uri.queryParameters["timeout"].map { Double(String($0)) } ?? 30
            guard let seconds, ControlPath.isFlushTimeout(seconds) else { throw HTTPError(.badRequest, message: ControlPath.flushTimeoutRule) }
            return try json(try await flush(within: .milliseconds(Int(seconds * 1000))))
        }
        router.post(RouterPath(ControlPath.unmount)) { _, _ in
            requestUnmount()
            return try json(try report())
        }
        router.get(RouterPath(ControlPath.earlierVersions)) { request, _ in
            let ino = request.uri.queryParameters["ino"].flatMap { Int64(String($0)) } ?? 0
            do { return try json(EarlierVersionsReport(versions: try await engine.earlierVersions(of: ino))) } catch let refusal as SyncEngine.EarlierVersionRefusal {
                return try json(EarlierVersionsReport(error: refusal.message))
            }
        }
        router.post(RouterPath(ControlPath.restore)) { request, _ in
            let ino = request.uri.queryParameters["ino"].flatMap { Int64(String($0)) } ?? 0
            let revision = Revision(String(request.uri.queryParameters["revision"] ?? ""))
            do {
                try await engine.restore(ino, revision: revision)
                return try json(RestoreReport())
            } catch let refusal as SyncEngine.EarlierVersionRefusal {
                return try json(RestoreReport(error: refusal.message))
            }
        }
        router.get(RouterPath(ControlPath.itemStatus)) { request, _ in
            let path = String(request.uri.queryParameters["path"] ?? "")
            let report: ItemStatusReport
            do throws(FSError) { report = ItemStatusReport(attributes: try fs.statusAttributes(atPath: path)) } catch {
                report = ItemStatusReport(error: "\(path): \(String(cString: strerror(error.errno)))")
            }
            return try json(report)
        }
        router.post(RouterPath(ControlPath.share)) { request, _ in
            let parameters = request.uri.queryParameters
            let expires = parameters["expires"].flatMap { Int64(String($0)) }.map { Duration.seconds($0) }
            return try json(await shares.share(path: String(parameters["path"] ?? ""), expires: expires))
        }
        router.post(RouterPath(ControlPath.unshare)) { request, _ in
            try json(await shares.unshare(path: String(request.uri.queryParameters["path"] ?? "")))
        }
        router.get(RouterPath(ControlPath.shares)) { _, _ in try json(await shares.list()) }
        router.get(RouterPath(ControlPath.query)) { request, _ in
            try json(runQuery(QueryRequest(request.uri.queryParameters)))
        }
        router.get(RouterPath(ControlPath.liveQuery)) { request, _ in
            let parameters = request.uri.queryParameters
            let query = QueryRequest(parameters)
            let seconds = parameters["interval"].map { Double(String($0)) } ?? 0.1
            return Response(status: .ok, headers: [.contentType: "application/x-ndjson"], body: ResponseBody { writer in
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
                func send(_ line: LiveQueryLine) async throws {
                    var data = try encoder.encode(line)
                    data.append(UInt8(ascii: "\n"))
                    try await writer.write(ByteBuffer(bytes: data))
                }
                guard let seconds, ControlPath.isLiveInterval(seconds) else {
                    try await send(LiveQueryLine(event: "error", error: ControlPath.liveIntervalRule))
                    try await writer.finish(nil)
                    return
                }
                let interval = Duration.milliseconds(Int((seconds * 1000).rounded(.up)))
                // Listening before the snapshot: a commit after it is never missed (L7).
                let (commits, stop) = engine.store.commits()
                defer { stop() }
                // L9: `$time` is fixed when the query starts.
                let clock = QueryClock()
                let first = try runQuery(query, clock: clock)
                if let error = first.error {
                    try await send(LiveQueryLine(event: "error", error: error, position: first.position))
                    try await writer.finish(nil)
                    return
                }
                var shown = Dictionary((first.results ?? []).map { ($0.itemID, $0) }, uniquingKeysWith: { a, _ in a })
                for item in first.results ?? [] { try await send(LiveQueryLine(event: "result", item: item)) }
                try await send(LiveQueryLine(event: "finishGathering"))
                // A pass per batch of commits (L5), and once a second while a transfer runs, for
                // what changes without a commit (a download's or an upload's progress). Not
                // otherwise: a pass over a large result set is not free.
                enum Wake { case commit, tick }
                let engine = engine
                let wakes = AsyncStream<Wake>(bufferingPolicy: .bufferingNewest(1)) { continuation in
                    let a = Task { for await _ in commits { continuation.yield(.commit) }; continuation.finish() }
                    let b = Task {
                        while !Task.isCancelled {
                            try? await Task.sleep(for: .seconds(1))
                            continuation.yield(.tick)
                        }
                    }
                    continuation.onTermination = { _ in a.cancel(); b.cancel() }
                }
                var lastWrite = ContinuousClock.now
                // A daemon asked to stop (an unmount) ends the stream, as `/events` does: its
                // control server waits for open responses, and this one would wait for a commit.
                try await withGracefulShutdownHandler {
                    for await wake in wakes {
                        if case .tick = wake, !engine.transfersUnderWay {
                            // A blank line now and then: a client that went away (Ctrl-C) is
                            // noticed by the write that fails, not kept until the next change.
                            if ContinuousClock.now - lastWrite >= Self.liveKeepAlive {
                                try await writer.write(ByteBuffer(string: "\n"))
                                lastWrite = .now
                            }
                            continue
                        }
                        try await Task.sleep(for: interval)
                        let now = try runQuery(query, clock: clock).results ?? []
                        let next = Dictionary(now.map { ($0.itemID, $0) }, uniquingKeysWith: { a, _ in a })
                        let added = now.filter { shown[$0.itemID] == nil }
                        let changed = now.filter { item in shown[item.itemID].map { $0 != item } ?? false }
                        let removed = shown.values.filter { next[$0.itemID] == nil }.sorted { $0.path < $1.path }
                            .map { LiveQueryLine.RemovedItem(itemID: $0.itemID, path: $0.path) }
                        shown = next
                        // L2: nothing to say about a batch that does not touch the results.
                        guard !added.isEmpty || !changed.isEmpty || !removed.isEmpty else { continue }
                        try await send(LiveQueryLine(event: "update", added: added, changed: changed, removed: removed))
                        lastWrite = .now
                    }
                } onGracefulShutdown: {
                    stop()
                }
                try await writer.finish(nil)
            })
        }
        router.get(RouterPath(ControlPath.events)) { _, _ in
            let (stream, cancel) = events.subscribe()
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
            return Response(status: .ok, headers: [.contentType: "application/x-ndjson"], body: ResponseBody { writer in
                defer { cancel() }
                // The connection's state first: a listener knows where it starts, and that it
                // hears everything after this line.
                let s = try engine.status()
                var line = try encoder.encode(MountEvent(s.connected ? .online : .offline, detail: s.lastError))
                line.append(UInt8(ascii: "\n"))
                try await writer.write(ByteBuffer(bytes: line))
                // A daemon asked to stop (a signal) stops its control server first, which waits
                // for open responses: this one ends then, not when the mount is gone.
                try await withGracefulShutdownHandler {
                    for await event in stream {
                        var line = try encoder.encode(event)
                        line.append(UInt8(ascii: "\n"))
                        try await writer.write(ByteBuffer(bytes: line))
                    }
                } onGracefulShutdown: {
                    cancel()
                }
                try await writer.finish(nil)
            })
        }
        addKeyValueRoutes(to: router)
        addQueryOutputRoute(to: router)
        return Application(
            router: router, configuration: .init(address: .unixDomainSocket(path: socketPath), serverName: "ubiq-mount"),
            logger: logger)
    }

    /// How long a live query's stream stays silent before it writes a blank line.
    static let liveKeepAlive: Duration = .seconds(10)

    /// What `/query` and `/query/live` are asked: `q`, `args` (a JSON array), `scope`, the
    /// names of keys in `sort`, `group` and `values` (empty when not asked), and `count=1`.
    struct QueryRequest {
        var text: String
        var arguments: [String]
        var scope: QueryScope
        var sort: String
        var group: String
        var values: String
        var count: Bool

        init(_ parameters: Parameters) {
            text = String(parameters["q"] ?? "")
            arguments = parameters["args"].flatMap { try? JSONDecoder().decode([String].self, from: Data(String($0).utf8)) } ?? []
            scope = parameters["scope"].flatMap { QueryScope(rawValue: String($0)) } ?? .all
            sort = parameters["sort"].map { String($0) } ?? ""
            group = parameters["group"].map { String($0) } ?? ""
            values = parameters["values"].map { String($0) } ?? ""
            count = parameters["count"] == "1"
        }
    }

    /// A one-shot query over the mount's rows (docs/QUERY_LANGUAGE.md).
    func runQuery(_ query: QueryRequest, clock: QueryClock = QueryClock()) throws -> QueryAnswer {
        let (sort, group, values) = (query.sort, query.group, query.values)
        let predicate: QueryPredicate
        do throws(QueryError) { predicate = try QueryParser.parse(query.text, arguments: query.arguments) } catch {
            return QueryAnswer(error: error.message, position: error.position)
        }
        var order: [(Key, descending: Bool)] = []
        for name in sort.split(separator: ",").map(String.init) {
            let descending = name.hasPrefix("-")
            guard let key = KeyTable.key(named: descending ? String(name.dropFirst()) : name) else {
                return QueryAnswer(error: "unknown sort key '\(name)'", position: nil)
            }
            order.append((key, descending))
        }
        let groupKey = group.isEmpty ? nil : KeyTable.key(named: group)
        let valuesKey = values.isEmpty ? nil : KeyTable.key(named: values)
        if !group.isEmpty && groupKey == nil { return QueryAnswer(error: "unknown group key '\(group)'", position: nil) }
        if !values.isEmpty && valuesKey == nil { return QueryAnswer(error: "unknown values key '\(values)'", position: nil) }
        // Grouped: by the group's value first, each group in the asked order.
        if let groupKey { order.insert((groupKey, false), at: 0) }
        let transfers = MountTransfers(fs: fs)
        if query.count && groupKey == nil && valuesKey == nil {
            return QueryAnswer(count: try engine.store.read { r in
                try MetadataQuery.count(predicate, in: r, transfers: transfers, scope: query.scope, clock: clock)
            })
        }
        let records = try engine.store.read { r in
            try MetadataQuery.run(predicate, in: r, transfers: transfers, scope: query.scope, sort: order, clock: clock)
        }
        return QueryAnswer(
            results: records.map { record in
                var item = Self.result(record)
                if let groupKey { item.group = record.texts(groupKey).joined(separator: ", ") }
                return item
            },
            values: valuesKey.map { key in MetadataIndex.valueCounts(of: key, in: records).map { ValueCount(value: $0.value, count: $0.count) } })
    }

    static func result(_ r: QueryRecord) -> QueryResultItem {
        QueryResultItem(
            path: r.path, name: r.item.name, itemID: r.item.itemID.rawValue, kind: r.item.kind.rawValue, size: r.item.kind == .folder ? 0 : r.item.size,
            created: WallClock.isoSeconds(of: r.item.created), modified: WallClock.isoSeconds(of: r.item.modified), contentType: r.contentType, downloadingStatus: r.status.downloadingStatus,
            isDownloading: r.status.isDownloading, percentDownloaded: r.status.percentDownloaded, isUploaded: r.status.isUploaded,
            isUploading: r.status.isUploading, percentUploaded: r.status.percentUploaded, hasUnresolvedConflicts: r.status.hasUnresolvedConflicts,
            pinned: r.status.pinned, tags: r.tags)
    }

    func report() throws -> MountStatusReport {
        let s = try engine.status()
        return MountStatusReport(
            mountpoint: configuration.mountpoint, server: configuration.serverURL, account: configuration.account,
            container: configuration.container.rawValue, device: configuration.deviceName, connected: s.connected,
            lastError: s.lastError, pendingUploads: s.pendingUploads, activeDownloads: s.activeDownloads,
            cachedBytes: s.cachedBytes, cacheLimit: s.cacheLimit, items: s.itemCount, hasWholeTree: s.hasWholeTree,
            logFile: DaemonLog(path: configuration.logFile).file)
    }

    /// Waits (bounded) until the outbox is empty; says what is still pending.
    func flush(within limit: Duration) async throws -> FlushReport {
        engine.outboxChanged()
        let clock = ContinuousClock()
        let deadline = clock.now + limit
        while clock.now < deadline {
            if try engine.unsentCount() == 0 { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        let unsent = try engine.unsentChanges(listing: 20)
        return FlushReport(pending: unsent.count, paths: unsent.paths)
    }
}

func json<T: Encodable>(_ value: T) throws -> Response {
    Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: try JSONEncoder().encode(value))))
}

/// The index's view of the transfers the mount runs.
struct MountTransfers: TransfersInFlight {
    let fs: FileSystem
    func downloadPercent(_ ino: Int64) -> Int? { fs.downloadPercent(ino) }
    func upload(_ ino: Int64) -> (uploading: Bool, percent: Int?) { fs.openFiles.upload(ino) }
}
