import Foundation
import Hummingbird
import SyncAPI

/// `ubiq query`'s output, made here (`ControlPath.queryOutput`): the command only copies it out,
/// so `ubiq` answers a query without Foundation or its own formatting (docs/CLI.md), and both
/// ways of running the command print the same bytes.
extension ControlServer {
    func addQueryOutputRoute(to router: Router<BasicRequestContext>) {
        router.get(RouterPath(ControlPath.queryOutput)) { request, _ in
            let parameters = request.uri.queryParameters
            let output = QueryOutput(
                json: parameters["json"] == "1", count: parameters["count"] == "1", root: String(parameters["root"] ?? ""), group: String(parameters["group"] ?? ""))
            let answer = try runQuery(QueryRequest(parameters))
            let (status, text) = try output.text(of: answer)
            return Response(status: status, headers: [.contentType: "text/plain; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(string: text)))
        }
    }
}

/// The lines `ubiq query` prints for an answer: one path per line (as `mdfind`), one JSON
/// object per item, a count, value counts, or a refusal.
struct QueryOutput {
    var json: Bool
    /// `--count`: how many, whether the daemon counted them or listed them (to group them).
    var count: Bool
    /// What each plain path is printed under: the mountpoint as the command found it.
    var root: String
    /// The key results are grouped by, or empty.
    var group: String

    func text(of answer: QueryAnswer) throws -> (HTTPResponse.Status, String) {
        if let error = answer.error {
            // A key of sort, group or values the command would refuse before asking.
            guard let position = answer.position else { return (.badRequest, error + "\n") }
            return (.unprocessableContent, json ? try line(Refusal(error: error, position: position)) : "ubiq: query: at \(position): \(error)\n")
        }
        if let counted = answer.values {
            return (.ok, try counted.map { json ? try line($0) : "\($0.value)\t\($0.count)\n" }.joined())
        }
        if count {
            let n = answer.count ?? answer.results?.count ?? 0
            return (.ok, json ? try line(Count(count: n)) : "\(n)\n")
        }
        var text = ""
        var shownGroup: String?
        for item in answer.results ?? [] {
            if !group.isEmpty, !json, item.group != shownGroup {
                text += "# \(group) = \(item.group ?? "")\n"
                shownGroup = item.group
            }
            text += json ? try line(item) : root + item.path + "\n"
        }
        return (.ok, text)
    }

    struct Refusal: Encodable { var error: String; var position: Int }
    struct Count: Encodable { var count: Int }

    func line<T: Encodable>(_ value: T) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(value), as: UTF8.self) + "\n"
    }
}
