import Foundation
import Synchronization

/// A token bucket per key (a client address, an account): `perMinute` requests a minute, in
/// bursts of up to as many. Buckets that have filled up again are forgotten, so the table
/// holds only the keys that asked lately.
final class RateLimit: Sendable {
    let perMinute: Int
    private let buckets = Mutex<[String: (tokens: Double, at: ContinuousClock.Instant)]>([:])

    init(perMinute: Int) {
        self.perMinute = perMinute
    }

    /// nil: go ahead (one token taken); else the whole seconds until a token is there again.
    func take(for key: String, now: ContinuousClock.Instant = .now) -> Int? {
        guard perMinute > 0 else { return nil }
        let capacity = Double(perMinute), rate = Double(perMinute) / 60
        return buckets.withLock { table in
            var bucket = table[key] ?? (capacity, now)
            let elapsed = now - bucket.at
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            bucket.tokens = min(capacity, bucket.tokens + seconds * rate)
            bucket.at = now
            if table.count > 10_000 { table = table.filter { $0.value.tokens < capacity } }
            guard bucket.tokens >= 1 else {
                table[key] = bucket
                return Int(((1 - bucket.tokens) / rate).rounded(.up))
            }
            bucket.tokens -= 1
            table[key] = bucket
            return nil
        }
    }
}
