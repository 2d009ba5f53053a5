import Foundation
import Hummingbird
import ItemModel
import NIOCore
import ServerStorage
import ServiceLifecycle
import SyncAPI
import SyncService

/// The push stream: Server-Sent Events carrying a container's change log as it grows.
///
/// The stream first sends every change after `since` (the catch-up), then one `ready` event,
/// then one `kv` event with the version of the container's key-value store, then each new
/// change as soon as it commits, and a `kv` event whenever the key-value version moved (read
/// after the item changes at each wake-up: a burst of writes may come as one). Between changes
/// an idle stream sends a comment line every `keepAlive`, so a vanished client is noticed at
/// the next write. Before each wake-up's writes the caller's token is checked again
/// (`stillAuthorized`): a stream whose token was revoked or expired ends, and its client's next
/// request is refused.
struct PushStream: Sendable {
    let feed: ChangeFollower
    let keepAlive: Duration
    let stillAuthorized: @Sendable () async -> Bool

    enum Event: Sendable {
        case changed
        case keepAlive
    }

    func response() -> Response {
        let headers: HTTPFields = [.contentType: "text/event-stream", .cacheControl: "no-store"]
        return Response(status: .ok, headers: headers, body: ResponseBody { writer in
            let subscription = feed.subscribe()
            defer { subscription.close() }
            let (events, sink) = AsyncStream<Event>.makeStream(bufferingPolicy: .bufferingNewest(4))
            try await withGracefulShutdownHandler {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for await _ in subscription.signals { sink.yield(.changed) }
                        sink.finish()
                    }
                    group.addTask {
                        while !Task.isCancelled {
                            try await Task.sleep(for: keepAlive)
                            sink.yield(.keepAlive)
                        }
                    }
                    var cursor = try await sendChanges(after: feed.since, to: &writer)
                    try await writer.write(Self.event("ready", id: nil, data: try JSONEncoder().encode(StreamReady(cursor: cursor))))
                    // Read after subscribing: a write that commits from here on wakes the stream.
                    var keyValues = try await sendKeyValueVersion(after: nil, to: &writer)
                    for await event in events {
                        guard await stillAuthorized() else { break }
                        switch event {
                        case .changed:
                            cursor = try await sendChanges(after: cursor, to: &writer)
                            keyValues = try await sendKeyValueVersion(after: keyValues, to: &writer)
                        case .keepAlive: try await writer.write(ByteBuffer(string: ": keep-alive\n\n"))
                        }
                    }
                    group.cancelAll()
                }
            } onGracefulShutdown: {
                subscription.close()
            }
            try await writer.finish(nil)
        })
    }

    /// One write per page of the log.
    func sendChanges(after start: ChangeCursor, to writer: inout any ResponseBodyWriter) async throws -> ChangeCursor {
        let encoder = JSONEncoder()
        return try await feed.send(after: start) { changes in
            var buffer = ByteBuffer()
            for change in changes {
                buffer.writeImmutableBuffer(Self.event("change", id: change.cursor.rawValue, data: try encoder.encode(change)))
            }
            try await writer.write(buffer)
        }
    }

    /// A `kv` event with the store's version, unless it is still `sent`; returns the version.
    func sendKeyValueVersion(after sent: Int64?, to writer: inout any ResponseBodyWriter) async throws -> Int64 {
        let version = try await feed.keyValueVersion()
        if version != sent {
            try await writer.write(Self.event("kv", id: nil, data: try JSONEncoder().encode(StreamKeyValues(version: version))))
        }
        return version
    }

    static func event(_ name: String, id: String?, data: Data) -> ByteBuffer {
        var buffer = ByteBuffer()
        if let id { buffer.writeString("id: \(id)\n") }
        buffer.writeString("event: \(name)\ndata: ")
        buffer.writeBytes(data)
        buffer.writeString("\n\n")
        return buffer
    }
}
