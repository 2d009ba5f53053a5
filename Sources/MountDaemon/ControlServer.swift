import Foundation
import Hummingbird
import ItemModel
import Logging
import ServiceLifecycle
import SyncAPI
import SyncEngine

/// The control socket: `ubiq status`, `ubiq unmount` and `ubiq monitor` talk to the daemon here.
struct ControlServer {
    let engine: SyncEngine
    let configuration: MountConfiguration
    let events: EventFanOut
    let requestUnmount: @Sendable () -> Void

    func makeApplication(socketPath: String, logger: Logger) -> some ApplicationProtocol {
        let router = Router()
        router.get(RouterPath(ControlPath.status)) { _, _ in try json(try report()) }
        router.post(RouterPath(ControlPath.flush)) { request, _ in
            let seconds = request.uri.queryParameters["timeout"].flatMap { Double(String($0)) } ?? 30
            return try json(try await flush(within: .milliseconds(Int(seconds * 1000))))
        }
        router.post(RouterPath(ControlPath.unmount)) { _, _ in
            requestUnmount()
            return try json(try report())
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
        return Application(
            router: router, configuration: .init(address: .unixDomainSocket(path: socketPath), serverName: "ubiq-mount"),
            logger: logger)
    }

    func report() throws -> MountStatusReport {
        let s = try engine.status()
        return MountStatusReport(
            mountpoint: configuration.mountpoint, server: configuration.serverURL, account: configuration.account,
            container: configuration.container.rawValue, device: configuration.deviceName, connected: s.connected,
            lastError: s.lastError, pendingUploads: s.pendingUploads, activeDownloads: s.activeDownloads,
            cachedBytes: s.cachedBytes, cacheLimit: s.cacheLimit, items: s.itemCount)
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
