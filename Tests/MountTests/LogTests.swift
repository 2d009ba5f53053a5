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
            #expect(!a.logLines(mentioning: "request failed").contains("errno=\(ENOENT) "), "ENOENT is not logged")

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
}
