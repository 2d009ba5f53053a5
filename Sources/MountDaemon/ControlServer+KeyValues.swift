import Foundation
import Hummingbird
import ItemModel
import LocalState
import ServiceLifecycle
import SyncAPI
import SyncEngine

/// `ubiq kv` and `ubiq whoami` (docs/CLI.md, "The control socket"): the key-value store as
/// this mount sees it, written offline too, and the account the mount shows.
extension ControlServer {
    func addKeyValueRoutes(to router: Router<BasicRequestContext>) {
        router.get(RouterPath(ControlPath.keyValues)) { request, _ in
            var page = try engine.keyValuePage()
            if let key = request.uri.queryParameters["key"].map(String.init) {
                page.entries = page.entries.filter { $0.key.utf8.elementsEqual(key.utf8) }
            }
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: try page.json())))
        }
        router.post(RouterPath(ControlPath.keyValueSet)) { request, _ in
            let key = String(request.uri.queryParameters["key"] ?? "")
            var request = request
            // Well past what a value may have, so that a value too large is refused as one by the
            // engine (a quota violation, reported to `kv watch`), not as a request too large.
            let body = try await request.collectBody(upTo: 16 * KeyValueLimits.maxValueBytes)
            return try json(keyValueWrite { try engine.setKeyValue(key, json: Data(body.readableBytesView)) })
        }
        router.post(RouterPath(ControlPath.keyValueRemove)) { request, _ in
            let key = String(request.uri.queryParameters["key"] ?? "")
            return try json(keyValueWrite { try engine.removeKeyValue(key) })
        }
        router.get(RouterPath(ControlPath.keyValueWatch)) { _, _ in
            let (notices, cancel) = engine.keyValueNotices.subscribe()
            return Response(status: .ok, headers: [.contentType: "application/x-ndjson"], body: ResponseBody { writer in
                defer { cancel() }
                try await withGracefulShutdownHandler {
                    for await notice in notices {
                        var line = try notice.json()
                        line.append(UInt8(ascii: "\n"))
                        try await writer.write(ByteBuffer(bytes: line))
                    }
                } onGracefulShutdown: {
                    cancel()
                }
                try await writer.finish(nil)
            })
        }
        router.get(RouterPath(ControlPath.whoami)) { _, _ in
            try json(WhoAmIReport(
                account: configuration.account, container: configuration.container.rawValue, server: configuration.serverURL,
                identityToken: try engine.store.read { try $0.accountIdentity() }))
        }
    }

    func keyValueWrite(_ body: () throws -> Void) throws -> KeyValueWriteReport {
        do {
            try body()
            return KeyValueWriteReport()
        } catch let refusal as KeyValueWriteRefusal {
            if case .limit = refusal { return KeyValueWriteReport(error: refusal.description, quotaViolation: true) }
            return KeyValueWriteReport(error: refusal.description)
        }
    }
}
