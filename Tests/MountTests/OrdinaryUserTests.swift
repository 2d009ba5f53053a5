import Foundation
import Testing
import TestSupport

/// `ubiq` as ordinary users use it: no root anywhere, the embedded default (no server, no
/// login), and several users of one machine side by side. The root test process only sets the
/// scene; every `ubiq`, `ls` and `cat` runs as the user, through `setpriv`.
@Suite(.serialized) struct OrdinaryUserTests {
    /// As Debian's udev rules leave it: an ordinary user may open /dev/fuse.
    static func openFuseDeviceToEveryone() throws {
        guard chmod("/dev/fuse", 0o666) == 0 else { throw TestSupportError("cannot chmod /dev/fuse: errno \(errno)") }
    }

    static func withUsers(_ body: ([SystemUser]) async throws -> Void) async throws {
        try openFuseDeviceToEveryone()
        let users = try SystemUser.testUserNames.map { try SystemUser($0) }
        do {
            try await body(users)
        } catch {
            var text = "\(error)"
            for u in users {
                let log = (try? await u.sh("tail -n 15 ~/.local/share/ubiq/server.log ~/.cache/ubiq/mounts/*/daemon.log 2>&1"))?.stdout ?? ""
                text += "\n[\(u.name)] \(log)"
            }
            for u in users { await u.clean() }
            throw TestSupportError(text)
        }
        for u in users { await u.clean() }
    }

    @Test(.enabled(if: geteuid() == 0, "acts as two users with setpriv"))
    func twoUsersEachMountTheirOwnEmbeddedServerSideBySide() async throws {
        try await Self.withUsers { users in
            let (a, b) = (users[0], users[1])
            for u in users {
                #expect(try await u.must(#"mkdir Cloud && "$UBIQ" mount Cloud"#) == "mounted \(u.home)/Cloud\n")
            }
            for u in users {
                // The mount is the user's own: the root folder included.
                #expect(try await u.must("stat -c '%u %g %a' Cloud") == "\(u.uid) \(u.gid) 755\n")
                try await u.must("echo \(u.name) > Cloud/mine.txt && mkdir Cloud/d && echo deep > Cloud/d/x && mv Cloud/mine.txt Cloud/\(u.name).txt")
                #expect(try await u.must("stat -c '%U' Cloud/\(u.name).txt Cloud/d") == "\(u.name)\n\(u.name)\n")
            }
            // Each sees only their own files: two servers, two containers.
            for u in users {
                #expect(try await u.must("ls Cloud") == "d\n\(u.name).txt\n")
                try await eventually(timeout: waitLimit, "\(u.name)'s files to reach their server") {
                    try await u.must(#""$UBIQ" status --json --mount Cloud"#).contains(#""pendingUploads":0"#)
                }
            }
            let statusA = try await a.must(#""$UBIQ" server status"#)
            let statusB = try await b.must(#""$UBIQ" server status"#)
            #expect(statusA.contains("address: unix:\(a.home)/.local/share/ubiq/server/server.sock"), "\(statusA)")
            #expect(statusB.contains("address: unix:\(b.home)/.local/share/ubiq/server/server.sock"), "\(statusB)")
            #expect(statusA.contains("mounts:  \(a.home)/Cloud"), "\(statusA)")
            // Each user's server runs as that user and is theirs alone: the other user cannot
            // even reach its socket.
            for (u, other) in [(a, b), (b, a)] {
                let pid = try #require(try await u.must(#""$UBIQ" server status --json"#).firstMatch(of: /"pid":(\d+)/)).1
                let owner = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8).split(separator: "\n").first { $0.hasPrefix("Uid:") }
                #expect(owner?.split(separator: "\t").dropFirst().first.map(String.init) == "\(u.uid)")
                #expect(try await u.must("stat -c %a .local/share/ubiq/server .local/share/ubiq/server/server.sock") == "700\n700\n")
                let intruder = try await other.sh(#"echo guess | "$UBIQ" login --server unix:\#(u.home)/.local/share/ubiq/server/server.sock --user local --password-stdin"#)
                // Refused at the socket, not by the password: the other user never reaches the server.
                #expect(intruder.status == 1 && intruder.stderr.contains("cannot reach"), "\(intruder)")
            }

            // A unmounts: the server stays, and says so; B goes on undisturbed.
            let unmounted = try await a.must(#""$UBIQ" unmount Cloud"#)
            #expect(unmounted.contains("unmounted \(a.home)/Cloud\nthe embedded server keeps running"), "\(unmounted)")
            #expect(unmounted.contains("`ubiq server stop` stops it"))
            try await b.must("echo more > Cloud/more.txt && cat Cloud/more.txt Cloud/d/x")
            try await eventually(timeout: waitLimit, "b's new file to reach b's server") {
                let status = try await b.must(#""$UBIQ" status --mount Cloud"#)
                return status.contains("(connected)") && status.contains("uploads:   0 pending")
            }

            // A mounts again (a fresh cache: the files come from A's server, as placeholders).
            try await a.must(#""$UBIQ" mount Cloud --cache ~/.cache/second"#)
            // The mount is usable at once; its listing fills as it catches up with the server.
            try await eventually(timeout: waitLimit, "a's files to be listed in its new mount") {
                try await a.must("ls Cloud") == "d\n\(a.name).txt\n"
            }
            #expect(try await a.must("cat Cloud/d/x Cloud/\(a.name).txt") == "deep\n\(a.name)\n")
            // B unmounts; A goes on.
            try await b.must(#""$UBIQ" unmount Cloud"#)
            try await a.must("echo again > Cloud/again.txt && cat Cloud/again.txt")
            try await eventually(timeout: waitLimit, "a's new file to reach a's server") {
                try await a.must(#""$UBIQ" status --mount Cloud"#).contains("uploads:   0 pending")
            }
            let last = try await a.must(#""$UBIQ" unmount Cloud"#)
            #expect(last.contains("the embedded server keeps running"), "\(last)")

            // Stopping: each user stops their own server; a second stop says there is none.
            for u in users {
                let pid = try #require(try await u.must(#""$UBIQ" server status --json"#).firstMatch(of: /"pid":(\d+)/)).1
                #expect(try await u.must(#""$UBIQ" server stop"#) == "stopped the embedded server (pid \(pid))\n")
                // Gone, or a zombie its parent (whoever adopted it) has not reaped yet.
                let state = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8))?.split(separator: "\n").first { $0.hasPrefix("State:") }
                #expect(state == nil || state!.contains("Z"), "\(state ?? "")")
                #expect(try await u.must(#""$UBIQ" server stop"#) == "the embedded server is not running\n")
            }
            // The next mount starts it again, on the same address, with the same files.
            try await b.must(#""$UBIQ" mount Cloud"#)
            #expect(try await b.must("cat Cloud/more.txt Cloud/\(b.name).txt") == "more\n\(b.name)\n")
            try await b.must(#""$UBIQ" unmount Cloud && "$UBIQ" server stop"#)
        }
    }

    /// A user's first two mounts at once (a login session starting two): one server, one
    /// local account, both mounts on it.
    @Test(.enabled(if: geteuid() == 0, "acts as another user with setpriv"))
    func twoFirstMountsAtOnceShareOneServerAndAccount() async throws {
        try await Self.withUsers { users in
            let u = users[0]
            let both = try await u.sh(#"mkdir Cloud Cloud2 && { "$UBIQ" mount Cloud & one=$!; "$UBIQ" mount Cloud2 --cache ~/.cache/two & two=$!; wait $one && wait $two; }"#)
            #expect(both.status == 0, "\(both)")
            try await u.must("echo one > Cloud/one.txt")
            try await eventually(timeout: waitLimit, "the file to reach the other mount") {
                (try await u.sh("cat Cloud2/one.txt")).stdout == "one\n"
            }
            try await u.must(#""$UBIQ" unmount Cloud && "$UBIQ" unmount Cloud2 && "$UBIQ" server stop"#)
        }
    }

    @Test(.enabled(if: geteuid() == 0, "acts as another user with setpriv"),
          .enabled(if: !FuseConfiguration.allowsOthers, "/etc/fuse.conf already has user_allow_other"))
    func allowOtherSaysWhatAnOrdinaryUserLacks() async throws {
        try Self.openFuseDeviceToEveryone()
        let user = try SystemUser(SystemUser.testUserNames[0])
        let r = try await user.sh(#"mkdir Cloud && "$UBIQ" mount Cloud --allow-other"#)
        // Refused before anything started: no server, no mount.
        let server = try await user.sh(#""$UBIQ" server status"#)
        await user.clean()
        #expect(r.status == 1)
        #expect(r.stderr.contains("--allow-other needs the line user_allow_other in /etc/fuse.conf"), "\(r.stderr)")
        #expect(server.stdout.contains("server:  not running"), "\(server)")
    }
}

enum FuseConfiguration {
    static var allowsOthers: Bool {
        let text = (try? String(contentsOfFile: "/etc/fuse.conf", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").contains { $0.trimmingCharacters(in: .whitespaces) == "user_allow_other" }
    }
}
