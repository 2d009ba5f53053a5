import ArgumentParser
import Foundation
import MountDaemon
import QueryLanguage
import SyncAPI
import SyncClient

/// `ubiq query PREDICATE`: a metadata query in a mount (docs/QUERY_LANGUAGE.md), answered by
/// its daemon from the rows it holds of every item, placeholders included. Plain output is one
/// path per line, as `mdfind` prints; a bad predicate is exit 2 with where it is wrong.
struct Query: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Find the items of a mount that match an NSPredicate-style query.")
    @Argument(help: "The predicate, e.g. \"name LIKE[c] '*.txt' AND size > 1000\".") var predicate: String
    @Option(name: .customLong("arg"), help: "A value for the next %K (a key) or %@ (a string), in order.") var arguments: [String] = []
    @Option(help: "documents (the Documents folder), data (everything else) or all.") var scope: String = "all"
    @Option(help: "Keys to order by, comma-separated; -KEY for descending. Ties go by path.") var sort: String?
    @Flag(help: "Print only how many items match.") var count = false
    @Flag(help: "One JSON object per item.") var json = false
    @Option(help: "The mount to query (default: the one containing the working directory).") var mount: String?

    func validate() throws {
        guard ["all", "documents", "data"].contains(scope) else { throw ValidationError("--scope is documents, data or all") }
        for name in (sort ?? "").split(separator: ",") where KeyTable.key(named: name.hasPrefix("-") ? String(name.dropFirst()) : String(name)) == nil {
            throw ValidationError("--sort: unknown key '\(name)'")
        }
    }

    func run() async throws {
        let target = Paths.absolute(mount ?? FileManager.default.currentDirectoryPath)
        guard let mountpoint = MountTable.mount(containing: target) else { throw Failure("\(target) is not inside a ubiq mount") }
        guard let cache = MountRegistry.cacheDirectory(of: mountpoint) else { throw Failure("no daemon is registered for \(mountpoint)") }
        var parameters = URLComponents()
        parameters.queryItems = [
            URLQueryItem(name: "q", value: predicate),
            URLQueryItem(name: "args", value: String(decoding: try JSONEncoder().encode(arguments), as: UTF8.self)),
            URLQueryItem(name: "scope", value: scope),
            URLQueryItem(name: "sort", value: sort ?? ""),
        ]
        // `+` stays literal in a query string otherwise, and the server reads it as a space.
        let query = (parameters.percentEncodedQuery ?? "").replacingOccurrences(of: "+", with: "%2B")
        let answer: QueryAnswer
        do { answer = try await ControlClient(socketPath: cache + "/control.sock").get(ControlPath.query + "?" + query, timeout: .seconds(120)) } catch {
            throw Failure("the daemon of \(mountpoint) does not answer: \(error)")
        }
        if let error = answer.error {
            // G10: a bad predicate is bad usage, with the offset of the offending token.
            if json {
                print(jsonLine(["error": error, "position": answer.position ?? -1]))
            } else {
                printError("query: " + (answer.position.map { "at \($0): " } ?? "") + error)
            }
            throw ExitCode(2)
        }
        let results = answer.results ?? []
        if count {
            print(json ? jsonLine(["count": results.count]) : String(results.count))
            return
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        for item in results {
            print(json ? String(decoding: try encoder.encode(item), as: UTF8.self) : mountpoint + item.path)
        }
    }
}
