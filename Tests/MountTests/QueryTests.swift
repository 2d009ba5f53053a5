import Foundation
import Synchronization
import SyncAPI
import TestSupport
import Testing

/// `ubiq query` on a real mount: placeholders are found like downloaded files, the predicates
/// iCloud apps write work as they are, and a bad predicate is exit 2 with its position.
extension ConvergenceTests {
    @Test func aQueryFindsPlaceholdersByNameTypeStatusTagsAndScope() async throws {
        try await withDevices(["A", "B"]) { _, devices in
            let (a, b) = (devices[0], devices[1])
            try await a.must(#"""
                mkdir -p "$M/Documents/Archive" && echo hello > "$M/notes.txt" && echo x > "$M/Documents/a.md" && echo old > "$M/Documents/Archive/b.md" &&
                head -c 1500000 /dev/zero > "$M/big.bin" && setfattr -n user.xdg.tags -v "work, urgent" "$M/notes.txt"
                """#)
            try await a.waitUntilUploaded()
            try await eventually("B to list every item") { try await b.sh(#"find "$M" -type f | wc -l"#).stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "4" }
            // `ubiq` answers some of these itself and hands the rest to `ubiq-full`: the same
            // output either way.
            func query(_ arguments: [String]) async throws -> (status: Int32, stdout: String, stderr: String) {
                let quick = try await b.ubiq(["query"] + arguments + ["--mount", b.mountpoint])
                let full = try await b.ubiq(["query"] + arguments + ["--mount", b.mountpoint], command: "ubiq-full")
                #expect(quick.status == full.status && quick.stdout == full.stdout && quick.stderr == full.stderr, "\(arguments): \(quick) against \(full)")
                return quick
            }
            func paths(_ arguments: [String]) async throws -> [String] {
                let r = try await query(arguments)
                #expect(r.status == 0, "\(arguments): \(r.stderr)")
                return r.stdout.split(separator: "\n").map { String($0.dropFirst(b.mountpoint.count)) }
            }
            // Placeholders on B, found by the predicates apps write.
            #expect(try await paths(["kMDItemFSName LIKE[c] '*.TXT'"]) == ["/notes.txt"])
            #expect(try await paths(["NSMetadataItemFSNameKey == '*.md'"]) == ["/Documents/Archive/b.md", "/Documents/a.md"])
            #expect(try await paths(["%K LIKE %@", "--arg", "NSMetadataItemFSNameKey", "--arg", "a.*"]) == ["/Documents/a.md"])
            #expect(try await paths(["size > 1000000 AND modified > $time.today(-7)"]) == ["/big.bin"])
            #expect(try await paths(["tags CONTAINS 'work' AND NOT (path BEGINSWITH '/Documents/Archive')"]) == ["/notes.txt"])
            #expect(try await paths(["downloadingStatus == 'notDownloaded' AND contentType == 'net.daringfireball.markdown'"]).count == 2)
            #expect(try await paths(["downloadingStatus == 'notDownloaded' OR hasUnresolvedConflicts == 1"]).count == 4, "every file")
            // The seed documents' predicates, as written there.
            #expect(try await paths(["NSMetadataItemFSNameKey == '*'"]).count == 6)
            #expect(try await paths(["%K == 'notes.txt'", "--arg", "NSMetadataItemFSNameKey"]) == ["/notes.txt"])
            #expect(try await paths(["%K LIKE %@", "--arg", "NSMetadataItemFSNameKey", "--arg", "*.txt"]) == ["/notes.txt"])
            #expect(try await paths(["TRUEPREDICATE", "--scope", "documents", "--sort=-name"]) == ["/Documents/Archive/b.md", "/Documents/a.md", "/Documents/Archive"])
            #expect(try await paths(["TRUEPREDICATE", "--scope", "data", "--sort", "size,name"]) == ["/Documents", "/notes.txt", "/big.bin"])
            #expect(try await query(["TRUEPREDICATE", "--count"]).stdout == "6\n", "two folders and four files")
            let values = try await query(["kind == nil OR TRUEPREDICATE", "--values", "contentType"])
            #expect(values.status == 2, "kind is no key")
            let types = try await query(["TRUEPREDICATE", "--values", "contentType"])
            #expect(types.stdout == "net.daringfireball.markdown\t2\npublic.folder\t2\npublic.data\t1\npublic.plain-text\t1\n", "most frequent first: \(types)")
            let grouped = try await query(["size < 100", "--group-by", "downloadingStatus"])
            #expect(grouped.stdout.hasPrefix("# downloadingStatus = current\n") && grouped.stdout.contains("# downloadingStatus = notDownloaded\n"), "\(grouped.stdout)")
            let unknownKey = try await query(["kind == 'x'"])
            #expect(unknownKey.status == 2 && unknownKey.stderr.contains("at 0: unknown key 'kind'"), "\(unknownKey)")

            // --json: one object per item, typed; a placeholder says so, and nothing was downloaded.
            let json = try await query(["name == 'notes.txt'", "--json"])
            let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
            #expect(object["path"] as? String == "/notes.txt" && object["size"] as? Int == 6 && object["isUploaded"] as? Bool == true)
            #expect(object["downloadingStatus"] as? String == "notDownloaded" && object["tags"] as? [String] == ["work", "urgent"])
            #expect(try await b.xattr("notes.txt", "user.ubiq.downloadingStatus") == "notDownloaded")

            // A bad predicate: exit 2, with where it is wrong.
            let bad = try await query(["name == "])
            #expect(bad.status == 2 && bad.stderr.contains("at 8"), "\(bad)")
            let badJSON = try await query(["name ==[x] 'a'", "--json"])
            #expect(badJSON.status == 2 && badJSON.stdout.contains(#""position":8"#), "\(badJSON)")
            #expect(try await query(["TRUEPREDICATE", "--sort", "nosuchkey"]).status == 2)
            // --explain: the parsed tree and the SQL, the value bound and not in the statement.
            let explained = try await query(["name LIKE[c] %@ AND size > 10", "--arg", "*.txt", "--explain"])
            #expect(explained.status == 0, "\(explained)")
            #expect(explained.stdout.contains("  AND\n    name LIKE[c] \"*.txt\"\n    size > 10\n"), "\(explained.stdout)")
            #expect(explained.stdout.contains("?1 = \"*.txt\"") && !explained.stdout.contains("'*.txt'"), "\(explained.stdout)")
            #expect(try await query(["name LIKE", "--explain"]).status == 2)
            let outside = try await b.ubiq(["query", "TRUEPREDICATE", "--mount", "/tmp"])
            #expect(outside.status == 1 && outside.stderr.contains("not inside a ubiq mount"), "\(outside)")

            // `ubiq` alone, without `ubiq-full` beside it: a query it reads is answered, and
            // what it hands over fails to start, so each path is the one taken above.
            let alone = try TempDirectory("ubiq-alone")
            defer { alone.remove() }
            try FileManager.default.copyItem(atPath: Binaries.path("ubiq"), toPath: alone.path + "/ubiq")
            chmod(alone.path, 0o755)
            for arguments in [["TRUEPREDICATE", "--count"], ["--json", "--scope=documents", "name LIKE[c] %@", "--arg", "*.MD"], ["name == "]] {
                let quick = try await run(alone.path + "/ubiq", ["query"] + arguments + ["--mount", b.mountpoint], environment: b.environment)
                let full = try await query(arguments)
                #expect(quick.status == full.status && quick.stdout == full.stdout && quick.stderr == full.stderr, "\(arguments) alone: \(quick)")
            }
            for handedOver in [["TRUEPREDICATE", "--explain"], ["TRUEPREDICATE", "--live"], ["--help"], ["TRUEPREDICATE", "--sort", "nosuchkey"]] {
                let r = try await run(alone.path + "/ubiq", ["query"] + handedOver + ["--mount", b.mountpoint], environment: b.environment)
                #expect(r.status == 1 && r.stderr.contains("cannot run \(alone.path)/ubiq-full"), "\(handedOver): \(r)")
            }
        }
    }

    /// A live query on B hears of what A does, and of B's own download finishing (L1–L6).
    @Test func aLiveQueryOnBReportsAddedChangedAndRemovedItems() async throws {
        try await withDevices(["A", "B"]) { _, devices in
            let (a, b) = (devices[0], devices[1])
            try await a.must(#"echo first > "$M/a.txt""#)
            try await a.waitUntilUploaded()
            try await eventually("B to list a.txt") { try await b.sh(#"ls "$M""#).stdout == "a.txt\n" }
            let work = try TempDirectory("ubiq-live")
            defer { work.remove() }
            let out = work.path + "/out"
            FileManager.default.createFile(atPath: out, contents: nil)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Binaries.path("ubiq"))
            process.arguments = ["query", "--live", "--json", "name LIKE '*.txt'", "--mount", b.mountpoint]
            process.environment = b.environment
            process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
            process.standardError = FileHandle.nullDevice
            try process.run()
            defer { process.terminate() }
            /// The JSON lines printed so far.
            func lines() -> [[String: Any]] {
                (try? String(contentsOfFile: out, encoding: .utf8))?.split(separator: "\n").compactMap {
                    try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
                } ?? []
            }
            func updates() -> [[String: Any]] { lines().filter { $0["event"] as? String == "update" } }
            func paths(_ update: [String: Any], _ field: String) -> [String] { (update[field] as? [[String: Any]] ?? []).compactMap { $0["path"] as? String } }
            try await eventually("the initial results and the end of gathering") { lines().contains { $0["event"] as? String == "finishGathering" } }
            #expect(lines().first?["path"] as? String == "/a.txt", "the initial result, then finishGathering")
            #expect(lines().count == 2)

            try await a.must(#"echo second > "$M/b.txt""#)
            try await eventually("b.txt to be added") { updates().contains { paths($0, "added") == ["/b.txt"] } }
            try await a.must(#"mv "$M/b.txt" "$M/c.txt""#)
            try await eventually("the rename to be a change (same item, new path)") { updates().contains { paths($0, "changed") == ["/c.txt"] } }
            try await a.must(#"mv "$M/c.txt" "$M/c.md""#)
            try await eventually("the rename out of the predicate to be a removal") { updates().contains { paths($0, "removed") == ["/c.txt"] } }
            try await b.must(#"cat "$M/a.txt" > /dev/null"#)
            try await eventually("B's download of a.txt to be a change") {
                updates().contains { u in (u["changed"] as? [[String: Any]] ?? []).contains { $0["path"] as? String == "/a.txt" && $0["downloadingStatus"] as? String == "current" } }
            }
            try await a.must(#"rm "$M/a.txt""#)
            try await eventually("the deletion to be a removal") { updates().contains { paths($0, "removed") == ["/a.txt"] } }
            // L2: every update touched the results; each item at most once per line.
            for u in updates() {
                let all = paths(u, "added") + paths(u, "changed") + paths(u, "removed")
                #expect(!all.isEmpty && Set(all).count == all.count, "\(u)")
            }
            #expect(process.stillRunning, "a live query runs until interrupted")

            // A second live query, interrupted: its stream in the daemon, with nothing to
            // report, must not keep the daemon from stopping.
            let interrupted = Process()
            interrupted.executableURL = URL(fileURLWithPath: Binaries.path("ubiq"))
            interrupted.arguments = ["query", "--live", "TRUEPREDICATE", "--mount", b.mountpoint]
            interrupted.environment = b.environment
            let pipe = Pipe()
            interrupted.standardOutput = pipe
            interrupted.standardError = FileHandle.nullDevice
            try interrupted.run()
            defer { interrupted.terminate() }
            let gathered = Mutex(Data())
            pipe.fileHandleForReading.readabilityHandler = { handle in
                let chunk = handle.availableData
                gathered.withLock { $0.append(chunk) }
            }
            try await eventually("the second query to gather") { gathered.withLock { String(decoding: $0, as: UTF8.self).contains("finishGathering") } }
            interrupted.interrupt()
            try await eventually("the interrupted query to exit") { !interrupted.stillRunning }
            pipe.fileHandleForReading.readabilityHandler = nil

            // Unmounting ends the first one (the mount went away: exit 1) and is not held up.
            let unmounted = try await b.ubiq(["unmount", b.mountpoint, "--timeout", "10"], timeout: .seconds(40))
            #expect(unmounted.status == 0, "\(unmounted)")
            try await eventually("the live query to end with the mount") { !process.stillRunning }
            #expect(process.endStatus == 1)
        }
    }
}
