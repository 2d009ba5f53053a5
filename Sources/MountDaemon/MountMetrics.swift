import FuseKit
import Metrics
import Prometheus
import SyncAPI
import SyncEngine

/// The mount's metrics, as Prometheus text through the control socket (`ubiq status
/// --metrics`): each kernel request by kind with its duration (a histogram, in seconds) and
/// its failures by errno; each notable event by kind (transfers, their failures, conflicts,
/// errors, changes of connection) and the bytes of the transfers that ended; and, read at each scrape, the queue, the transfers running,
/// the cache and the index. swift-metrics is bootstrapped with this registry once per daemon.
final class MountMetrics: RequestObserver, Sendable {
    let registry: PrometheusCollectorRegistry
    /// One per kind, made once: a request's report is then a lookup and a histogram update.
    let durations: [RequestKind: Metrics.Timer]
    /// One per event kind, made once: an event is then a lookup and an increment.
    let events: [MountEventKind: Metrics.Counter]
    let uploadedBytes, downloadedBytes: Metrics.Counter
    let pendingUploads, activeDownloads, cachedBytes, items, connected: Metrics.Gauge

    init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
        durations = Dictionary(uniqueKeysWithValues: RequestKind.allCases.map {
            ($0, Metrics.Timer(label: "ubiq_mount_request_duration_seconds", dimensions: [("request", $0.rawValue)], preferredDisplayUnit: .seconds))
        })
        events = Dictionary(uniqueKeysWithValues: MountEventKind.allCases.map {
            ($0, Metrics.Counter(label: "ubiq_mount_events_total", dimensions: [("event", $0.rawValue)]))
        })
        uploadedBytes = Metrics.Counter(label: "ubiq_mount_uploaded_bytes_total")
        downloadedBytes = Metrics.Counter(label: "ubiq_mount_downloaded_bytes_total")
        pendingUploads = Metrics.Gauge(label: "ubiq_mount_pending_uploads")
        activeDownloads = Metrics.Gauge(label: "ubiq_mount_active_downloads")
        cachedBytes = Metrics.Gauge(label: "ubiq_mount_cached_bytes")
        items = Metrics.Gauge(label: "ubiq_mount_items")
        connected = Metrics.Gauge(label: "ubiq_mount_connected")
    }

    func answered(_ kind: RequestKind, nanoseconds: UInt64, errno: Int32) {
        durations[kind]?.recordNanoseconds(Int64(clamping: nanoseconds))
        if errno != 0 {
            Metrics.Counter(label: "ubiq_mount_request_failures_total", dimensions: [("request", kind.rawValue), ("errno", "\(errno)")]).increment()
        }
    }

    func event(_ event: MountEvent) {
        switch event.kind {
        case .uploadProgress, .downloadProgress: return
        case .uploaded: uploadedBytes.increment(by: event.bytes ?? 0)
        case .downloaded: downloadedBytes.increment(by: event.bytes ?? 0)
        default: break
        }
        events[event.kind]?.increment()
    }

    /// The text, with the state read now.
    func text(_ status: MountStatusReport) -> String {
        pendingUploads.record(status.pendingUploads)
        activeDownloads.record(status.activeDownloads)
        cachedBytes.record(status.cachedBytes)
        items.record(status.items)
        connected.record(status.connected ? 1 : 0)
        var bytes: [UInt8] = []
        registry.emit(into: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }
}
