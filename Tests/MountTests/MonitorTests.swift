import Foundation
import TestSupport
import Testing

/// `ubiq monitor`: what one device hears of changes made on another, of its own transfers and
/// of conflicts, as a JSON object or a readable line per event.
extension OrdinaryUserTests {
    @Test func anotherDevicesChangesShowWithTheirKindAndPath() async throws {
        try await withDevices(["A", "B"]) { _, devices in
            let (a, b) = (devices[0], devices[1])
            let onA = try a.monitor(json: true)
            let onB = try b.monitor(json: true)
            let plainOnB = try b.monitor(json: false)
            defer { [onA, onB, plainOnB].forEach { $0.stop() } }
            // The first line is the connection's state: from there on, every event is heard.
            for m in [onA, onB] { try await m.event("online") { $0["kind"] as? String == "online" } }
            try await plainOnB.line("the first plain line") { $0.contains(" online ") }

            // Each event looked for after the one before: an earlier line of the same kind
            // (the create's content arriving as a change) does not count.
            try await a.must(#"mkdir "$M/docs""#)
            var at = try await onB.event("created /docs") { $0["kind"] as? String == "created" && $0["path"] as? String == "/docs" }
            try await a.must(#"echo hello > "$M/docs/a.txt""#)
            try await onA.event("uploaded /docs/a.txt") { $0["kind"] as? String == "uploaded" && $0["path"] as? String == "/docs/a.txt" }
            at = try await onB.event("created /docs/a.txt", after: at) { $0["kind"] as? String == "created" && $0["path"] as? String == "/docs/a.txt" }
            try await eventually("B to read the file") { try await b.sh(#"cat "$M/docs/a.txt""#).stdout == "hello\n" }
            at = try await onB.event("downloaded /docs/a.txt", after: at) { $0["kind"] as? String == "downloaded" && $0["path"] as? String == "/docs/a.txt" }
            try await a.must(#"echo more >> "$M/docs/a.txt""#)
            at = try await onB.event("changed /docs/a.txt", after: at) { $0["kind"] as? String == "changed" && $0["path"] as? String == "/docs/a.txt" }
            try await a.must(#"mv "$M/docs/a.txt" "$M/docs/b.txt""#)
            at = try await onB.event("renamed /docs/a.txt to /docs/b.txt", after: at) {
                $0["kind"] as? String == "renamed" && $0["path"] as? String == "/docs/b.txt" && $0["from"] as? String == "/docs/a.txt"
            }
            try await a.must(#"rm "$M/docs/b.txt""#)
            let last = try await onB.event("deleted /docs/b.txt", after: at) { $0["kind"] as? String == "deleted" && $0["path"] as? String == "/docs/b.txt" }

            // Every line is one object, keys sorted, with a kind from the documented set and an
            // ISO-8601 UTC time.
            let kinds: Set<String> = [
                "created", "changed", "renamed", "deleted", "uploadStarted", "uploadProgress", "uploaded", "uploadFailed", "downloadStarted",
                "downloadProgress", "downloaded", "downloadFailed", "conflictAppeared", "conflictResolved", "reconciled",
                "evicted", "error", "online", "offline",
            ]
            let iso = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
            let lines = Array(onB.output[...last])
            for line in lines {
                let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "\(line)")
                #expect(kinds.contains(object["kind"] as? String ?? ""), "\(line)")
                let time = try #require(object["time"] as? String, "\(line)")
                #expect(time.hasSuffix("Z") && (try? iso.parse(time)) != nil, "\(line)")
                let positions = object.keys.sorted().map { line.range(of: "\"\($0)\":")?.lowerBound }
                #expect(positions.allSatisfy { $0 != nil } && positions == positions.sorted { $0! < $1! }, "keys sorted: \(line)")
            }

            // The plain monitor heard the same events: one readable line each, in the same order
            // (after its own first line, the connection's state when it began).
            try await plainOnB.line("the plain line of the deletion") { $0.contains(" deleted /docs/b.txt") }
            let plain = plainOnB.output
            #expect(plain.count >= lines.count, "\(plain)")
            for (json, text) in zip(lines.dropFirst(), plain.dropFirst()) {
                let o = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
                var expected = "\(o["time"] as? String ?? "") \(o["kind"] as? String ?? "") \(o["path"] as? String ?? "-")"
                if let from = o["from"] as? String { expected += " (from \(from))" }
                if let detail = o["detail"] as? String { expected += ": \(detail)" }
                #expect(text == expected)
            }

            // Interrupted, it ends well; so it does when the mount goes away, but says so.
            onB.signal(SIGINT)
            #expect(try await onB.exitStatus() == 0)
            plainOnB.signal(SIGTERM)
            #expect(try await plainOnB.exitStatus() == 0)
            await a.unmount()
            #expect(try await onA.exitStatus() == 1)
            #expect(onA.errorOutput.contains("went away"), "\(onA.errorOutput)")
        }
    }

    @Test func aConflictAppearsOnBothDevicesAndItsResolutionToo() async throws {
        try await withDevices(["A", "B"]) { server, devices in
            let (a, b) = (devices[0], devices[1])
            let onA = try a.monitor(json: true)
            let onB = try b.monitor(json: true)
            defer { [onA, onB].forEach { $0.stop() } }
            for m in [onA, onB] { try await m.event("online") { $0["kind"] as? String == "online" } }
            _ = try await editOnBothWhileOffline(server, a, b)
            // The device whose edit lost hears it from its own upload, the other from the feed.
            for m in [onA, onB] {
                try await m.event("offline") { $0["kind"] as? String == "offline" }
                try await m.event("conflictAppeared /notes.txt") { $0["kind"] as? String == "conflictAppeared" && $0["path"] as? String == "/notes.txt" }
            }
            let resolved = try await a.ubiq(["resolve", a.mountpoint + "/notes.txt", "--keep-current"])
            #expect(resolved.status == 0, "\(resolved.stderr)")
            for m in [onA, onB] {
                try await m.event("conflictResolved /notes.txt") { $0["kind"] as? String == "conflictResolved" && $0["path"] as? String == "/notes.txt" }
            }
        }
    }

    /// A file too large to go inline goes up as a blob of its own, here 32 MiB through a link
    /// of 8 MiB/s: its monitor hears the start, the percentage as it goes (never backwards, at
    /// most twice a second), and the end.
    @Test func aLargeUploadReportsItsProgress() async throws {
        let server = try await ServerProcess.start()
        let relay = try ThrottledRelay(to: server.port, bytesPerSecond: 8 << 20)
        var device: TestDevice?
        do {
            try await server.addAccount("alice", password: "alice-pw")
            let a = try await TestDevice.mount("A", server: server, through: relay.baseURL, user: "alice", password: "alice-pw")
            device = a
            let onA = try a.monitor(json: true)
            defer { onA.stop() }
            try await onA.event("online") { $0["kind"] as? String == "online" }
            try await a.must(#"head -c 33554432 /dev/urandom > "$M/big""#, timeout: .seconds(60))
            let isBig: ([String: Any], String) -> Bool = { $0["kind"] as? String == $1 && $0["path"] as? String == "/big" }
            let started = try await onA.event("uploadStarted /big") { isBig($0, "uploadStarted") }
            let finished = try await onA.event("uploaded /big", after: started, timeout: .seconds(60)) { isBig($0, "uploaded") }
            let percents = onA.output[started...finished].compactMap { line -> Int? in
                guard let o = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], isBig(o, "uploadProgress"),
                      let detail = o["detail"] as? String, detail.hasSuffix("%") else { return nil }
                return Int(detail.dropLast())
            }
            // About four seconds at 8 MiB/s: a report each half second, less what the socket
            // buffers take in at once at the start (progress counts what is handed to them).
            #expect(percents.count >= 2, "\(onA.output[started...finished])")
            #expect(percents == percents.sorted() && percents.allSatisfy { (0...100).contains($0) }, "\(percents)")
        } catch {
            if let device { await device.unmount(); device.remove() }
            relay.close()
            await server.stop()
            throw error
        }
        if let device { await device.unmount(); device.remove() }
        relay.close()
        await server.stop()
    }

    @Test func noMountIsAFailureAndBadUsageIsAUsageError() async throws {
        try await withDevices(["A"]) { _, devices in
            let a = devices[0]
            let outside = try await a.ubiq(["monitor", "--mount", "/tmp"])
            #expect(outside.status == 1, "\(outside)")
            #expect(outside.stderr.split(separator: "\n").count == 1 && outside.stderr.contains("not inside a ubiq mount"), "\(outside.stderr)")
            #expect(try await a.ubiq(["monitor", "--bogus"]).status == 2)
            #expect(try await a.ubiq(["monitor", "--mount", a.mountpoint, "extra"]).status == 2)
        }
    }
}

extension TestDevice {
    /// `ubiq monitor` on this device, running until the test stops it.
    func monitor(json: Bool) throws -> RunningProcess {
        try RunningProcess(Binaries.path("ubiq"), ["monitor", "--mount", mountpoint] + (json ? ["--json"] : []), environment: environment)
    }
}

extension RunningProcess {
    /// Waits for a JSON line after line `earlier` that satisfies `condition`; returns its index.
    @discardableResult
    func event(_ what: String, after earlier: Int = -1, timeout: Duration = .seconds(30), where condition: @escaping ([String: Any]) -> Bool) async throws -> Int {
        try await line(from: earlier + 1, what, timeout: timeout) { text in
            (try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]).map(condition) ?? false
        }
    }
}
