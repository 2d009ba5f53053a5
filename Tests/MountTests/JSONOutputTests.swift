import Foundation
import TestSupport
import Testing

private let cliDocument = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../docs/CLI.md").standardized

/// Every `--json` output against docs/CLI.md's "JSON output" table, read from the document:
/// each documented field that is not optional is there, nothing undocumented is, and each value
/// has the documented type.
@Suite(.enabled(if: FileManager.default.isReadableFile(atPath: cliDocument.path), "reads docs/CLI.md from the clone, which the ordinary user's pass may not reach"))
struct JSONOutputTests {
    static let document = cliDocument

    struct Field {
        var type: String
        var optional: Bool
    }

    /// The table's rows: output → field → type.
    static func documentedFields() throws -> [String: [String: Field]] {
        let text = try String(contentsOf: document, encoding: .utf8)
        guard let section = text.components(separatedBy: "## JSON output").dropFirst().first?.components(separatedBy: "\n## ").first else {
            throw TestSupportError("docs/CLI.md has no \"JSON output\" section")
        }
        var outputs: [String: [String: Field]] = [:]
        for line in section.split(separator: "\n") where line.hasPrefix("| `") {
            let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
            guard cells.count == 2 else { continue }
            var fields: [String: Field] = [:]
            for match in cells[1].matches(of: /`(\w+)` (string|number|boolean|array|object|any)(\?)?/) {
                fields[String(match.1)] = Field(type: String(match.2), optional: match.3 != nil)
            }
            outputs[cells[0]] = fields
        }
        return outputs
    }

    /// A JSON value's type as the table names it; a number and a boolean are told apart by
    /// the decoder, which takes neither for the other.
    enum Value: Decodable {
        case string, number, boolean, array, object, null

        init(from decoder: any Decoder) throws {
            let c = try decoder.singleValueContainer()
            if c.decodeNil() { self = .null
            } else if (try? c.decode(Bool.self)) != nil { self = .boolean
            } else if (try? c.decode(Double.self)) != nil { self = .number
            } else if (try? c.decode(String.self)) != nil { self = .string
            } else if (try? c.decode([Value].self)) != nil { self = .array
            } else { _ = try c.decode([String: Value].self); self = .object }
        }

        var name: String { "\(self)" }
    }

    /// Every line of `stdout` against the fields of `output`.
    static func check(_ stdout: String, as output: String, in table: [String: [String: Field]], sourceLocation: SourceLocation = #_sourceLocation) throws {
        let fields = try #require(table[output], "docs/CLI.md documents \(output)", sourceLocation: sourceLocation)
        let lines = stdout.split(separator: "\n")
        #expect(!lines.isEmpty, "\(output) printed a line", sourceLocation: sourceLocation)
        for line in lines {
            let object = try JSONDecoder().decode([String: Value].self, from: Data(line.utf8))
            for (name, value) in object {
                guard let field = fields[name] else {
                    Issue.record("\(output): `\(name)` is not documented: \(line)", sourceLocation: sourceLocation)
                    continue
                }
                #expect(field.type == "any" || value.name == field.type, "\(output): `\(name)` is \(value.name), documented \(field.type): \(line)", sourceLocation: sourceLocation)
            }
            for (name, field) in fields where !field.optional && object[name] == nil {
                Issue.record("\(output): `\(name)` is missing: \(line)", sourceLocation: sourceLocation)
            }
        }
    }

    @Test func everyJSONOutputHasItsDocumentedFieldsAndTypes() async throws {
        let table = try Self.documentedFields()
        #expect(table.count >= 12, "the table's rows: \(table.keys.sorted())")
        try await withDevices(["A"]) { _, devices in
            let a = devices[0]
            let ubiq = Binaries.path("ubiq")
            try await a.must(#"echo hello > "$M/a.txt"; mkdir "$M/Documents""#)
            try await a.waitUntilUploaded()
            let file = a.mountpoint + "/a.txt"
            func out(_ arguments: [String]) async throws -> String {
                let r = try await a.ubiq(arguments)
                #expect(r.status == 0, "ubiq \(arguments.joined(separator: " ")): \(r.stderr)")
                return r.stdout
            }
            let status = try await out(["status", "--json", "--mount", a.mountpoint])
            try Self.check(status, as: "`ubiq status`", in: table)
            #expect(status.hasPrefix(#"{"account":"#) && status.contains(#""server":"http://"#), "keys sorted, slashes as they are: \(status)")
            try Self.check(try await out(["status", "--json", file]), as: "`ubiq status PATH`", in: table)
            try Self.check(try await out(["versions", "--json", file]), as: "`ubiq versions PATH`", in: table)
            try Self.check(try await out(["query", "--json", "TRUEPREDICATE", "--mount", a.mountpoint]), as: "`ubiq query`", in: table)
            try Self.check(try await out(["query", "--json", "--group-by", "contentType", "TRUEPREDICATE", "--mount", a.mountpoint]), as: "`ubiq query`", in: table)
            try Self.check(try await out(["query", "--json", "--count", "TRUEPREDICATE", "--mount", a.mountpoint]), as: "`ubiq query --count`", in: table)
            try Self.check(try await out(["query", "--json", "--values", "contentType", "TRUEPREDICATE", "--mount", a.mountpoint]), as: "`ubiq query --values KEY`", in: table)
            let bad = try await a.ubiq(["query", "--json", "name ==", "--mount", a.mountpoint])
            #expect(bad.status == 2)
            try Self.check(bad.stdout, as: "`ubiq query` of a bad predicate", in: table)
            try Self.check(try await out(["whoami", "--json", "--mount", a.mountpoint]), as: "`ubiq whoami`", in: table)
            _ = try await out(["kv", "set", "n", "42", "--json", "--mount", a.mountpoint])
            _ = try await out(["kv", "set", "s", "text", "--mount", a.mountpoint])
            try Self.check(try await out(["kv", "get", "n", "--json", "--mount", a.mountpoint]), as: "`ubiq kv get KEY`, `ubiq kv list`", in: table)
            try Self.check(try await out(["kv", "list", "--json", "--mount", a.mountpoint]), as: "`ubiq kv get KEY`, `ubiq kv list`", in: table)
            try Self.check(try await out(["server", "status", "--json"]), as: "`ubiq server status`", in: table)
            try Self.check(try await out(["share", file, "--expires", "1d", "--json"]), as: "`ubiq share`, `ubiq share --list`", in: table)
            try Self.check(try await out(["share", "--list", "--json", "--mount", a.mountpoint]), as: "`ubiq share`, `ubiq share --list`", in: table)
            // The streams: their first line, which each prints at once (the connection's state,
            // the store's initial sync); `timeout` ends them.
            let monitor = try await a.sh("timeout -s INT 5 '\(ubiq)' monitor --json --mount \"$M\" | head -n 1")
            try Self.check(monitor.stdout, as: "`ubiq monitor`", in: table)
            let watch = try await a.sh("timeout -s INT 5 '\(ubiq)' kv watch --json --mount \"$M\" | head -n 1")
            try Self.check(watch.stdout, as: "`ubiq kv watch`", in: table)
        }
    }
}
