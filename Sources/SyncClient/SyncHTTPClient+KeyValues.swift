import AsyncHTTPClient
import Foundation
import ItemModel
import NIOCore
import SyncAPI

/// The container's key-value store (docs/SYNC_PROTOCOL.md, "The key-value store"). Errors are
/// `RemoteError`, as for every other call: a write past a limit is `.refused` with
/// `kv_too_many_keys`, `kv_key_too_long`, `kv_value_too_large` or `kv_store_too_large`; a value
/// that is not one JSON document, `invalid_request`; a `since` ahead of the store's version
/// (another store than the one the caller knew), `invalid_cursor`.
extension SyncHTTPClient {
    /// Every key changed after version `since` (0: every live key), ordered by version, each
    /// value the exact bytes it was written with, and the store's version: pass it as `since`
    /// next time. A removal since `since` is an entry whose `value` is nil.
    public func keyValues(since: Int64 = 0) async throws -> KeyValuePage {
        let (status, body) = try await send(request(.GET, APIPath.keyValues(container) + "?since=\(since)"), deadline: requestDeadline)
        guard status == 200 else { throw failure(status: status, body: body) }
        do { return try KeyValuePage(json: Data(body.readableBytesView)) } catch {
            throw RemoteError.protocolError("cannot read the server's answer as KeyValuePage: \(error)")
        }
    }

    /// Sets `key` to `json`, the bytes of one JSON document (`{"$data":"BASE64"}` for bytes),
    /// sent and kept exactly as given; returns the store's version after the write.
    public func setKeyValue(_ key: String, json: Data) async throws -> Int64 {
        var r = request(.PUT, APIPath.keyValue(container, key))
        r.headers.add(name: "Content-Type", value: "application/json")
        r.body = .bytes(ByteBuffer(bytes: json))
        let (status, body) = try await send(r, deadline: requestDeadline)
        guard status == 200 else { throw failure(status: status, body: body) }
        return try Self.decode(KeyValueWriteAnswer.self, body).version
    }

    /// Removes `key`; returns the store's version after it (unchanged when the key was not
    /// there, which is no error).
    public func removeKeyValue(_ key: String) async throws -> Int64 {
        let answer: KeyValueWriteAnswer = try await call(.DELETE, APIPath.keyValue(container, key), expect: [200])
        return answer.version
    }
}
