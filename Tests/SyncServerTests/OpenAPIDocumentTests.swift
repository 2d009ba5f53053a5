import Foundation
import Testing

/// docs/openapi.json describes exactly the routes the server registers: a route added without
/// its description, or a description of a route that is gone, fails here. (What each route
/// answers is checked against the document by `scripts/fuzz-api`, schemathesis on a live server.)
@Suite struct OpenAPIDocumentTests {
    static var documentPath: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("docs/openapi.json").path
    }

    static func document() throws -> [String: Any] {
        let data = try Data(contentsOf: URL(fileURLWithPath: documentPath))
        return try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    @Test func everyRegisteredAPIRouteIsDescribedAndNothingElse() throws {
        let document = try Self.document()
        #expect((document["openapi"] as? String)?.hasPrefix("3.1") == true)
        let paths = try #require(document["paths"] as? [String: [String: Any]])
        let methods: Set<String> = ["get", "put", "post", "delete", "patch", "head", "options"]
        let described = Set(paths.flatMap { path, item in item.keys.filter(methods.contains).map { "\($0.uppercased()) \(path)" } })
        let registered = Set(try RegisteredRoutes.all().filter { $0.template.hasPrefix("/v1") || $0.template == "/health" }
            .map { "\($0.method) \($0.template)" })
        #expect(registered.count >= 30)
        #expect(registered.subtracting(described).sorted() == [], "registered but not described")
        #expect(described.subtracting(registered).sorted() == [], "described but not registered")
    }

    @Test func everyOperationDocumentsItsRefusalsWithTheErrorBody() throws {
        let document = try Self.document()
        let paths = try #require(document["paths"] as? [String: [String: Any]])
        for (path, item) in paths {
            for (method, value) in item {
                guard let operation = value as? [String: Any], let responses = operation["responses"] as? [String: Any] else { continue }
                // The key-value routes without a key exist only to refuse (`x-never-succeeds`).
                if operation["x-never-succeeds"] as? Bool != true {
                    #expect(responses.keys.contains { $0.hasPrefix("2") }, "\(method) \(path): no success status")
                }
                if path.hasPrefix("/v1") && !(path == "/v1/auth/token" && method == "post") {
                    #expect(responses["401"] != nil, "\(method) \(path): 401 undocumented")
                }
            }
        }
    }
}
