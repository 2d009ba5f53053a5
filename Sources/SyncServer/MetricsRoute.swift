import Hummingbird
import Metrics
import NIOCore
import Prometheus

extension SyncServer {
    /// `GET /metrics`: the Prometheus text of every metric of this process (no token: it says
    /// how much the server does, nothing of what it holds). Requests by route, method and
    /// status with their durations come from Hummingbird's `MetricsMiddleware`; content bytes
    /// in and out from the blob routes; the open push streams, the change log's length and
    /// the content kept are read at each scrape.
    func addMetricsRoute(to router: Router<ServerContext>) {
        guard let metrics else { return }
        let pushStreams = metrics.makeGauge(name: "ubiq_server_push_streams", help: "Open push streams (clients following a change log).")
        let logEntries = metrics.makeGauge(name: "ubiq_server_change_log_entries", help: "Entries of every container's change log (one per item).")
        let contentBytes = metrics.makeGauge(name: "ubiq_server_content_stored_bytes", help: "Bytes of content kept for the accounts, each content once.")
        let hub = service.hub
        let storage = service.storage
        router.get("/metrics") { _, _ in
            pushStreams.set(Double(hub.subscriberCount))
            logEntries.set(Double(try await storage.changes.entryCount()))
            contentBytes.set(Double(try await storage.metadata.grantedContentBytes()))
            var text: [UInt8] = []
            text.reserveCapacity(16 << 10)
            metrics.emit(into: &text)
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(bytes: text)))
        }
    }
}

/// Content bytes through the blob and item routes, one counter each way.
enum ContentBytes {
    static let received = Counter(label: "ubiq_server_content_received_bytes_total")
    static let sent = Counter(label: "ubiq_server_content_sent_bytes_total")
}
