import Foundation
import ItemModel
import SyncAPI
import TestSupport
import Testing

@Suite struct IdentityTests {
    @Test func everyAccountHasItsOwnIdentityAndOnlyATokenShowsIt() async throws {
        try await withLive { live in
            let alice = try await live.alice.send(.GET, APIPath.whoami).decode(WhoAmI.self)
            let bob = try await live.bob.send(.GET, APIPath.whoami).decode(WhoAmI.self)
            #expect(alice.account == "alice" && bob.account == "bob")
            #expect(alice.identity.count == 64 && alice.identity.allSatisfy { $0.isHexDigit && !$0.isUppercase }, "\(alice.identity)")
            #expect(alice.identity != bob.identity)
            #expect(!alice.identity.contains("alice"))
            let anonymous = try await live.anonymous.send(.GET, APIPath.whoami)
            #expect(anonymous.status == 401 && anonymous.errorCode == .unauthorized)
        }
    }

    /// The identity is the account's, not the address's or the login's: a device that names the
    /// server otherwise, or logged in again, sees the same one.
    @Test(.oneServerOnly) func theSameThroughEveryAddressAndTokenAndAfterARestart() async throws {
        try await withServer { server in
            try await server.addAccount("alice", password: "pw")
            let first = try await TestHTTP(baseURL: server.baseURL).login("alice", "pw")
            let byName = try await TestHTTP(baseURL: "http://localhost:\(server.port)").login("alice", "pw")
            #expect(first.token != byName.token)
            let identity = try await first.send(.GET, APIPath.whoami).decode(WhoAmI.self).identity
            #expect(try await byName.send(.GET, APIPath.whoami).decode(WhoAmI.self).identity == identity)
            #expect(try await TestHTTP(baseURL: "http://localhost:\(server.port)", token: first.token).send(.GET, APIPath.whoami).decode(WhoAmI.self).identity == identity)

            let list = try await run(Binaries.path("ubiq-server"), ["account", "list", "--identities", "--data", server.dataDirectory])
            #expect(list.status == 0 && list.stdout.split(separator: "\n") == ["alice \(identity)"], "\(list.stdout)")

            server.kill9()
            try await server.restart()
            let after = TestHTTP(baseURL: server.baseURL, token: first.token)
            #expect(try await after.send(.GET, APIPath.whoami).decode(WhoAmI.self) == WhoAmI(account: "alice", identity: identity))
        }
    }

    /// Not derived from the name: an account removed and added again is another account.
    @Test func anAccountAddedAgainUnderItsNameHasANewIdentity() async throws {
        try await withServer { server in
            try await server.addAccount("alice", password: "pw")
            let before = try await TestHTTP(baseURL: server.baseURL).login("alice", "pw").send(.GET, APIPath.whoami).decode(WhoAmI.self)
            try await server.removeAccount("alice")
            try await server.addAccount("alice", password: "pw")
            let after = try await TestHTTP(baseURL: server.baseURL).login("alice", "pw").send(.GET, APIPath.whoami).decode(WhoAmI.self)
            #expect(after.account == "alice" && after.identity != before.identity)
        }
    }
}
