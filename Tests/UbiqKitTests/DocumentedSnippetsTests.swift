import Foundation
import Testing

/// docs/UBIQKIT.md's snippets are compiled code: each of its `swift` blocks in "Snippets" is in
/// DocumentedSnippets.swift, character for character, and each function there is in the
/// document, so that neither can change without the other.
@Suite struct DocumentedSnippetsTests {
    static let section = "## Snippets"

    /// The repository's top: three folders up from this file (Tests/UbiqKitTests/).
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test func everySnippetOfTheDocumentIsCompiledAndEveryCompiledOneIsDocumented() throws {
        let document = try String(contentsOf: Self.repository.appendingPathComponent("docs/UBIQKIT.md"), encoding: .utf8)
        let compiled = try String(contentsOf: Self.repository.appendingPathComponent("Tests/UbiqKitTests/DocumentedSnippets.swift"), encoding: .utf8)
        let blocks = try Self.swiftBlocks(inSection: Self.section, of: document)
        #expect(blocks.count >= 10, "the section lost snippets: \(blocks.count) left")
        for block in blocks {
            // Tested apart: a failed `#expect(compiled.contains(block))` would print the whole file.
            let isCompiled = compiled.contains(block)
            #expect(isCompiled, "not in DocumentedSnippets.swift, as written:\n\(block)")
        }
        let functions = compiled.split(separator: "\n").filter { $0.hasPrefix("func ") }
        #expect(!functions.isEmpty)
        for function in functions {
            #expect(blocks.contains { $0.contains(function) }, "not in the document: \(function)")
        }
    }

    /// The text of each ```swift block from the heading to the next heading of its level.
    static func swiftBlocks(inSection heading: String, of document: String) throws -> [String] {
        let lines = document.split(separator: "\n", omittingEmptySubsequences: false)
        guard let start = lines.firstIndex(where: { $0 == heading }) else { throw SnippetError("docs/UBIQKIT.md has no \(heading) section") }
        let end = lines[(start + 1)...].firstIndex { $0.hasPrefix("## ") } ?? lines.endIndex
        var blocks: [String] = []
        var open: [Substring]?
        for line in lines[(start + 1)..<end] {
            if open == nil, line == "```swift" {
                open = []
            } else if let body = open, line == "```" {
                blocks.append(body.joined(separator: "\n"))
                open = nil
            } else {
                open?.append(line)
            }
        }
        if open != nil { throw SnippetError("a swift block of \(heading) is not closed") }
        return blocks
    }

    struct SnippetError: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}
