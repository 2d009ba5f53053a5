import Hummingbird
import Metrics
import NIOCore
import Prometheus

extension SyncServer {
    /// `GET /metrics`: the Prometheus text of every metric of this process (no token: it says
    /// how much the server does, nothing of what it holds). Requests by route, method and
    /// status with their durations come from Hummingbird's `MetricsMiddleware`; content bytes
    /// in and out from the blob routes; the open push streams are counted at each scrape.
    func addMetricsRoute(to router: Router<ServerContext>) {
        guard let metrics else { return }
        let pushStreams = metrics.makeGauge(name: "ubiq_server_push_streams", help: "Open push streams (clients following a change log).")
        let hub = service.hub
        router.get("/metrics") { _, _ in
            pushStreams.set(Double(hub.subscriberCount))
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
