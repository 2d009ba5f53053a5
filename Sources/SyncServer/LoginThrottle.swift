import Foundation
import Synchronization

/// Failed logins, per account name and per client address, over the last minute: with
/// `failuresPerMinute` failures of an account in the last 60 s (an address: `addressFactor`
/// times as many), every login for it is refused before its password is checked (429 with
/// `Retry-After`, until the oldest of them is a minute old), whatever the password. A failure
/// is answered late, the later the more failures its account has in the window, so that
/// guessing is slow long before it is refused. An address gets more room because one address
/// may serve many users (a NAT); it is the account's count that stops guessing of one password.
struct LoginThrottle: Sendable {
    let accounts: FailureWindow
    let addresses: FailureWindow
    static let addressFactor = 4
    /// The delay of a failure per failure of its account in the window.
    static let delayPerFailure: Duration = .milliseconds(200)

    init(failuresPerMinute: Int) {
        accounts = FailureWindow(limit: failuresPerMinute)
        addresses = FailureWindow(limit: failuresPerMinute * Self.addressFactor)
    }

    /// Seconds until a login may be tried again, or nil: go ahead.
    func wait(account: String, address: String, now: ContinuousClock.Instant = .now) -> Int? {
        [accounts.wait(for: account, now: now), addresses.wait(for: address, now: now)].compactMap { $0 }.max()
    }

    /// Records a failure; returns how long its answer is held back.
    func failed(account: String, address: String, now: ContinuousClock.Instant = .now) -> Duration {
        addresses.record(address, now: now)
        return Self.delayPerFailure * accounts.record(account, now: now)
    }
}

/// The times of each key's failures within the last `window`, at most `limit` of them.
final class FailureWindow: Sendable {
    let limit: Int
    let window: Duration = .seconds(60)
    private let failures = Mutex<[String: [ContinuousClock.Instant]]>([:])

    init(limit: Int) {
        self.limit = limit
    }

    /// Seconds until the key's oldest failure in the window leaves it, when it holds `limit`;
    /// nil: go ahead. With no limit, always nil.
    func wait(for key: String, now: ContinuousClock.Instant) -> Int? {
        guard limit > 0 else { return nil }
        return failures.withLock { table in
            let recent = Self.within(table[key] ?? [], window, of: now)
            guard recent.count >= limit, let oldest = recent.first else { return nil }
            let left = oldest + window - now
            return max(1, Int(left.components.seconds) + (left.components.attoseconds > 0 ? 1 : 0))
        }
    }

    /// Adds a failure; returns how many the key has in the window now (0 with no limit).
    @discardableResult
    func record(_ key: String, now: ContinuousClock.Instant) -> Int {
        guard limit > 0 else { return 0 }
        return failures.withLock { table in
            // A table of many keys keeps only those with a failure in the window.
            if table.count > 10_000 { table = table.filter { ($0.value.last.map { now - $0 < window }) ?? false } }
            var recent = Self.within(table[key] ?? [], window, of: now)
            recent.append(now)
            // More than `limit` never matter: a login is refused from `limit` on.
            if recent.count > limit { recent.removeFirst(recent.count - limit) }
            table[key] = recent
            return recent.count
        }
    }

    static func within(_ times: [ContinuousClock.Instant], _ window: Duration, of now: ContinuousClock.Instant) -> [ContinuousClock.Instant] {
        Array(times.drop { now - $0 >= window })
    }
}
