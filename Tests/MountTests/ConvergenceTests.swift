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
}
