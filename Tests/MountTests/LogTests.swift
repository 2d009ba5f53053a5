import Foundation
import TestSupport
import Testing

/// The daemon's log: where it is, what goes into it, and that it stays bounded.
extension OrdinaryUserTests {
    @Test("the daemon logs each failed request but ENOENT and each change of connection, status names its log, and a full log is set aside")
    func daemonLog() async throws {
        try await withDevices(["A"], mountArguments: ["--log-size", "64K", "--log-level", "debug"]) { server, devices in
            let a = devices[0]
            let log = a.cache + "/daemon.log"
            #expect(try await a.ubiq(["status", "--mount", a.mountpoint]).stdout.contains("log:       \(log)\n"))

            // A refusal is one line with the request and its errno; a name that is not there is
            // an answer, not a failure, and is left out.
            try await a.must(#"mkdir "$M/d" && touch "$M/d/f""#)
            #expect(try await a.sh(#"rmdir "$M/d""#).status != 0)
            #expect(try await a.sh(#"ls "$M/missing""#).status != 0)
            try await eventually("the refused rmdir in the log") {
                a.logLines(mentioning: "request=rmdir").contains("errno=\(ENOTEMPTY)")
            }
            // Answers that are not failures: a missing name, the ACLs `ls -l` asks for.
            try await a.must(#"ls -la "$M" "$M/d" > /dev/null && getfattr -d -m - "$M/d/f" > /dev/null"#)
            #expect(!a.logLines(mentioning: "request failed").contains("errno=\(ENOENT) "), "ENOENT is not logged")
            #expect(!a.logLines(mentioning: "request failed").contains("errno=\(EOPNOTSUPP) "), "EOPNOTSUPP is not logged")

            // The connection going and coming back.
            server.kill9()
            try await a.sh(#"echo offline > "$M/while-down.txt""#)
            try await eventually("the server's loss in the log") { a.logLines(mentioning: "event=offline").contains("mount event") }
            try await server.restart(samePort: true)
            try await eventually("the server's return in the log") { a.logLines(mentioning: "event=online").contains("mount event") }

            // The debug lines of many new files fill 64 KiB: the log is set aside as
            // daemon.log.1 and a new one goes on.
            var batch = 0
            try await eventually("the log to be set aside") {
                batch += 1
                try await a.must(#"mkdir -p "$M/many" && for i in $(seq 1 20); do echo x > "$M/many/\#(batch)-$i"; done"#)
                return FileManager.default.fileExists(atPath: log + ".1")
            }
            try await a.sh(#"rmdir "$M/d""#)
            try await eventually("a later line in the new log") { a.logLines(mentioning: "request=rmdir").contains("errno=\(ENOTEMPTY)") }
            let size = try #require(try FileManager.default.attributesOfItem(atPath: log)[.size] as? Int)
            #expect(size < 64 << 10 + 16 << 10, "the new log started afresh (\(size) bytes)")
        }
    }

    @Test("ubiq status --metrics is Prometheus text whose request, failure, event and byte counters move with the mount's work")
    func mountMetrics() async throws {
        try await withDevices(["A"]) { _, devices in
            let a = devices[0]
            func scrape() async throws -> PrometheusText {
                let r = try await a.ubiq(["status", "--mount", a.mountpoint, "--metrics"])
                try #require(r.status == 0, "\(r.stderr)")
                return try PrometheusText(r.stdout)
            }
            let before = try await scrape()
            try await a.must(#"mkdir "$M/d" && echo hello > "$M/d/f" && cat "$M/d/f" > /dev/null"#)
            #expect(try await a.sh(#"rmdir "$M/d""#).status != 0)
            try await eventually("d/f to be uploaded") { try await a.xattr("d/f", "user.ubiq.isUploaded") == "1" }
            // The upload's event is counted just after its commit, which the attribute shows.
            var after = try await scrape()
            try await eventually("the upload's event and bytes to be counted") {
                after = try await scrape()
                return after.value("ubiq_mount_uploaded_bytes_total") - before.value("ubiq_mount_uploaded_bytes_total") >= 6
            }
            let duration = "ubiq_mount_request_duration_seconds_count"
            for request in ["mkdir", "create", "write", "flush"] {
                #expect(after.value(duration, ["request": request]) > before.value(duration, ["request": request]), "\(request) counted")
            }
            #expect(after.value("ubiq_mount_request_failures_total", ["request": "rmdir", "errno": "\(ENOTEMPTY)"]) == 1)
            #expect(after.value("ubiq_mount_events_total", ["event": "uploaded"]) > before.value("ubiq_mount_events_total", ["event": "uploaded"]))
            #expect(after.value("ubiq_mount_items") >= 3 && after.value("ubiq_mount_connected") == 1 && after.value("ubiq_mount_pending_uploads") == 0)
            #expect(after.types["ubiq_mount_request_duration_seconds"] == "histogram")
            #expect(after.value("ubiq_mount_uploaded_bytes_total") - before.value("ubiq_mount_uploaded_bytes_total") == 6, "hello and its newline went up")
            // Evicted and read again: the same six bytes come down.
            let evicted = try await a.ubiq(["evict", a.mountpoint + "/d/f"])
            try #require(evicted.status == 0, "\(evicted.stderr)")
            #expect(try await a.must(#"cat "$M/d/f""#) == "hello\n")
            // Counted when the transfer has ended, which may be just after the reader has its bytes.
            var counted = 0.0
            try await eventually("the download's bytes to be counted (last: \(counted))") {
                counted = try await scrape().value("ubiq_mount_downloaded_bytes_total") - after.value("ubiq_mount_downloaded_bytes_total")
                return counted >= 6
            }
            #expect(counted == 6)
        }
    }
}
