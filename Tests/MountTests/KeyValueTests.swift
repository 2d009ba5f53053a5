import Foundation
import ItemModel
import SyncAPI
import TestSupport
import Testing

/// `ubiq kv` and `ubiq whoami` on real mounts of a live server: NSUbiquitousKeyValueStore's
/// semantics (docs/SEMANTICS.md, "The key-value store"), and the account rules.
@Suite(.serialized) struct KeyValueTests {
    @Test func aKeySetOnOneDeviceIsReportedOnTheOtherAndReadsBackIdentical() async throws {
        try await withDevices(["A", "B"]) { server, devices in
            let (a, b) = (devices[0], devices[1])
            let watchA = try a.kvWatch(), watchB = try b.kvWatch()
            defer { [watchA, watchB].forEach { $0.stop() } }
            // A fresh device's first read of the store.
            for w in [watchA, watchB] { try await w.notice("initialSync") { $0.reason == "initialSync" } }

            // Every value type, each read back on B as the bytes A wrote.
            let blob = Data((0..<3000).map { UInt8(truncatingIfNeeded: $0 &* 7919 &+ 13) })
            try blob.write(to: URL(fileURLWithPath: a.mountpoint + "/../blob"))
            let cases: [(key: String, arguments: [String], stored: String)] = [
                ("string", ["plain text, with \"quotes\" and é"], #""plain text, with \"quotes\" and é""#),
                ("number", ["--json", "42.50"], "42.50"),
                ("boolean", ["--json", "true"], "true"),
                ("array", ["--json", #"[1, "two", {"x": null}]"#], #"[1, "two", {"x": null}]"#),
                ("dictionary/with slash", ["--json", #"{"b": 1e3, "a": [false]}"#], #"{"b": 1e3, "a": [false]}"#),
                ("data", ["--file", a.mountpoint + "/../blob"], #"{"$data":""# + blob.base64EncodedString() + #""}"#),
            ]
            var at = 0
            for c in cases {
                try await a.mustKV(["set", c.key] + c.arguments)
                at = try await watchB.notice("serverChange of \(c.key)", after: at) { $0.reason == "serverChange" && $0.keys == [c.key] }
                let line = try await b.mustKV(["get", "--json", c.key])
                #expect(line == "{\"key\":\(try jsonString(c.key)),\"value\":\(c.stored)}\n", "\(c.key)")
            }
            // Plain output: a string's text, data's bytes, anything else as JSON.
            #expect(try await b.mustKV(["get", "string"]) == "plain text, with \"quotes\" and é\n")
            #expect(try await b.mustKV(["get", "number"]) == "42.50\n")
            let bytes = try await b.sh("'\(Binaries.path("ubiq"))' kv get data --mount \"$M\" | base64 -w0")
            #expect(bytes.stdout == blob.base64EncodedString(), "\(bytes.stderr)")
            let list = try await b.mustKV(["list"]).split(separator: "\n").map { String($0.split(separator: "\t")[0]) }
            #expect(list == cases.map(\.key).sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
            #expect(try await server.keyValues().keys.sorted() == cases.map(\.key).sorted())

            // Removed on B: gone on A, reported as a change.
            try await b.mustKV(["remove", "boolean"])
            try await watchA.notice("serverChange of the removal") { $0.reason == "serverChange" && $0.keys == ["boolean"] }
            #expect(try await a.kv(["get", "boolean"]).status == 1)

            // Latency: from `kv set` on A (the command started) to B's line.
            var latencies: [Duration] = []
            for i in 0..<20 {
                let start = ContinuousClock.now
                try await a.mustKV(["set", "latency-\(i)", "value \(i)"])
                at = try await watchB.notice("serverChange of latency-\(i)", after: at) { $0.keys == ["latency-\(i)"] }
                latencies.append(watchB.arrival(of: at) - start)
            }
            latencies.sort()
            print("kv set on A to serverChange on B, 20 runs: median \(latencies[10]), min \(latencies[0]), max \(latencies[19])")
        }
    }

    @Test func eachLimitIsRefusedAsAQuotaViolationAndNothingIsStored() async throws {
        try await withDevices(["A"]) { server, devices in
            let a = devices[0]
            let watch = try a.kvWatch()
            defer { watch.stop() }
            try await watch.notice("initialSync") { $0.reason == "initialSync" }
            let files = a.mountpoint + "/.."
            func refused(_ key: String, _ arguments: [String], saying words: String) async throws {
                let r = try await a.kv(["set", key] + arguments)
                #expect(r.status == 1, "\(key): \(r)")
                #expect(r.stderr.split(separator: "\n").count == 1 && r.stderr.contains(words), "\(key): \(r.stderr)")
                try await watch.notice("quotaViolation of \(key.prefix(20))") { $0.reason == "quotaViolation" && $0.keys == [key] }
                #expect(try await a.kv(["get", key]).status == 1, "nothing stored here")
                #expect(try await server.keyValues()[key] == nil, "nothing stored on the server")
            }
            try await refused(String(repeating: "k", count: 65), ["x"], saying: "1 to 64 bytes")
            // 800 KB of data is about 1.07 MB of JSON.
            try Data(count: 800_000).write(to: URL(fileURLWithPath: files + "/large"))
            try await refused("large", ["--file", files + "/large"], saying: "at most 1048576 bytes")
            // Two values of about 533 KB of JSON each do not fit in one store.
            try Data(count: 400_000).write(to: URL(fileURLWithPath: files + "/half"))
            try await a.mustKV(["set", "half-1", "--file", files + "/half"])
            try await refused("half-2", ["--file", files + "/half"], saying: "holds at most 1048576 bytes")
            try await a.mustKV(["remove", "half-1"])
            // 1024 keys, written by another client: the mount's view of the store is full too.
            let http = try await TestHTTP(baseURL: server.baseURL).login("alice", "alice-pw")
            for i in 0..<1024 {
                let r = try await http.send(.PUT, APIPath.keyValue(.default, "key-\(i)"), body: Data("\(i)".utf8))
                #expect(r.status == 200, "\(r.text)")
            }
            try await eventually("A to see 1024 keys") { try await a.mustKV(["list"]).split(separator: "\n").count == 1024 }
            try await refused("one-too-many", ["y"], saying: "at most 1024 keys")
            // A key that is there may still change.
            try await a.mustKV(["set", "key-7", "changed"])
            try await eventually("the server to have the change") { try await server.keyValues()["key-7"] == Data(#""changed""#.utf8) }
        }
    }

    @Test func writesMadeOfflineGoUpOnReconnectAndTheLastToReachTheServerWins() async throws {
        let server = try await ServerProcess.start()
        let relays = try [ThrottledRelay(to: server.port), ThrottledRelay(to: server.port)]
        var devices: [TestDevice] = []
        defer { relays.forEach { $0.close() } }
        do {
            try await server.addAccount("alice", password: "alice-pw")
            for (name, relay) in zip(["A", "B"], relays) {
                devices.append(try await TestDevice.mount(name, server: server, through: relay.baseURL, user: "alice", password: "alice-pw"))
            }
            let (a, b) = (devices[0], devices[1])
            let watchA = try a.kvWatch(), watchB = try b.kvWatch()
            defer { [watchA, watchB].forEach { $0.stop() } }
            for w in [watchA, watchB] { try await w.notice("initialSync") { $0.reason == "initialSync" } }

            // Set while A is offline: kept, shown on A at once, sent when A is back.
            relays[0].cut()
            try await a.mustKV(["set", "offline", "written offline"])
            #expect(try await a.mustKV(["get", "offline"]) == "written offline\n")
            #expect(try await server.keyValues()["offline"] == nil)
            relays[0].rejoin()
            try await watchB.notice("serverChange of offline") { $0.reason == "serverChange" && $0.keys == ["offline"] }
            #expect(try await b.mustKV(["get", "offline"]) == "written offline\n")

            // Both offline, both write one key; A reaches the server first, B last: B's wins, on both.
            relays.forEach { $0.cut() }
            try await a.mustKV(["set", "shared", "from A"])
            try await b.mustKV(["set", "shared", "from B"])
            relays[0].rejoin()
            try await eventually("A's write to reach the server") { try await server.keyValues()["shared"] == Data(#""from A""#.utf8) }
            relays[1].rejoin()
            try await eventually("B's write to reach the server") { try await server.keyValues()["shared"] == Data(#""from B""#.utf8) }
            try await a.expectEventually("both devices to show B's write", devices: devices) {
                let onA = try await a.kv(["get", "shared"]).stdout, onB = try await b.kv(["get", "shared"]).stdout
                return onA == "from B\n" && onB == "from B\n"
            }
            try await watchA.notice("serverChange of shared") { $0.reason == "serverChange" && $0.keys == ["shared"] }

            // A write the server refuses for a limit, though it fit the store as A saw it
            // offline: reported, dropped, never sent again.
            let files = a.mountpoint + "/.."
            try Data(count: 400_000).write(to: URL(fileURLWithPath: files + "/half"))
            relays[0].cut()
            try await a.mustKV(["set", "half-a", "--file", files + "/half"])
            try await b.mustKV(["set", "half-b", "--file", files + "/half"])
            try await eventually("B's value to reach the server") { try await server.keyValues()["half-b"] != nil }
            relays[0].rejoin()
            try await watchA.notice("quotaViolation of half-a") { $0.reason == "quotaViolation" && $0.keys == ["half-a"] }
            #expect(try await a.kv(["get", "half-a"]).status == 1, "A shows the server's store again")
            try await eventually("A to show B's value") { try await a.kv(["get", "half-b"]).status == 0 }
            let status = try await a.ubiq(["status", "--json", "--mount", a.mountpoint])
            #expect(status.stdout.contains(#""connected":true"#), "\(status)")
            #expect(try await server.keyValues()["half-a"] == nil)
        } catch {
            for d in devices { await d.unmount(); d.remove() }
            await server.stop()
            throw error
        }
        for d in devices { await d.unmount(); d.remove() }
        await server.stop()
    }

    @Test func accountsAreKeptApartAndSwitchingOneCacheReportsAccountChange() async throws {
        try await withDevices(["A"]) { server, devices in
            let a = devices[0]
            try await server.addAccount("bob", password: "bob-pw")
            // The same account through another address of the server; and another account.
            let c = try await TestDevice.mount("C", server: server, through: "http://localhost:\(server.port)", user: "alice", password: "alice-pw")
            var b: TestDevice?
            do {
                b = try await TestDevice.mount("B", server: server, user: "bob", password: "bob-pw")
                try await Self.keptApartThenSwitched(server, a, b!, c)
            } catch {
                for d in [b, c].compactMap({ $0 }) { await d.unmount(); d.remove() }
                throw error
            }
            for d in [b, c].compactMap({ $0 }) { await d.unmount(); d.remove() }
        }
    }

    static func keptApartThenSwitched(_ server: ServerProcess, _ a: TestDevice, _ b: TestDevice, _ c: TestDevice) async throws {
        func token(_ d: TestDevice) async throws -> String {
            let report = try JSONDecoder().decode(WhoAmIReport.self, from: Data(try await d.mustUbiq(["whoami", "--json", "--mount", d.mountpoint]).utf8))
            #expect(try await d.xattr("", "user.ubiq.identityToken") == report.identityToken, "the root's attribute says the same")
            return try #require(report.identityToken)
        }
        let (alice, aliceElsewhere, bob) = (try await token(a), try await token(c), try await token(b))
        #expect(alice == aliceElsewhere, "one account, two addresses of its server: one token")
        #expect(alice != bob)
        #expect(alice.count == 64 && !alice.contains("alice"))

        // Neither account sees the other's keys or files; the server answers 404.
        try await a.mustKV(["set", "alice-key", "hers"])
        try await a.must(#"echo hers > "$M/alice.txt""#)
        try await b.mustKV(["set", "bob-key", "his"])
        try await eventually("alice's file to reach the server") { try await a.xattr("alice.txt", "user.ubiq.isUploaded") == "1" }
        try await eventually("C to show alice's key") { try await c.kv(["get", "alice-key"]).status == 0 }
        #expect(try await b.kv(["get", "alice-key"]).status == 1)
        #expect(try await b.must(#"ls -A "$M""#) == "")
        let fileID = try #require(try await a.xattr("alice.txt", "user.ubiq.itemID"))
        let asBob = try await TestHTTP(baseURL: server.baseURL).login("bob", "bob-pw")
        #expect(try await asBob.send(.GET, APIPath.item(.default, ItemID(fileID))).status == 404)

        // One cache, switched to bob: nothing of alice's shows, and both listeners hear it.
        await a.unmount()
        _ = try await a.mustUbiq(["login", "--server", a.serverURL, "--user", "bob", "--password-stdin"], stdin: "bob-pw\n")
        try await a.mountAgain()
        var watch = try a.kvWatch()
        let monitor = try a.monitor(json: true)
        defer { [monitor].forEach { $0.stop() } }
        try await watch.notice("accountChange") { $0.reason == "accountChange" }
        try await monitor.event("accountChange") { $0["kind"] as? String == "accountChange" }
        #expect(try await a.must(#"ls -A "$M""#) == "")
        try await eventually("bob's key to show") { try await a.kv(["get", "bob-key"]).status == 0 }
        #expect(try await a.kv(["get", "alice-key"]).status == 1)
        #expect(try await token(a) == bob)
        watch.stop()
        monitor.stop()

        // And back to alice: her files and keys show again, and the store is not read as new.
        await a.unmount()
        _ = try await a.mustUbiq(["login", "--server", a.serverURL, "--user", "alice", "--password-stdin"], stdin: "alice-pw\n")
        try await a.mountAgain()
        watch = try a.kvWatch()
        defer { watch.stop() }
        try await watch.notice("accountChange") { $0.reason == "accountChange" }
        #expect(try await a.must(#"cat "$M/alice.txt""#) == "hers\n")
        #expect(try await a.mustKV(["get", "alice-key"]) == "hers\n")
        try await c.mustKV(["set", "after-switch", "x"])
        let change = try await watch.notice("serverChange of after-switch") { $0.keys == ["after-switch"] }
        #expect(!watch.output[..<change].contains { $0.contains("initialSync") }, "\(watch.output)")
    }
}

func jsonString(_ text: String) throws -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = .withoutEscapingSlashes
    return String(decoding: try encoder.encode(text), as: UTF8.self)
}

extension TestDevice {
    /// `ubiq kv watch --json` on this device, running until the test stops it.
    func kvWatch() throws -> RunningProcess {
        try RunningProcess(Binaries.path("ubiq"), ["kv", "watch", "--json", "--mount", mountpoint], environment: environment)
    }

    func kv(_ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
        try await ubiq(["kv"] + arguments + ["--mount", mountpoint])
    }

    /// `ubiq kv …`, which must succeed; its output.
    @discardableResult
    func mustKV(_ arguments: [String]) async throws -> String {
        try await mustUbiq(["kv"] + arguments + ["--mount", mountpoint])
    }

    @discardableResult
    func mustUbiq(_ arguments: [String], stdin: String? = nil) async throws -> String {
        let r = try await ubiq(arguments, stdin: stdin)
        guard r.status == 0 else { throw TestSupportError("[\(name)] ubiq \(arguments.joined(separator: " ")) exited \(r.status): \(r.stderr)") }
        return r.stdout
    }
}

extension ServerProcess {
    /// Every live key of alice's default container, as the server holds it.
    func keyValues(user: String = "alice", password: String = "alice-pw") async throws -> [String: Data] {
        let http = try await TestHTTP(baseURL: baseURL).login(user, password)
        let r = try await http.send(.GET, APIPath.keyValues(.default) + "?since=0")
        guard r.status == 200 else { throw TestSupportError("kv read: \(r.status) \(r.text)") }
        return Dictionary(try KeyValuePage(json: r.body).entries.compactMap { e in e.value.map { (e.key, $0) } }, uniquingKeysWith: { a, _ in a })
    }
}

struct WatchedNotice {
    var reason: String
    var keys: [String]
}

extension RunningProcess {
    /// Waits for a `kv watch` line after line `earlier` that satisfies `condition`; returns its index.
    @discardableResult
    func notice(_ what: String, after earlier: Int = -1, timeout: Duration = .seconds(30), where condition: @escaping (WatchedNotice) -> Bool) async throws -> Int {
        try await line(from: earlier + 1, what, timeout: timeout) { text in
            guard let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any],
                  let reason = object["reason"] as? String, let keys = object["keys"] as? [String]
            else { return false }
            return condition(WatchedNotice(reason: reason, keys: keys))
        }
    }
}
