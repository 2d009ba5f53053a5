@testable import SyncServer
import Testing

/// The throttle's arithmetic on instants the test chooses; `TokenTests` checks it through a real server.
@Suite struct LoginThrottleTests {
    let t0 = ContinuousClock.now

    @Test func theSixthFailureWithinAMinuteIsRefusedUntilTheFirstIsAMinuteOld() {
        let throttle = LoginThrottle(failuresPerMinute: 5)
        var delays: [Duration] = []
        for n in 0..<5 {
            let at = t0 + .seconds(10 * n)
            #expect(throttle.wait(account: "alice", address: "a", now: at) == nil)
            delays.append(throttle.failed(account: "alice", address: "a", now: at))
        }
        #expect(delays == (1...5).map { LoginThrottle.delayPerFailure * $0 }, "later failures are answered later: \(delays)")
        #expect(throttle.wait(account: "alice", address: "a", now: t0 + .seconds(41)) == 19, "until the first failure is a minute old")
        #expect(throttle.wait(account: "alice", address: "a", now: t0 + .seconds(60)) == nil, "then one more may be tried")
        #expect(throttle.wait(account: "bob", address: "a", now: t0 + .seconds(41)) == nil, "another account from the same address")
        #expect(throttle.wait(account: "alice", address: "b", now: t0 + .seconds(41)) != nil, "the account from another address")
    }

    @Test func failuresSpreadOverMoreThanAMinuteAreNeverRefused() {
        let throttle = LoginThrottle(failuresPerMinute: 5)
        for n in 0..<30 {
            let at = t0 + .seconds(13 * n)
            #expect(throttle.wait(account: "alice", address: "a", now: at) == nil, "failure \(n)")
            _ = throttle.failed(account: "alice", address: "a", now: at)
        }
    }

    @Test func anAddressGuessingAcrossAccountsIsRefusedToo() {
        let throttle = LoginThrottle(failuresPerMinute: 5)
        for n in 0..<(5 * LoginThrottle.addressFactor) { _ = throttle.failed(account: "user\(n)", address: "a", now: t0) }
        #expect(throttle.wait(account: "fresh", address: "a", now: t0 + .seconds(1)) != nil)
        #expect(throttle.wait(account: "fresh", address: "b", now: t0 + .seconds(1)) == nil)
    }

    @Test func noLimitMeansNoDelayAndNoRefusal() {
        let throttle = LoginThrottle(failuresPerMinute: 0)
        for _ in 0..<50 { #expect(throttle.failed(account: "alice", address: "a", now: t0) == .zero) }
        #expect(throttle.wait(account: "alice", address: "a", now: t0) == nil)
    }
}
