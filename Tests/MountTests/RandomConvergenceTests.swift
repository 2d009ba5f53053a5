import Foundation
import ItemModel
import SyncAPI
import TestSupport
import Testing

/// Seeded random operations on two real mounts and through the HTTP API, interleaved with the
/// server being killed and restarted and with one mount's link cut while the others go on. Each
/// seed works in a folder of its own (`r0`, `r1`, …) on one server and one pair of mounts for
/// the whole run. Once quiet, for each seed:
///
/// 1. both mounts and the server hold the same tree (names, kinds, contents, `user.t.*`
///    attributes) below the seed's folder;
/// 2. every device shows the server's conflict flag (`user.ubiq.hasUnresolvedConflicts`) on
///    every file;
/// 3. every token a writer wrote and closed in the seed's last round, which only keeps (it
///    appends, makes files and folders, renames to new names, sets attributes; nothing
///    overwrites, truncates, deletes or renames over a name), is in a file of the server's tree
///    or in a conflict version of one. This holds whatever the earlier rounds' overwrites and
///    deletions still in flight do: an edit wins over a deletion, two edits from one base keep
///    the later as a conflict version, a name clash keeps both (docs/SEMANTICS.md, "What a
///    random run checks").
///
/// A seed replays its operations, not their timing. `UBIQ_SEED` and `UBIQ_SEEDS` choose the
/// first seed and how many run (the next seeds count up from it); `scripts/soak` sets them.
///
/// The regular suite runs 100 seeds from 20261127 (as root only: `scripts/test` skips it in the
/// ordinary user's pass, which runs the same code). A seed takes about 1.5 s alone and 2 to 3 s
/// beside the rest of the suite. Each lost write found so far is fixed, with a regression test
/// of its own (in RandomConvergenceRegressionTests, or in the engine's suites, whose commits
/// name the seed).
@Suite(.serialized)
struct RandomConvergenceTests {
    static let environment = ProcessInfo.processInfo.environment
    static let firstSeed = environment["UBIQ_SEED"].flatMap { UInt64($0) } ?? 20_261_127
    static let seedCount = environment["UBIQ_SEEDS"].flatMap { Int($0) } ?? 100
    /// After this many failing seeds the run stops: the devices are likely stuck, and each
    /// further seed would only wait out its deadline.
    static let failuresToStop = 3

    @Test func randomOperationsOnTwoMountsAndTheAPIConverge() async throws {
        // At debug level each daemon logs how it settled every change: a failing seed's report
        // gives the lines about its folder.
        try await withRelayedDevices(extraArguments: ["--log-level", "debug"]) { server, devices, relays in
            // One login for the run: a login costs the server a password hash (about half a
            // second in a debug build), and the token outlives the restarts.
            let http = try await TestHTTP(baseURL: server.baseURL).login("alice", "alice-pw")
            var failures = 0
            for index in 0..<Self.seedCount {
                let seed = Self.firstSeed &+ UInt64(index)
                let started = ContinuousClock.now
                let folder = "r\(index)"
                // A round that hangs fails its seed with where the commands were stuck.
                let failure: String?
                do {
                    failure = try await runSeed(seed, folder: folder, server: server, http: http, devices: devices, relays: relays)
                } catch {
                    failure = "\(error)"
                }
                print("seed \(seed): \(failure == nil ? "passed" : "FAILED") in \(ContinuousClock.now - started)")
                guard let failure else { continue }
                var trace = ""
                for device in devices { trace += "\n[\(device.name)] what the daemon decided about \(folder):\n" + device.logLines(mentioning: "/\(folder)/") }
                Issue.record("seed \(seed) failed (UBIQ_SEED=\(seed) UBIQ_SEEDS=1 to replay):\n\(failure)\(trace)")
                failures += 1
                if failures == Self.failuresToStop { return }
            }
        }
    }

    /// Runs one seed; returns what went wrong, nil when every check holds.
    func runSeed(_ seed: UInt64, folder: String, server: ServerProcess, http: TestHTTP, devices: [TestDevice], relays: [ThrottledRelay]) async throws -> String? {
        let script = RandomScript(seed: seed, folder: folder)
        try await makeStartingTree(folder, http: http, devices: devices)
        let writer = APIWriter(http: http, folder: folder)
        var kept: [String] = []
        for (r, round) in script.rounds.enumerated() {
            if let cut = script.disruption.cut, cut.round == r { relays[cut.device].cut() }
            async let onA = devices[0].sh(round.a, timeout: .seconds(60))
            async let onB = devices[1].sh(round.b, timeout: .seconds(60))
            async let onAPI = writer.run(round.http)
            if script.disruption.restartRound == r { try await server.restart(samePort: true) }
            let (a, b, api) = try await (onA, onB, onAPI)
            if round.keeps { kept += Self.closedTokens(a.stdout) + Self.closedTokens(b.stdout) + api }
        }
        for relay in relays { relay.rejoin() }
        return await check(folder, kept: kept, script: script, http: http, devices: devices)
    }

    /// The seed's folder with a few files and folders, made through the API, once both mounts show it.
    func makeStartingTree(_ folder: String, http: TestHTTP, devices: [TestDevice]) async throws {
        let top = try await http.createFolder(.default, name: folder)
        let d0 = try await http.createFolder(.default, parent: top.id, name: "d0")
        _ = try await http.createFolder(.default, parent: top.id, name: "d1")
        for name in ["f0", "f1", "f2"] { _ = try await http.createFile(.default, parent: top.id, name: name, content: Data("\(folder) \(name)\n".utf8)) }
        _ = try await http.createFile(.default, parent: d0.id, name: "f0", content: Data("\(folder) d0/f0\n".utf8))
        for device in devices {
            try await device.expectEventually("\(device.name) to show \(folder)", devices: devices) {
                try await device.sh(#"[ -f "$M/\#(folder)/d0/f0" ]"#).status == 0
            }
        }
    }

    /// Waits for quiet (no device has anything of the seed to send, and the three views agree;
    /// not the devices' whole outboxes, which an earlier failed seed may hold up), then checks
    /// the tokens. Returns the failure, with what differed and each device's diagnostics.
    func check(_ folder: String, kept: [String], script: RandomScript, http: TestHTTP, devices: [TestDevice]) async -> String? {
        var last: [String] = ["nothing read yet"]
        var serverFiles: [ItemMetadata] = []
        do {
            try await eventually(timeout: .seconds(90), "quiet") {
                last = []
                guard let read = try? await SeedFolderView.of(http, folder: folder) else {
                    last = ["the server's tree unreadable"]
                    return false
                }
                for device in devices {
                    do {
                        let shown = try await SeedFolderView.of(device, folder: folder)
                        if !shown.unsent.isEmpty { last.append("\(device.name): not yet on the server: \(shown.unsent)") }
                        last += shown.differences(from: read.view, device.name, "server")
                    } catch {
                        last.append("\(error)")
                    }
                }
                // A device's change can land while the devices are read (seed 20261174: a second
                // conflict version, after which the device showed what the server had shown
                // before it): quiet only if the server's tree, revisions and conflict versions
                // included, is still what it was.
                if last.isEmpty, (try? await SeedFolderView.of(http, folder: folder))?.files != read.files {
                    last.append("the server's tree changed while the devices were read")
                }
                serverFiles = read.files
                return last.isEmpty
            }
        } catch {
            return await report("not the same tree once quiet:\n" + last.joined(separator: "\n"), script, devices)
        }
        do {
            let contents = try await SeedFolderView.contents(of: serverFiles, via: http)
            let missing = kept.filter { token in !contents.values.contains { $0.range(of: Data(token.utf8)) != nil } }
            if !missing.isEmpty {
                let held = SeedFolderView.describe(serverFiles, contents)
                return await report("closed in the last round and lost: \(missing)\nthe server's files:\n\(held)", script, devices)
            }
        } catch {
            return await report("contents unreadable: \(error)", script, devices)
        }
        return nil
    }

    func report(_ what: String, _ script: RandomScript, _ devices: [TestDevice]) async -> String {
        var text = what + "\n" + script.description
        for device in devices { text += "\n" + (await device.diagnostics()) }
        return text
    }

    /// The tokens a shell round printed as written and closed (`+TOKEN`).
    static func closedTokens(_ stdout: String) -> [String] {
        stdout.split(separator: "\n").filter { $0.hasPrefix("+") }.map { String($0.dropFirst()) }
    }
}

/// A server and mounts A and B, each mount through a relay of its own that the test can cut.
/// Always unmounts, stops the relays and the server.
func withRelayedDevices(extraArguments: [String] = [], _ body: (ServerProcess, [TestDevice], [ThrottledRelay]) async throws -> Void) async throws {
    let server = try await ServerProcess.start()
    var devices: [TestDevice] = []
    var relays: [ThrottledRelay] = []
    func cleanUp() async {
        for d in devices { await d.unmount(); d.remove() }
        for r in relays { r.close() }
        await server.stop()
    }
    do {
        try await server.addAccount("alice", password: "alice-pw")
        for name in ["A", "B"] {
            let relay = try ThrottledRelay(to: server.nextDeviceReplica().port)
            relays.append(relay)
            devices.append(try await TestDevice.mount(name, server: server, through: relay.baseURL, user: "alice", password: "alice-pw", extraArguments: extraArguments))
        }
        try await body(server, devices, relays)
    } catch {
        await cleanUp()
        throw error
    }
    await cleanUp()
}
