import Foundation
import TestSupport
import Testing
import UbiqKit

/// The sample program, `simple-text-editor`, driven on two real mounts of one account: one
/// editor process per device, fed commands on its standard input.
@Suite(.serialized) struct SimpleTextEditorTests {
    @Test func twoEditorsListShowAndSaveDocumentsShareASettingAndResolveAConflict() async throws {
        try await withDevices(["A", "B"]) { server, devices in
            let (a, b) = (devices[0], devices[1])
            let editorA = try EditorProcess(on: a), editorB = try EditorProcess(on: b)
            defer { [editorA, editorB].forEach { $0.stop() } }
            try await editorA.ready()
            try await editorB.ready()

            // Saved on A: B's live list gets it, as a placeholder, and B shows it.
            #expect(try await editorA.send("write notes base") == ["ok saved notes.txt 5 bytes"])
            try await editorB.send("wait-for notes 30")
            try await editorB.notice("notice added notes.txt")
            let listed = try await editorB.send("list")
            #expect(listed.contains { $0.hasPrefix("document notes.txt download=notDownloaded ") }, "\(listed)")
            #expect(try await editorB.send("status notes.txt").first?.contains(" download=notDownloaded ") == true)
            #expect(try await editorB.send("download notes.txt") == ["ok downloading notes.txt"])
            try await eventually("B's download to show in the status") {
                try await editorB.send("status notes.txt").first?.contains(" download=current ") == true
            }
            #expect(try await editorB.send("show notes") == ["text base", "ok shown notes.txt"])
            try await a.waitUntilUploaded(timeout: waitLimit)
            let statusA = try await editorA.send("status notes.txt")
            #expect(statusA.first?.hasPrefix("status notes.txt download=current ") == true, "\(statusA)")
            #expect(statusA.first?.hasSuffix(" uploaded=true uploading=false conflicts=false") == true, "\(statusA)")

            // A new, empty document made on B is listed live on A.
            #expect(try await editorB.send("new todo") == ["ok created todo.txt"])
            try await editorA.notice("notice added todo.txt")
            #expect(try await editorB.send("new todo", expecting: "error").count == 1, "a name taken is refused, not emptied")

            // A setting made on A is told to B's editor, which reads it.
            try await editorA.send("font-size 18")
            try await editorB.notice("the font size") { $0.hasPrefix("notice settings-changed reason=serverChange ") && $0.contains("fontSize") }
            #expect(try await editorB.send("settings").contains("setting fontSize=18"))

            // Both edit notes.txt from the same base while the server is away: a conflict.
            server.kill9()
            try await eventually("A and B to notice they are offline") {
                let (onA, onB) = (try await a.status().connected, try await b.status().connected)
                return !onA && !onB
            }
            try await editorA.send("write notes edited on A")
            try await editorB.send("write notes edited on B")
            try await server.restart(samePort: true)
            try await a.waitUntilUploaded(timeout: waitLimit)
            try await b.waitUntilUploaded(timeout: waitLimit)

            // Both editors hear of it from their queries (A's must have, to hear of its
            // resolution later); B's lists the version and keeps it.
            try await editorA.notice("notice conflict notes.txt")
            try await editorB.notice("notice conflict notes.txt")
            let versions = try await editorB.send("conflicts notes.txt")
            #expect(versions.count == 2 && versions.last == "ok 1 conflict versions", "\(versions)")
            let version = try #require(versions.first?.split(separator: " ").map(String.init), "\(versions)")
            try #require(version.count == 5 && version[0] == "version", "\(versions)")
            let loser = try #require(["A", "B"].first { version[2] == "device=\($0)" }, "the version is A's or B's edit: \(versions)")
            #expect(try await editorB.send("resolve notes.txt keep \(version[1])") == ["ok resolved notes.txt"])

            // Both devices then agree: the kept edit, no conflict, uploaded.
            for editor in [editorA, editorB] {
                // The content first: while it arrives, the status attributes change under a reader.
                try await eventually("\(editor.name) to show the kept edit") {
                    try await editor.send("show notes.txt").first == "text edited on \(loser)"
                }
                try await eventually("\(editor.name) to show no conflict") {
                    try await editor.send("status notes.txt").first?.hasSuffix(" uploaded=true uploading=false conflicts=false") == true
                }
                #expect(try await editor.send("conflicts notes.txt") == ["ok 0 conflict versions"])
            }
            try await editorA.notice("notice resolved notes.txt")

            // The documented snippets that read a document's state, on the same document.
            for device in [a, b] {
                let notes = device.root.appendingPathComponent("Documents/notes.txt")
                #expect(try uploadState(of: notes) == "uploaded" && isReadyToOpen(notes))
                try resolveConflict(at: notes)  // none left: nothing to do
            }

            // A refused command is an error line, and the editor goes on.
            #expect(try await editorA.send("resolve notes.txt keep nothing", expecting: "error").count == 1)
            #expect(try await editorA.send("show ../escape", expecting: "error").count == 1)
            for editor in [editorA, editorB] {
                #expect(try await editor.send("quit") == ["ok bye"])
                #expect(try await editor.process.exitStatus() == 0)
            }
        }
    }

    @Test func badUsageIsSaidOnStandardErrorWithAFailingStatus() async throws {
        let unknown = try await run(Binaries.path("simple-text-editor"), ["--colour"], timeout: .seconds(30))
        #expect(unknown.status == 64 && unknown.stderr.contains("unknown argument '--colour'") && unknown.stdout.isEmpty)
        let missing = try await run(Binaries.path("simple-text-editor"), ["--registry"], timeout: .seconds(30))
        #expect(missing.status == 64 && missing.stderr.contains("--registry needs a value"))
        let outside = try await run(Binaries.path("simple-text-editor"), ["--container-url", "/tmp"], timeout: .seconds(30))
        #expect(outside.status == 1 && outside.stderr.contains("/tmp is not in a running ubiq mount"))
        let empty = try TempDirectory("editor-no-mounts")
        defer { empty.remove() }
        let none = try await run(Binaries.path("simple-text-editor"), ["--registry", empty.path], timeout: .seconds(30))
        #expect(none.status == 1 && none.stderr.contains("no running ubiq mount"))
    }
}

/// One `simple-text-editor` on a device: commands go to its standard input, and each answer is
/// read up to its `ok` or `error` line, under a deadline. `stop()` kills it if it still runs.
final class EditorProcess: Sendable {
    let name: String
    let process: RunningProcess
    let input: FileHandle

    init(on device: TestDevice) throws {
        let pipe = Pipe()
        name = device.name
        // Its own registry, as a program started outside the device's session names it.
        process = try RunningProcess(
            Binaries.path("simple-text-editor"), ["--container-url", device.mountpoint, "--registry", device.registry.directory],
            environment: device.environment, standardInput: pipe)
        input = pipe.fileHandleForWriting
    }

    /// Waits for the query to have gathered.
    func ready() async throws {
        try await process.line("\(name)'s editor to be ready", where: { $0.hasPrefix("ready ") })
    }

    /// Sends one command; returns its answer without the notices among it, ending with the
    /// `ok` (or, `expecting: "error"`, the `error`) line. Fails on the other.
    @discardableResult
    func send(_ command: String, expecting outcome: String = "ok", timeout: Duration = .seconds(60)) async throws -> [String] {
        let from = process.output.count
        try input.write(contentsOf: Data((command + "\n").utf8))
        let end = try await process.line(from: from, "\(name)'s answer to `\(command)`", timeout: timeout) {
            $0.hasPrefix("ok") || $0.hasPrefix("error")
        }
        let answer = process.output[from...end].filter { !$0.hasPrefix("notice ") }
        guard answer.last?.hasPrefix(outcome) == true else {
            throw TestSupportError("[\(name)] `\(command)` answered \(answer)\n\(process.errorOutput)")
        }
        return Array(answer)
    }

    /// Waits for a notice line, among everything printed so far and to come.
    func notice(_ what: String, where condition: @escaping (String) -> Bool) async throws {
        try await process.line("\(name)'s notice of \(what)", timeout: waitLimit, where: condition)
    }

    func notice(_ line: String) async throws {
        try await notice(line) { $0 == line }
    }

    func stop() {
        try? input.close()
        process.stop()
    }
}
