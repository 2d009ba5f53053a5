import Foundation
@testable import SyncServer
import SyncAPI
import Synchronization
import TestSupport
import Testing

/// The remembered token and grant answers: the unit, on a clock the test moves, then a real
/// server and a real `account remove` beside it.
@Suite struct RecentAnswersTests {
    final class Clock: Sendable {
        let start = ContinuousClock.now
        let offset = Mutex<Duration>(.zero)
        var now: ContinuousClock.Instant { start + offset.withLock { $0 } }
        func advance(_ d: Duration) { offset.withLock { $0 += d } }
    }

    final class Counter: Sendable {
        let calls = Mutex(0)
        func lookUp(_ answer: String?) -> String? {
            calls.withLock { $0 += 1 }
            return answer
        }
        var count: Int { calls.withLock { $0 } }
    }

    @Test func anAnswerIsKeptForItsLifetimeOnly() async throws {
        let clock = Clock()
        let recent = RecentAnswers<String, String>(lifetime: .seconds(10), now: { clock.now })
        let db = Counter()
        #expect(try await recent.value(for: "t") { db.lookUp("alice") } == "alice")
        clock.advance(.seconds(9))
        #expect(try await recent.value(for: "t") { db.lookUp("changed") } == "alice")
        #expect(db.count == 1)
        clock.advance(.seconds(1))
        #expect(try await recent.value(for: "t") { db.lookUp(nil) } == nil)
        #expect(db.count == 2)
    }

    @Test func aMissIsNeverKeptAndLifetimeZeroKeepsNothing() async throws {
        let db = Counter()
        let recent = RecentAnswers<String, String>(lifetime: .seconds(10))
        #expect(try await recent.value(for: "t") { db.lookUp(nil) } == nil)
        #expect(try await recent.value(for: "t") { db.lookUp("alice") } == "alice")
        #expect(db.count == 2)
        let never = RecentAnswers<String, String>(lifetime: .zero)
        for _ in 0..<3 { _ = try await never.value(for: "t") { db.lookUp("alice") } }
        #expect(db.count == 5 && never.count == 0)
    }

    @Test func aFullTableDropsExpiredAnswersFirstThenStartsAfresh() async throws {
        let clock = Clock()
        let recent = RecentAnswers<Int, Int>(lifetime: .seconds(10), capacity: 4, now: { clock.now })
        for k in 0..<2 { _ = try await recent.value(for: k) { k } }
        clock.advance(.seconds(11))
        for k in 2..<4 { _ = try await recent.value(for: k) { k } }
        #expect(recent.count == 4)
        _ = try await recent.value(for: 4) { 4 }
        #expect(recent.count == 3, "the two expired answers made room")
        _ = try await recent.value(for: 5) { 5 }
        _ = try await recent.value(for: 6) { 6 }
        #expect(recent.count == 1, "full of live answers: only the newest is kept")
    }

    @Test func aRemovedAccountsTokenIsRefusedAtOnceWithoutTheCache() async throws {
        try await withLive(extraArguments: ["--auth-cache-seconds", "0"]) { live in
            #expect(try await live.alice.send(.GET, APIPath.containers).status == 200)
            try await live.server.removeAccount("alice")
            #expect(try await live.alice.send(.GET, APIPath.containers).errorCode == .unauthorized)
            #expect(try await live.bob.send(.GET, APIPath.containers).status == 200)
        }
    }

    @Test func aRemovedAccountsTokenIsRefusedWithinTheCachesLifetime() async throws {
        try await withLive(extraArguments: ["--auth-cache-seconds", "1"]) { live in
            #expect(try await live.alice.send(.GET, APIPath.containers).status == 200)
            try await live.server.removeAccount("alice")
            try await eventually(timeout: .seconds(5), "alice's token to be refused") {
                try await live.alice.send(.GET, APIPath.containers).errorCode == .unauthorized
            }
        }
    }
}
