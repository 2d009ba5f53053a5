import ArgumentParser
import ControlSocket
import Foundation
import MetadataIndex
import MountDaemon
import QueryLanguage
import SyncAPI
import SyncClient

/// `ubiq query PREDICATE`: a metadata query in a mount (docs/QUERY_LANGUAGE.md), answered by
/// its daemon from the rows it holds of every item, placeholders included. Plain output is one
/// path per line, as `mdfind` prints; a bad predicate is exit 2 with where it is wrong.
struct Query: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "query", abstract: "Find the items of a mount that match an NSPredicate-style query.")
    @Argument(help: "The predicate, e.g. \"name LIKE[c] '*.txt' AND size > 1000\".") var predicate: String
    @Option(name: .customLong("arg"), help: "A value for the next %K (a key) or %@ (a string), in order.") var arguments: [String] = []
    @Option(help: "documents (the Documents folder), data (everything else) or all.") var scope: String = "all"
    @Option(help: "Keys to order by, comma-separated; -KEY for descending. Ties go by path.") var sort: String?
    @Flag(help: "Print only how many items match.") var count = false
    @Option(help: "Group the results by this key's value: a '# KEY = VALUE' line before each group.") var groupBy: String?
    @Option(help: "Print each distinct value of this key among the results, with how many have it, instead of the results.") var values: String?
    @Flag(help: "One JSON object per item.") var json = false
    @Flag(help: "Print the results, then {\"event\":\"finishGathering\"}, then an update line per batch of changes that touches them, until interrupted.")
    var live = false
    @Option(help: "With --live: seconds a batch of changes is collected for (default 0.1).") var batchInterval: Double = 0.1
    @Option(help: "The mount to query (default: the one containing the working directory).") var mount: String?
    @Flag(help: "Print the parsed tree and the SQL it compiles to, with the bound values, without running it.") var explain = false

    func validate() throws {
        guard ["all", "documents", "data"].contains(scope) else { throw ValidationError("--scope is documents, data or all") }
        guard ControlPath.isLiveInterval(batchInterval) else { throw ValidationError("--batch-interval: \(ControlPath.liveIntervalRule)") }
        if live && (count || groupBy != nil || values != nil) { throw ValidationError("--count, --group-by and --values do not go with --live") }
        for (option, name) in [("--group-by", groupBy), ("--values", values)] {
            if let name, KeyTable.key(named: name) == nil { throw ValidationError("\(option): unknown key '\(name)'") }
        }
        for name in (sort ?? "").split(separator: ",") where KeyTable.key(named: name.hasPrefix("-") ? String(name.dropFirst()) : String(name)) == nil {
            throw ValidationError("--sort: unknown key '\(name)'")
        }
    }

    func run() async throws {
        if explain { return try printExplanation() }
        let (mountpoint, control) = try MountTable.control(of: mount)
        var request = QueryOutputRequest(predicate: predicate)
        (request.arguments, request.scope, request.sort, request.groupBy, request.values) = (arguments, scope, sort, groupBy, values)
        (request.count, request.json) = (count, json)
        if live {
            let path = ControlPath.liveQuery + "?" + request.queryString(root: mountpoint) + "&interval=\(batchInterval)"
            return try await follow(control.lines(path), mountpoint: mountpoint)
        }
        // The daemon makes the output (`ControlPath.queryOutput`), as it does for `ubiq`.
        let answer: ControlExchange.Answer
        do { answer = try await control.answer(.GET, request.target(root: mountpoint), timeout: .seconds(120)) } catch {
            throw Failure("the daemon of \(mountpoint) does not answer: \(error)")
        }
        switch answer.status {
        case 200:
            FileHandle.standardOutput.write(Data(answer.body))
        case 422:
            (json ? FileHandle.standardOutput : FileHandle.standardError).write(Data(answer.body))
            throw ExitCode(2)
        default:
            throw Failure("the daemon of \(mountpoint) answered \(answer.status): \(String(decoding: answer.body, as: UTF8.self))")
        }
    }

    /// `--explain`: needs no mount; `$time` values are fixed at this moment.
    func printExplanation() throws {
        let parsed: QueryPredicate
        do throws(QueryError) { parsed = try QueryParser.parse(predicate, arguments: arguments) } catch {
            try refuse(error.message, at: error.position)
        }
        let sql = SQLCompiler.compile(parsed, clock: QueryClock())
        if json {
            print(jsonLine(["tree": parsed.tree, "sql": sql.statement(scope: QueryScope(rawValue: scope) ?? .all), "arguments": sql.argumentTexts]))
        } else {
            print("tree:\n" + parsed.tree.split(separator: "\n").map { "  " + $0 }.joined(separator: "\n"))
            print("sql:\n  " + sql.statement(scope: QueryScope(rawValue: scope) ?? .all).replacingOccurrences(of: "\n", with: "\n  "))
            print("arguments:" + sql.argumentTexts.enumerated().map { "\n  ?\($0.offset + 1) = \($0.element)" }.joined())
        }
    }

    /// G10: a bad predicate is bad usage, with the offset of the offending token.
    func refuse(_ error: String, at position: Int?) throws -> Never {
        if json {
            print(jsonLine(["error": error, "position": position ?? -1]))
        } else {
            printError("query: " + (position.map { "at \($0): " } ?? "") + error)
        }
        throw ExitCode(2)
    }

    /// Prints a live query's lines as they come (L1): results as the one-shot query prints them,
    /// then the events as JSON lines, with absolute paths unless `--json`.
    func follow(_ lines: AsyncThrowingStream<String, Error>, mountpoint: String) async throws {
        let encoder = outputEncoder()
        func shown(_ item: QueryResultItem) throws -> Any {
            json ? try JSONSerialization.jsonObject(with: try encoder.encode(item)) : mountpoint + item.path
        }
        do {
            for try await text in lines {
                guard let line = try? JSONDecoder().decode(LiveQueryLine.self, from: Data(text.utf8)) else { continue }
                switch line.event {
                case "error": try refuse(line.error ?? "the query cannot run", at: line.position)
                case "result":
                    guard let item = line.item else { continue }
                    print(json ? String(decoding: try encoder.encode(item), as: UTF8.self) : mountpoint + item.path)
                case "finishGathering": print(jsonLine(["event": "finishGathering"]))
                case "update":
                    let removed: [Any] = (line.removed ?? []).map { gone -> Any in json ? ["itemID": gone.itemID, "path": gone.path] : mountpoint + gone.path }
                    print(jsonLine(["event": "update", "added": try (line.added ?? []).map(shown), "changed": try (line.changed ?? []).map(shown), "removed": removed]))
                default: continue
                }
                fflush(nil)
            }
        } catch let exit as ExitCode {
            throw exit
        } catch {
            throw Failure("the daemon of \(mountpoint) stopped answering: \(error)")
        }
        throw Failure("the mount at \(mountpoint) went away")
    }
}
