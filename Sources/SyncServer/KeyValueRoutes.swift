import Foundation
import HTTPTypes
import Hummingbird
import ItemModel
import NIOCore
import ServerStorage
import SyncAPI
import SyncService

extension SyncServer {
    /// `/v1/containers/{container}/kv`: the container's key-value store, read from a version,
    /// and one key set or removed. The key is the path's last segment, percent-encoded.
    func addKeyValueRoutes(to router: Router<ServerContext>) {
        router.get("/v1/containers/:container/kv") { request, context in
            let c = try await container(context)
            let page = try await c.keyValues(since: request.uri.queryParameters["since"].map(String.init))
            // Written by hand, not encoded: each value goes out as the bytes it came in as.
            return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: try page.json())))
        }
        router.put("/v1/containers/:container/kv/:key") { request, context in
            let c = try await container(context)
            let key = try keyValueKey(context)
            return try json(try await c.setKeyValue(key, json: try await keyValueBody(request)))
        }
        router.delete("/v1/containers/:container/kv/:key") { _, context in
            let c = try await container(context)
            return try json(try await c.removeKeyValue(try keyValueKey(context)))
        }
        // `…/kv/` with nothing after it: the router drops the empty segment, and the empty
        // key is refused like any key that is not 1 to 64 bytes.
        router.put("/v1/containers/:container/kv") { _, context -> Response in
            _ = try await container(context)
            throw APIError(KeyValueRefusal.keyLength(0))
        }
        router.delete("/v1/containers/:container/kv") { _, context -> Response in
            _ = try await container(context)
            throw APIError(KeyValueRefusal.keyLength(0))
        }
    }

    /// The key's bytes: the router leaves a segment percent-encoded, so `%2F` is a slash in the
    /// key, not between segments.
    func keyValueKey(_ context: ServerContext) throws -> [UInt8] {
        let raw = try context.parameters.require("key")
        guard let bytes = PercentEncoding.decode(raw) else {
            throw APIError(.invalidRequest, "the key in the path is not percent-encoded well: '%' must come with two hex digits")
        }
        return bytes
    }

    /// A value is the whole body: up to one byte more than a value may have, so that a longer
    /// one is answered with its own code rather than as a body too large.
    func keyValueBody(_ request: Request) async throws -> Data {
        var request = request
        do {
            return Data(try await request.collectBody(upTo: KeyValueLimits.maxValueBytes).readableBytesView)
        } catch is NIOTooManyBytesError {
            if let length = request.headers[.contentLength].flatMap({ Int($0) }) { throw APIError(KeyValueRefusal.valueSize(length)) }
            throw APIError(.kvValueTooLarge, "a value is at most \(KeyValueLimits.maxValueBytes) bytes; this one is longer; nothing was stored")
        }
    }
}

/// `%XX` escapes in a URL path segment, to bytes; nil when a `%` lacks its two hex digits.
enum PercentEncoding {
    static func decode(_ text: String) -> [UInt8]? {
        var out: [UInt8] = []
        var bytes = text.utf8.makeIterator()
        while let b = bytes.next() {
            guard b == UInt8(ascii: "%") else {
                out.append(b)
                continue
            }
            guard let high = bytes.next().flatMap(hexValue), let low = bytes.next().flatMap(hexValue) else { return nil }
            out.append(high << 4 | low)
        }
        return out
    }

    static func hexValue(_ b: UInt8) -> UInt8? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): b - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): b - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): b - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
