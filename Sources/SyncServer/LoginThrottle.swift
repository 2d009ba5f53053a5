import Foundation

/// Failed logins, per account name and per client address: each failure takes a token from a
/// bucket that fills again at its rate (`RateLimit`). A login with a bucket empty is refused
/// before its password is checked (429 with `Retry-After`), whatever the password; a failure
/// is answered late, the later the emptier its bucket, so that guessing is slow long before
/// it is refused. An address gets `addressFactor` times an account's allowance: one address
/// may serve many users (a NAT), and it is the account's bucket that stops guessing of one
/// password.
struct LoginThrottle: Sendable {
    let accounts: RateLimit
    let addresses: RateLimit
    static let addressFactor = 4
    /// The delay of a failure per token its bucket has lost.
    static let delayPerFailure: Duration = .milliseconds(200)

    init(failuresPerMinute: Int) {
        accounts = RateLimit(perMinute: failuresPerMinute)
        addresses = RateLimit(perMinute: failuresPerMinute * Self.addressFactor)
    }

    /// Seconds until a login may be tried again, or nil: go ahead.
    func wait(account: String, address: String) -> Int? {
        [accounts.wait(for: account), addresses.wait(for: address)].compactMap { $0 }.max()
    }

    /// Records a failure; returns how long its answer is held back.
    func failed(account: String, address: String) -> Duration {
        _ = accounts.take(for: account)
        _ = addresses.take(for: address)
        return Self.delayPerFailure * accounts.spent(for: account)
    }
}
