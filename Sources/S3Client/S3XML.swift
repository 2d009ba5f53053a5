import Foundation
#if canImport(FoundationXML)
import FoundationXML
#endif

/// An element of an S3 XML answer: its name (without namespace), its text, its children in order.
/// S3's answers are small documents of nested elements with text in the leaves; attributes and
/// mixed content do not occur and are dropped.
struct S3XML: Sendable {
    var name: String
    var text: String
    var children: [S3XML]

    /// The text of the first child named `name`.
    subscript(_ name: String) -> String? { children.first { $0.name == name }?.text }

    func all(_ name: String) -> [S3XML] { children.filter { $0.name == name } }

    static func parse(_ data: Data) throws -> S3XML {
        let parser = XMLParser(data: data)
        let builder = Builder()
        parser.delegate = builder
        parser.shouldProcessNamespaces = true
        guard parser.parse(), let root = builder.root else {
            throw S3ProtocolError("not an XML document: \(parser.parserError.map { "\($0)" } ?? "empty"): \(String(decoding: data.prefix(200), as: UTF8.self))")
        }
        return root
    }

    /// Writes `<name>` elements with escaped text: the bodies the client sends.
    static func element(_ name: String, _ text: String) -> String {
        var escaped = ""
        for c in text {
            switch c {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"": escaped += "&quot;"
            case "'": escaped += "&apos;"
            default: escaped.append(c)
            }
        }
        return "<\(name)>\(escaped)</\(name)>"
    }

    final class Builder: NSObject, XMLParserDelegate {
        var stack: [S3XML] = []
        var root: S3XML?

        func parser(_ parser: XMLParser, didStartElement elementName: String, namespaceURI: String?, qualifiedName: String?, attributes: [String: String] = [:]) {
            stack.append(S3XML(name: elementName, text: "", children: []))
        }

        func parser(_ parser: XMLParser, foundCharacters string: String) {
            if !stack.isEmpty { stack[stack.count - 1].text += string }
        }

        func parser(_ parser: XMLParser, didEndElement elementName: String, namespaceURI: String?, qualifiedName: String?) {
            guard let done = stack.popLast() else { return }
            if stack.isEmpty { root = done } else { stack[stack.count - 1].children.append(done) }
        }
    }
}
