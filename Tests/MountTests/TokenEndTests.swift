import Foundation
import SyncAPI
import TestSupport
import Testing

/// A mount whose token ends (a logout here, an operator's revocation, its lifetime): it says so
/// in `ubiq status`, keeps every local change, and goes on after `ubiq login`.
@Suite struct TokenEndTests {
    func loginAgain(_ d: TestDevice) async throws {
        let login = try await d.ubiq(["login", "--server", d.serverURL, "--user", "alice", "--password-stdin"], stdin: "alice-pw\n")
        #expect(login.status == 0, "\(login)")
    }

    func refusal(_ d: TestDevice) async throws -> String {
        try await d.ubiq(["status", "--mount", d.mountpoint]).stdout
    }

    @Test func aLogoutOrARevocationStopsSyncKeepsLocalChangesAndALoginResumes() async throws {
        try await withDevices(["A", "B"], serverArguments: ["--auth-cache-seconds", "0"]) { server, devices in
            let (a, b) = (devices[0], devices[1])
            try await a.must(#"echo before > "$M/before.txt""#)
            try await eventually("before.txt to reach B") { try await b.sh(#"cat "$M/before.txt""#).stdout == "before\n" }

            let out = try await a.ubiq(["logout"])
            #expect(out.status == 0 && out.stdout.contains("logged out of \(a.serverURL)"), "\(out)")
            #expect(try await a.ubiq(["logout"]).stderr.contains("not logged in"))
            try await a.must(#"echo while-out > "$M/while-out.txt""#)
            try await eventually("A to say its token is refused") {
                try await refusal(a).contains("refused the login token (the token is not valid (revoked, or never issued)): run `ubiq login`")
            }
            #expect(try await a.must(#"cat "$M/while-out.txt""#) == "while-out\n", "the local change is kept")
            #expect(try await b.sh(#"test -e "$M/while-out.txt""#).status != 0, "and not sent")
            try await loginAgain(a)
            try await eventually("the change made meanwhile to reach B") { try await b.sh(#"cat "$M/while-out.txt""#).stdout == "while-out\n" }

            // Revoked by the operator, from another process: the same, on both devices.
            _ = try await server.account(["revoke", "alice", "--all"])
            try await a.must(#"echo after-revoke > "$M/after-revoke.txt""#)
            try await eventually("A to say its token is refused again") { try await refusal(a).contains("refused the login token") }
            try await loginAgain(a)
            try await loginAgain(b)
            try await eventually("that change to reach B too") { try await b.sh(#"cat "$M/after-revoke.txt""#).stdout == "after-revoke\n" }
        }
    }

    @Test func anExpiredTokenIsNamedAndALoginResumes() async throws {
        try await withDevices(["A"], serverArguments: ["--auth-cache-seconds", "0"]) { server, devices in
            let a = devices[0]
            try await a.must(#"echo first > "$M/first.txt""#)
            try await eventually("first.txt to go up") { try await a.xattr("first.txt", "user.ubiq.isUploaded") == "1" }
            // The short lifetime only now: with it from the start, a login and mount slower than
            // the lifetime (a loaded machine) let the token end before its first use. Counted
            // from the token's last use, it may have ended already when the mount reconnects
            // (a slow restart); else the mount reconnects and goes idle.
            try await server.restart(samePort: true, extraArguments: ["--auth-cache-seconds", "0", "--token-lifetime", "3s"])
            try await eventually("A to reconnect, or to find its token ended") {
                if try await refusal(a).contains("(the token has expired)") { return true }
                return try await a.status().connected
            }
            // Idle for well past the lifetime: nothing uses the token meanwhile.
            try await Task.sleep(for: .seconds(8))
            try await a.must(#"echo second > "$M/second.txt""#)
            try await eventually("A to say its token expired") { try await refusal(a).contains("(the token has expired): run `ubiq login`") }
            #expect(try await a.xattr("second.txt", "user.ubiq.isUploaded") == "0")
            try await loginAgain(a)
            try await eventually("second.txt to go up after the login") { try await a.xattr("second.txt", "user.ubiq.isUploaded") == "1" }
            #expect(try await a.must(#"cat "$M/first.txt" "$M/second.txt""#) == "first\nsecond\n")
        }
    }
}
