import Foundation
import TestSupport
import Testing

@Suite(.serialized) struct ConvergenceTests {
    /// A burst of random operations with ordinary tools on A; once quiet, A, B and the server
    /// show the same tree with the same contents. Seed 185613194605029668 swaps two names
    /// through a third, which once kept A's outbox from ever draining.
    @Test(arguments: [UInt64(11), 185613194605029668, UInt64.random(in: 1...UInt64.max)])
    func aRandomBurstConverges(seed: UInt64) async throws {
        try await withDevices(["A", "B"]) { server, devices in
            let (a, b) = (devices[0], devices[1])
            var rng = SeededGenerator(seed: seed)
            var script = "set -e; cd \"$M\"; mkdir -p d0 d1 d2\n"
            let names = ["a", "b", "c", "d", "e"]
            for step in 0..<120 {
                let dir = "d\(rng.next() % 3)"
                let name = names[Int(rng.next() % UInt64(names.count))]
                let other = "d\(rng.next() % 3)/" + names[Int(rng.next() % UInt64(names.count))]
                switch rng.next() % 7 {
                case 0, 1: script += "head -c \(rng.next() % 20000) /dev/urandom > \(dir)/\(name)\n"
                case 2: script += "[ -f \(dir)/\(name) ] && echo step\(step) >> \(dir)/\(name) || true\n"
                case 3: script += "[ -f \(dir)/\(name) ] && mv -f \(dir)/\(name) \(other) || true\n"
                case 4: script += "rm -f \(dir)/\(name)\n"
                case 5: script += "mkdir -p \(dir)/sub\(step % 2) && echo x > \(dir)/sub\(step % 2)/f\n"
                default: script += "[ -d \(dir)/sub0 ] && rm -rf \(dir)/sub0 || true\n"
                }
            }
            let r = try await a.sh(script, timeout: .seconds(120))
            #expect(r.status == 0, "seed \(seed): \(r.stderr)")
            do { try await a.waitUntilUploaded(timeout: .seconds(60)) } catch {
                throw TestSupportError("seed \(seed): \(error)\n\(await a.diagnostics())")
            }
            let expected = try await a.snapshot()
            try await b.expectEventually("seed \(seed): B to match A", timeout: .seconds(30), devices: [a, b]) {
                let onA = try await a.snapshot(hashing: false)
                return try await b.snapshot(hashing: false) == onA
            }
            let onB: [String: String]
            do { onB = try await b.snapshot() } catch {
                Issue.record("seed \(seed): \(error)\n\(await b.diagnostics())")
                return
            }
            #expect(onB == expected, "seed \(seed)")
            let onServer = try await serverTree(server)
            #expect(Set(onServer.keys) == Set(expected.keys), "seed \(seed)")
            for (path, kind) in expected where kind != "dir" { #expect(onServer[path] == kind, "seed \(seed): \(path)") }
        }
    }

    /// Both devices at once, on the same files: A renames half of them while B appends to
    /// them, and B renames the other half while A appends. Each rename and each edit applies,
    /// and every file reads whole on both. (A rename refused because of the other device's
    /// edit once kept the old size with the new digest: reads then failed with EIO.)
    @Test func renamesOnOneDeviceAndEditsOnTheOtherBothApply() async throws {
        try await withDevices(["A", "B"]) { _, devices in
            let (a, b) = (devices[0], devices[1])
            let count = 12
            let made = try await a.sh(#"cd "$M" && mkdir d && for i in $(seq \#(count)); do echo base$i > d/f$i; done"#)
            #expect(made.status == 0, "\(made.stderr)")
            try await a.waitUntilUploaded()
            try await b.expectEventually("B to see the \(count) files", devices: [a, b]) {
                try await b.snapshot(hashing: false).count == count + 1
            }
            // Each device first opens the files it will append to, so that its edits reach
            // those items whatever the other's renames have done to their names by then; then
            // both wait at a barrier and go together: each appends (closing the file uploads
            // it) and then renames the files the other is appending to, so that renames meet
            // edits that reached the server after the rename's base revision.
            func script(_ me: String, at barrier: String, appendTo first: Int, rename other: Int, as prefix: String) -> String {
                #"cd "$M/d" && fds=() && for i in $(seq \#(first) 2 \#(count)); do exec {fd}>>f$i; fds+=($fd); done && "#
                    + #"\#(barrier) && "#
                    + #"k=0 && for i in $(seq \#(first) 2 \#(count)); do fd=${fds[$k]}; echo \#(me)$i >&$fd; exec {fd}>&-; k=$((k+1)); done && "#
                    + #"for i in $(seq \#(other) 2 \#(count)); do mv f$i \#(prefix)$i; done"#
            }
            try await together(a, b) { atA, atB in
                (script("A", at: atA, appendTo: 1, rename: 2, as: "a"), script("B", at: atB, appendTo: 2, rename: 1, as: "b"))
            }
            try await a.waitUntilUploaded()
            try await b.waitUntilUploaded()
            var expected: [String: String] = ["d": "dir"]
            for i in 1...count {
                let (name, line) = i % 2 == 0 ? ("a\(i)", "B\(i)") : ("b\(i)", "A\(i)")
                expected["d/\(name)"] = sha256Hex(Data("base\(i)\n\(line)\n".utf8))
            }
            for device in [a, b] {
                try await device.expectEventually("\(device.name) to show every rename and every edit", devices: [a, b]) {
                    try await device.snapshot(hashing: false) == expected.mapValues { $0 == "dir" ? "dir" : "file" }
                }
                let shown: [String: String]
                do { shown = try await device.snapshot() } catch {
                    Issue.record("\(device.name): \(error)\n\(await device.diagnostics())")
                    continue
                }
                #expect(shown == expected, "\(device.name)")
            }
        }
    }

    /// Both devices at once, on the same files: A sets three attributes and removes a shared
    /// one while B sets three others. Every set and every removal applies on both. (Sent as
    /// whole sets, the later device's set won and the other's changes were lost; then a send
    /// queued behind an answered one still sent a stale whole set.)
    @Test func attributesFromBothDevicesAtOnceAllApply() async throws {
        try await withDevices(["A", "B"]) { _, devices in
            let (a, b) = (devices[0], devices[1])
            let count = 6
            let made = try await a.sh(#"cd "$M" && mkdir x && for i in $(seq \#(count)); do echo $i > x/f$i && setfattr -n user.common -v base x/f$i; done"#)
            #expect(made.status == 0, "\(made.stderr)")
            try await a.waitUntilUploaded()
            let shared = #"cd "$M/x" && for i in $(seq \#(count)); do getfattr --only-values -n user.common f$i 2>/dev/null; echo; done"#
            try await b.expectEventually("B to see the shared attribute on every file", devices: [a, b]) {
                try await b.sh(shared).stdout == String(repeating: "base\n", count: count)
            }
            func script(_ me: String, at barrier: String, then extra: String) -> String {
                #"cd "$M/x" && \#(barrier) && "#
                    + #"for r in 1 2 3; do for i in $(seq \#(count)); do setfattr -n user.\#(me)$r -v \#(me)$r f$i; done; done\#(extra)"#
            }
            try await together(a, b) { atA, atB in
                (script("a", at: atA, then: #" && for i in $(seq \#(count)); do setfattr -x user.common f$i; done"#), script("b", at: atB, then: ""))
            }
            try await a.waitUntilUploaded()
            try await b.waitUntilUploaded()
            let dump = #"cd "$M/x" && for i in $(seq \#(count)); do getfattr --absolute-names -d -m '^user\.([ab][0-9]|common)' f$i | grep = | LC_ALL=C sort | tr '\n' ' '; echo; done"#
            let line = #"user.a1="a1" user.a2="a2" user.a3="a3" user.b1="b1" user.b2="b2" user.b3="b3" "#
            let expected = String(repeating: line + "\n", count: count)
            for device in [a, b] {
                try await device.expectEventually("\(device.name) to show every attribute set and removed on both", devices: [a, b]) {
                    try await device.sh(dump).stdout == expected
                }
            }
        }
    }
}

/// Runs one shell script on each device so that both go on together from a barrier in them:
/// `scripts` gets the shell command that waits at the barrier for A and for B, and returns the
/// two scripts. Both must succeed.
func together(_ a: TestDevice, _ b: TestDevice, _ scripts: (_ atA: String, _ atB: String) -> (String, String)) async throws {
    let barrier = try TempDirectory("ubiq-barrier")
    defer { barrier.remove() }
    func wait(_ me: String) -> String {
        #"touch "\#(barrier.path)/\#(me)" && until [ -e "\#(barrier.path)/go" ]; do sleep 0.01; done"#
    }
    let (scriptA, scriptB) = scripts(wait("A"), wait("B"))
    async let onA = a.sh(scriptA)
    async let onB = b.sh(scriptB)
    try await eventually("both devices at the barrier") {
        FileManager.default.fileExists(atPath: barrier.path + "/A") && FileManager.default.fileExists(atPath: barrier.path + "/B")
    }
    FileManager.default.createFile(atPath: barrier.path + "/go", contents: nil)
    let (ra, rb) = try await (onA, onB)
    #expect(ra.status == 0, "A: \(ra.stderr)")
    #expect(rb.status == 0, "B: \(rb.stderr)")
}
