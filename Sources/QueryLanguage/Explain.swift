import Foundation

extension QueryPredicate {
    /// The parsed tree, one node per line, children indented (`ubiq query --explain`): how the
    /// parser grouped the predicate, with every key under its short name and every value as
    /// bound (`%@` and `%K` replaced, spellings of `downloadingStatus` made canonical).
    public var tree: String { lines(depth: 0).joined(separator: "\n") }

    func lines(depth: Int) -> [String] {
        let indent = String(repeating: "  ", count: depth)
        switch self {
        case .and(let a, let b): return [indent + "AND"] + a.lines(depth: depth + 1) + b.lines(depth: depth + 1)
        case .or(let a, let b): return [indent + "OR"] + a.lines(depth: depth + 1) + b.lines(depth: depth + 1)
        case .not(let p): return [indent + "NOT"] + p.lines(depth: depth + 1)
        case .constant(let c): return [indent + (c ? "TRUEPREDICATE" : "FALSEPREDICATE")]
        case .comparison(let c): return [indent + c.text]
        }
    }
}

extension Comparison {
    var text: String {
        let quantifier = self.quantifier.map { $0.rawValue.uppercased() + " " } ?? ""
        var modifiers = ""
        if options.contains(.caseInsensitive) { modifiers += "c" }
        if options.contains(.diacriticInsensitive) { modifiers += "d" }
        let op = Self.spelling[self.op]! + (modifiers.isEmpty ? "" : "[\(modifiers)]")
        return flipped ? "\(quantifier)\(value.text) \(op) \(key.name)" : "\(quantifier)\(key.name) \(op) \(value.text)"
    }

    static let spelling: [Operator: String] = [
        .equal: "==", .notEqual: "!=", .less: "<", .lessOrEqual: "<=", .greater: ">", .greaterOrEqual: ">=", .contains: "CONTAINS",
        .in: "IN", .beginsWith: "BEGINSWITH", .endsWith: "ENDSWITH", .like: "LIKE", .matches: "MATCHES", .between: "BETWEEN",
    ]
}

extension Value {
    var text: String {
        switch self {
        case .string(let s): return Self.quoted(s)
        case .number(let n): return n == n.rounded() && abs(n) < 1e15 ? String(Int64(n)) : String(n)
        case .bool(let b): return b ? "YES" : "NO"
        case .null: return "nil"
        case .date(.now(let seconds)): return "$time.now(\(Value.number(seconds).text))"
        case .date(.today(let days)): return "$time.today(\(Value.number(days).text))"
        case .date(.iso(let text)): return "$time.iso(\(Self.quoted(text)))"
        case .date(.referenceSeconds(let seconds)): return "CAST(\(Value.number(seconds).text), \"NSDate\")"
        case .array(let elements): return "{" + elements.map(\.text).joined(separator: ", ") + "}"
        case .bounds(let low, let high): return "{\(low.text), \(high.text)}"
        }
    }

    /// A double-quoted string literal the lexer reads back as exactly `s`, whatever it holds:
    /// also how a program writes a value into a predicate's text. A backslash is doubled, so
    /// `\*` in a pattern stays a literal star.
    public static func quoted(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\t": out += "\\t"
            case "\r": out += "\\r"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F {
                    out += String(format: "\\u%04x", scalar.value)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        return out + "\""
    }
}
