import Foundation
import ItemModel
import SyncAPI
import TestSupport
import Testing

/// Tokens that end (expiry, logout, an operator's revocation), the login throttle, and an
/// account's removal: a real server, its real `account` commands, over HTTP.
@Suite struct TokenTests {
    func login(_ live: Live, _ user: String, _ password: String, device: String? = nil) async throws -> TestHTTP {
        let r = try await live.anonymous.json(.POST, APIPath.token, TokenRequest(user: user, password: password, device: device))
        guard r.status == 201 else { throw TestSupportError("login failed: \(r.status) \(r.text)") }
        return TestHTTP(baseURL: live.anonymous.baseURL, token: try r.decode(TokenResponse.self).token)
    }

    @Test func aTokenUsedKeepsLivingPastItsLifetimeAndOneLeftUnusedExpires() async throws {
        try await withLive(extraArguments: ["--token-lifetime", "5s", "--auth-cache-seconds", "0"]) { live in
            let unused = try await login(live, "alice", "alice-pw")
            let used = try await login(live, "alice", "alice-pw")
            let clock = ContinuousClock()
            let start = clock.now
            // Used every half second for longer than the lifetime: each use moves the expiry on.
            while clock.now - start < .seconds(7) {
                let r = try await used.send(.GET, APIPath.whoami)
                #expect(r.status == 200, "a token in use stays valid: \(r.status) \(r.text)")
                try await Task.sleep(for: .milliseconds(500))
            }
            let expired = try await unused.send(.GET, APIPath.whoami)
            #expect(expired.status == 401 && expired.errorCode == .tokenExpired, "\(expired.status) \(expired.text)")
            // Any request with it would renew it: the lifetime passes without one.
            try await Task.sleep(for: .milliseconds(5500))
            let ended = try await used.send(.GET, APIPath.whoami)
            #expect(ended.status == 401 && ended.errorCode == .tokenExpired, "once unused for its lifetime: \(ended.status) \(ended.text)")
            // A new login works at once.
            #expect(try await login(live, "alice", "alice-pw").send(.GET, APIPath.whoami).status == 200)
        }
    }

    @Test func aLogoutRevokesThatTokenAtOnceAndNoOther() async throws {
        // The default auth cache (10 s): the logout must drop the remembered answer too.
        try await withLive { live in
            let first = try await login(live, "alice", "alice-pw")
            let second = try await login(live, "alice", "alice-pw")
            #expect(try await first.send(.GET, APIPath.whoami).status == 200)
            #expect(try await first.send(.DELETE, APIPath.token).status == 204)
            let refused = try await first.send(.GET, APIPath.whoami)
            #expect(refused.status == 401 && refused.errorCode == .unauthorized, "\(refused.text)")
            #expect(try await first.send(.DELETE, APIPath.token).status == 401, "a revoked token cannot log out again")
            #expect(try await second.send(.GET, APIPath.whoami).status == 200)
            #expect(try await live.anonymous.send(.DELETE, APIPath.token).status == 401, "a logout needs a token")
        }
    }

    @Test(.oneServerOnly) func anOperatorListsAnAccountsTokensAndRevokesOneOrAll() async throws {
        try await withLive(extraArguments: ["--auth-cache-seconds", "0"]) { live in
            let laptop = try await login(live, "alice", "alice-pw", device: "laptop")
            let phone = try await login(live, "alice", "alice-pw", device: "phone\u{7}\n")
            let listed = try await live.server.account(["tokens", "alice"]).split(separator: "\n").map { $0.split(separator: "\t").map(String.init) }
            #expect(listed.first == ["ID", "DEVICE", "CREATED", "LAST USE", "EXPIRES"])
            // The harness's own login said no device.
            let rows = listed.dropFirst()
            #expect(rows.map { $0[1] } == ["-", "laptop", "phone"], "devices, oldest first, control characters dropped: \(rows)")
            #expect(rows.allSatisfy { $0[0].count == 12 && $0[0].allSatisfy(\.isHexDigit) })
            #expect(!(try await live.server.account(["tokens", "bob"])).contains("laptop"), "another account's list")

            let laptopID = try #require(rows.first { $0[1] == "laptop" }?[0])
            let revoked = try await live.server.account(["revoke", "alice", laptopID])
            #expect(revoked.contains("revoked \(laptopID) (laptop)"))
            #expect(try await laptop.send(.GET, APIPath.whoami).errorCode == .unauthorized)
            #expect(try await phone.send(.GET, APIPath.whoami).status == 200)
            let unknown = try await run(Binaries.path("ubiq-server"), ["account", "revoke", "alice", "000000000000", "--data", live.server.dataDirectory])
            #expect(unknown.status == 1 && unknown.stderr.contains("has no token 000000000000"), "\(unknown.stderr)")
            _ = try await live.server.account(["revoke", "alice", "--all"])
            #expect(try await phone.send(.GET, APIPath.whoami).errorCode == .unauthorized)
            #expect(try await live.bob.send(.GET, APIPath.whoami).status == 200, "bob's token is not alice's")
        }
    }

    @Test func theSixthWrongPasswordInAMinuteIsRefusedWhateverThePassword() async throws {
        try await withLive { live in
            // On a loaded machine five logins may take more than a minute: then the oldest has
            // left the window, and the next failure is allowed. What holds always: a failure
            // is answered only while fewer than five others lie within the minute before it.
            // `sent`: before each failed attempt left; the server saw it later. An attempt
            // answered 401 was checked with fewer than five failures in the minute before, so it
            // was answered at least a minute after the fifth failure before it was sent.
            let clock = ContinuousClock()
            var sent: [ContinuousClock.Instant] = []
            var refused: TestResponse?
            for attempt in 1...12 {
                let start = clock.now
                let r = try await live.anonymous.json(.POST, APIPath.token, TokenRequest(user: "alice", password: "guess \(attempt)"))
                if r.status == 429 { refused = r; break }
                #expect(r.status == 401 && r.errorCode == .invalidCredentials, "attempt \(attempt): \(r.status)")
                if sent.count >= 5 {
                    #expect(clock.now - sent[sent.count - 5] >= .seconds(60), "attempt \(attempt) answered with five failures in the minute before")
                }
                sent.append(start)
            }
            let answer = try #require(refused, "no 429 after \(sent.count) failures")
            #expect(answer.errorCode == .rateLimited, "\(answer.text)")
            let retryAfter = try #require(Int(answer.headers.first(name: "Retry-After") ?? ""))
            #expect((1...60).contains(retryAfter))
            // The right password is refused too, while the window is full.
            if retryAfter >= 10 {
                #expect(try await live.anonymous.json(.POST, APIPath.token, TokenRequest(user: "alice", password: "alice-pw")).status == 429)
            }
            // Another account from the same address still logs in.
            #expect(try await live.anonymous.json(.POST, APIPath.token, TokenRequest(user: "bob", password: "bob-pw")).status == 201)
            // Tokens already issued are not affected.
            #expect(try await live.alice.send(.GET, APIPath.whoami).status == 200)
        }
    }

    @Test(.oneServerOnly, arguments: [true, false])
    func removingAnAccountDeletesTheContentsOnlyItHeld(serverRunning: Bool) async throws {
        try await withLive { live in
            let own = Data("alice's alone \(serverRunning)".utf8), common = Data("both hold this".utf8)
            let ownFile = try await live.alice.createFile(live.c, name: "own.txt", content: own)
            _ = try await live.alice.createFile(live.c, name: "common.txt", content: common)
            let bobsFile = try await live.bob.createFile(live.c, name: "common.txt", content: common)
            let link = try await live.alice.json(.POST, APIPath.shares(live.c), CreateShareRequest(itemID: ownFile.id))
            #expect(link.status == 201, "\(link.text)")
            let blobs = live.server.dataDirectory + "/blobs/"
            func stored(_ data: Data) -> Bool { FileManager.default.fileExists(atPath: blobs + "\(sha256(data).hex.prefix(2))/\(sha256(data).hex)") }
            #expect(stored(own) && stored(common))

            // Stopped: the command deletes them itself. Running: the server does.
            if !serverRunning { live.server.kill9() }
            let said = try await live.server.account(["remove", "alice"])
            #expect(said.contains("removed account alice: 1 container, 2 items, 0 earlier versions, 1 share, 1 token"), "\(said)")
            if serverRunning {
                #expect(said.contains("the running server deletes 1 content (\(own.count) bytes)"), "\(said)")
                try await eventually("the server to delete the content only alice held") { !stored(own) }
            } else {
                #expect(said.contains("deleted 1 content (\(own.count) bytes)"), "\(said)")
                #expect(!stored(own))
                try await live.server.restart(samePort: true)
            }
            #expect(stored(common), "bob's copy stays")
            #expect(try await live.bob.send(.GET, APIPath.content(live.c, bobsFile.id)).body == common)
        }
    }
}
