import Foundation
import Logging
import PostgresNIO
import Synchronization

/// Commits announced between the server processes (replicas) of one PostgreSQL database, with
/// `NOTIFY` and `LISTEN` on the channel `ubiq_commits`. ubiq-server makes it SyncService's
/// `CommitAnnouncer`.
///
/// One notice per batch, not per commit: announcements wait in a set while a `NOTIFY` is on
/// its way, and the next one carries them all (one notice per row cut an 8-client insert rate
/// by two thirds here; a batched one 200 times a second cost under a fifth). A notice carries
/// container keys only, never a change: a replica woken by it reads the change log from each
/// stream's cursor. The listening connection is its own, not the pool's; when it is lost, the
/// announcements wait for a new one, and the first thing said after it is nil (some may have
/// been missed), so every stream reads again: nothing is taken on trust.
public final class PostgresAnnouncements: Sendable {
    public static let channel = "ubiq_commits"
    /// A payload stays under PostgreSQL's 8,000-byte limit.
    static let payloadLimit = 7_900

    let configuration: PostgresConfiguration
    let client: PostgresClient
    let logger: Logger
    /// Tells this process's notices from the others': its own come back to it too.
    let sender = UUID().uuidString
    private let pending = Mutex<(keys: Set<Int64>, sending: Bool)>(([], false))

    /// `store`'s pool sends the notices; the listening connection is made from `configuration`.
    public init(store: PostgresMetadataStore, configuration: PostgresConfiguration, logger: Logger = Logger(label: "ubiq.postgres.announcements")) {
        self.configuration = configuration
        self.client = store.client
        self.logger = logger
    }

    public func announce(container: Int64) {
        let start = pending.withLock { state -> Bool in
            state.keys.insert(container)
            guard !state.sending else { return false }
            state.sending = true
            return true
        }
        if start { Task { await sendWhilePending() } }
    }

    /// Sends what is pending, then what came meanwhile, until nothing is.
    func sendWhilePending() async {
        while true {
            let keys = pending.withLock { state -> [Int64] in
                let keys = Array(state.keys)
                state.keys.removeAll()
                if keys.isEmpty { state.sending = false }
                return keys
            }
            if keys.isEmpty { return }
            for payload in Self.payloads(sender: sender, keys: keys) {
                do {
                    try await client.query("SELECT pg_notify(\(Self.channel), \(payload))", logger: logger)
                } catch {
                    // The others then hear of it at their next reconnection's wake-up, or from
                    // the next notice about this container; the commit itself stands.
                    logger.warning("cannot announce a commit to the other servers", metadata: ["error": "\(String(reflecting: error))"])
                }
            }
        }
    }

    static func payloads(sender: String, keys: [Int64]) -> [String] {
        var payloads: [String] = []
        var current = sender + " "
        var count = 0
        for key in keys.sorted() {
            let text = (count == 0 ? "" : ",") + String(key)
            if current.utf8.count + text.utf8.count > payloadLimit {
                payloads.append(current)
                current = sender + " " + String(key)
                count = 1
            } else {
                current += text
                count += 1
            }
        }
        if count > 0 { payloads.append(current) }
        return payloads
    }

    /// The other processes' announcements, until the task that reads them is cancelled.
    public func announcements() -> AsyncStream<Int64?> {
        AsyncStream { continuation in
            let task = Task {
                var connected = false
                while !Task.isCancelled {
                    do {
                        let connection = try await PostgresConnection.connect(
                            configuration: try PostgresMetadataStore.connectionConfiguration(configuration), id: 1, logger: logger)
                        defer { Task { try? await connection.close() } }
                        try await connection.listen(on: Self.channel) { notices in
                            // Listening again: what was said meanwhile may be lost.
                            if connected { continuation.yield(nil) }
                            connected = true
                            for try await notice in notices {
                                let (from, keys) = Self.parse(notice.payload)
                                guard from != sender else { continue }
                                for key in keys { continuation.yield(key) }
                            }
                        }
                    } catch {
                        if Task.isCancelled { break }
                        logger.warning("lost the connection that hears other servers' commits; connecting again", metadata: ["error": "\(String(reflecting: error))"])
                        try? await Task.sleep(for: .seconds(1))
                    }
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    static func parse(_ payload: String) -> (sender: Substring, keys: [Int64]) {
        let parts = payload.split(separator: " ", maxSplits: 1)
        guard parts.count == 2 else { return (parts.first ?? "", []) }
        return (parts[0], parts[1].split(separator: ",").compactMap { Int64($0) })
    }
}
