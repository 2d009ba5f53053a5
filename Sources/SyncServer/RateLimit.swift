import Foundation
import Synchronization

/// A token bucket per key (a client address, an account name): `perMinute` a minute, in bursts
/// of up to as many. Buckets that have filled up again are forgotten, so the table holds only the
/// addresses that asked lately.
final class RateLimit: Sendable {
    let perMinute: Int
    private let buckets = Mutex<[String: (tokens: Double, at: ContinuousClock.Instant)]>([:])

    init(perMinute: Int) {
        self.perMinute = perMinute
    }

    /// nil: go ahead (one token taken); else the whole seconds until a token is there again.
    func take(for key: String, now: ContinuousClock.Instant = .now) -> Int? {
        refilled(key, now: now) { bucket, rate in
            guard bucket.tokens >= 1 else { return Self.seconds(until: 1, from: bucket.tokens, rate: rate) }
            bucket.tokens -= 1
            return nil
        }
    }

    /// `take` without taking: nil when a token is there.
    func wait(for key: String, now: ContinuousClock.Instant = .now) -> Int? {
        refilled(key, now: now) { bucket, rate in
            bucket.tokens >= 1 ? nil : Self.seconds(until: 1, from: bucket.tokens, rate: rate)
        }
    }

    /// The tokens the key's bucket lacks, to the nearest whole one.
    func spent(for key: String, now: ContinuousClock.Instant = .now) -> Int {
        refilled(key, now: now) { bucket, _ in Int((Double(perMinute) - bucket.tokens).rounded()) } ?? 0
    }

    static func seconds(until level: Double, from tokens: Double, rate: Double) -> Int {
        Int(((level - tokens) / rate).rounded(.up))
    }

    /// Runs `body` on the key's bucket, filled for the time since it was last seen.
    private func refilled<T>(_ key: String, now: ContinuousClock.Instant, _ body: (inout (tokens: Double, at: ContinuousClock.Instant), Double) -> T?) -> T? {
        guard perMinute > 0 else { return nil }
        let capacity = Double(perMinute), rate = Double(perMinute) / 60
        return buckets.withLock { table in
            var bucket = table[key] ?? (capacity, now)
            let elapsed = now - bucket.at
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            bucket.tokens = min(capacity, bucket.tokens + seconds * rate)
            bucket.at = now
            if table.count > 10_000 { table = table.filter { $0.value.tokens < capacity } }
            let result = body(&bucket, rate)
            table[key] = bucket
            return result
        }
    }
}
