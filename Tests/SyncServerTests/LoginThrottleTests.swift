@testable import SyncServer
import Testing

/// The throttle's arithmetic on a clock of its own; `TokenTests` checks it through a real server.
@Suite struct LoginThrottleTests {
    @Test func failuresAreAnsweredLaterAndLaterThenRefusedUntilTheBucketFillsAgain() {
        let throttle = LoginThrottle(failuresPerMinute: 5)
        var delays: [Duration] = []
        for _ in 1...5 {
            #expect(throttle.wait(account: "alice", address: "a") == nil)
            delays.append(throttle.failed(account: "alice", address: "a"))
        }
        #expect(delays == (1...5).map { LoginThrottle.delayPerFailure * $0 }, "\(delays)")
        let wait = throttle.wait(account: "alice", address: "a")
        #expect(wait.map { (1...12).contains($0) } == true, "one failure's worth of a minute: \(String(describing: wait))")
        #expect(throttle.wait(account: "bob", address: "a") == nil, "another account from the same address")
        #expect(throttle.wait(account: "alice", address: "b") != nil, "the account from another address")
    }

    @Test func anAddressGuessingAcrossAccountsIsRefusedToo() {
        let throttle = LoginThrottle(failuresPerMinute: 5)
        for n in 0..<(5 * LoginThrottle.addressFactor) { _ = throttle.failed(account: "user\(n)", address: "a") }
        #expect(throttle.wait(account: "fresh", address: "a") != nil)
        #expect(throttle.wait(account: "fresh", address: "b") == nil)
    }

    @Test func noLimitMeansNoDelayAndNoRefusal() {
        let throttle = LoginThrottle(failuresPerMinute: 0)
        for _ in 0..<50 { #expect(throttle.failed(account: "alice", address: "a") == .zero) }
        #expect(throttle.wait(account: "alice", address: "a") == nil)
    }
}
