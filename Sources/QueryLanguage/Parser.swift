import Foundation

/// Parses a query of the NSPredicate subset (docs/QUERY_LANGUAGE.md: grammar G1–G11, precedence
/// P1, types S13) into a `QueryPredicate` whose keys are resolved and whose values have their keys'
/// types. It does no I/O; every error names the offset of the offending token.
public struct QueryParser {
    var tokens: [Token]
    var index = 0
    let arguments: [String]
    var nextArgument = 0
    let variables: [String: String]
    let length: Int

    /// `arguments` bind `%K` and `%@` in order; `variables` bind `$NAME`.
    public static func parse(_ text: String, arguments: [String] = [], variables: [String: String] = [:]) throws(QueryError) -> QueryPredicate {
        var lexer = Lexer(text)
        var parser = QueryParser(tokens: try lexer.tokens(), arguments: arguments, variables: variables, length: text.unicodeScalars.count)
        let predicate = try parser.predicate()
        let last = parser.peek
        guard last.kind == .end else { throw QueryError("unexpected text after the query", at: last.position) }
        if parser.nextArgument < arguments.count {
            throw QueryError("\(arguments.count - parser.nextArgument) argument(s) left over: the query has fewer %K and %@", at: parser.length)
        }
        return predicate
    }

    var peek: Token { tokens[index] }

    mutating func advance() -> Token {
        defer { if index < tokens.count - 1 { index += 1 } }
        return tokens[index]
    }

    func isWord(_ token: Token, _ words: String...) -> Bool {
        if case .word(let w, escaped: false) = token.kind { return words.contains(w.uppercased()) }
        return false
    }

    func isMark(_ token: Token, _ marks: String...) -> Bool {
        if case .mark(let m) = token.kind { return marks.contains(m) }
        return false
    }

    func unexpected(_ token: Token, expecting what: String) -> QueryError {
        token.kind == .end ? QueryError("unexpected end of the query: expected \(what)", at: length) : QueryError("expected \(what)", at: token.position)
    }

    // MARK: Predicates (P1: NOT binds tighter than AND, AND tighter than OR)

    mutating func predicate() throws(QueryError) -> QueryPredicate {
        var left = try conjunction()
        while isWord(peek, "OR") || isMark(peek, "||") {
            _ = advance()
            left = .or(left, try conjunction())
        }
        return left
    }

    mutating func conjunction() throws(QueryError) -> QueryPredicate {
        var left = try negation()
        while isWord(peek, "AND") || isMark(peek, "&&") {
            _ = advance()
            left = .and(left, try negation())
        }
        return left
    }

    mutating func negation() throws(QueryError) -> QueryPredicate {
        if isWord(peek, "NOT") || isMark(peek, "!") {
            _ = advance()
            return .not(try negation())
        }
        return try primary()
    }

    mutating func primary() throws(QueryError) -> QueryPredicate {
        if isMark(peek, "(") {
            _ = advance()
            let inner = try predicate()
            guard isMark(peek, ")") else { throw unexpected(peek, expecting: "')'") }
            _ = advance()
            return inner
        }
        if isWord(peek, "TRUEPREDICATE") { _ = advance(); return .constant(true) }
        if isWord(peek, "FALSEPREDICATE") { _ = advance(); return .constant(false) }
        return .comparison(try comparison())
    }

    // MARK: Comparisons

    enum Operand {
        case key(Key, Int)
        case value(Value, Int, suffix: Options)
        var position: Int { switch self { case .key(_, let p), .value(_, let p, _): p } }
    }

    static let wordOperators: [String: Operator] = [
        "CONTAINS": .contains, "IN": .in, "BEGINSWITH": .beginsWith, "ENDSWITH": .endsWith, "LIKE": .like, "MATCHES": .matches, "BETWEEN": .between,
    ]
    static let markOperators: [String: Operator] = [
        "==": .equal, "=": .equal, "!=": .notEqual, "<>": .notEqual, "<": .less, "<=": .lessOrEqual, "=<": .lessOrEqual,
        ">": .greater, ">=": .greaterOrEqual, "=>": .greaterOrEqual,
    ]

    func comparisonOperator(_ token: Token) -> Operator? {
        switch token.kind {
        case .mark(let m): Self.markOperators[m]
        case .word(let w, escaped: false): Self.wordOperators[w.uppercased()]
        default: nil
        }
    }

    mutating func comparison() throws(QueryError) -> Comparison {
        var quantifier: (Quantifier, Int)?
        if case .word(let w, escaped: false) = peek.kind, let q = ["ANY": Quantifier.any, "SOME": .any, "ALL": .all, "NONE": .none][w.uppercased()] {
            quantifier = (q, advance().position)
        }
        let left = try operand()
        let opToken = peek
        guard let op = comparisonOperator(opToken) else { throw unexpected(opToken, expecting: "a comparison operator (==, !=, <, >, CONTAINS, IN, BEGINSWITH, ENDSWITH, LIKE, MATCHES, BETWEEN)") }
        _ = advance()
        var options: Options = []
        if isMark(peek, "[") {
            let at = advance().position
            guard op != .between else { throw QueryError("BETWEEN takes no [c] or [d]", at: at) }
            guard case .word(let letters, _) = peek.kind, let parsed = Self.options(letters) else { throw QueryError("expected c, d or cd inside [ ]", at: peek.position) }
            _ = advance()
            guard isMark(peek, "]") else { throw unexpected(peek, expecting: "']'") }
            _ = advance()
            options = parsed
        }
        let right: Operand
        if op == .between {
            right = try bounds()
        } else {
            right = try operand()
        }
        if comparisonOperator(peek) != nil { throw QueryError("comparisons do not chain: join them with AND", at: peek.position) }
        return try Self.check(quantifier: quantifier, left, op, at: opToken.position, options: options, right)
    }

    static func options(_ letters: String) -> Options? {
        switch letters.lowercased() {
        case "c": .caseInsensitive
        case "d": .diacriticInsensitive
        case "cd", "dc": [.caseInsensitive, .diacriticInsensitive]
        default: nil
        }
    }

    mutating func bounds() throws(QueryError) -> Operand {
        let open = peek
        guard isMark(open, "{") else { throw unexpected(open, expecting: "'{low, high}' after BETWEEN") }
        _ = advance()
        let low = try operand()
        guard isMark(peek, ",") else { throw unexpected(peek, expecting: "',' between the two bounds") }
        _ = advance()
        let high = try operand()
        guard isMark(peek, "}") else { throw unexpected(peek, expecting: "'}': BETWEEN takes exactly two bounds") }
        _ = advance()
        guard case .value(let l, _, _) = low, case .value(let h, _, _) = high else { throw QueryError("the bounds of BETWEEN are values, not keys", at: open.position) }
        return .value(.bounds(l, h), open.position, suffix: [])
    }

    // (`FIRST`, `LAST`, `SIZE` only index arrays, which the grammar has not: `size` is a key.)
    static let unsupported: Set<String> = ["SELF", "SUBQUERY", "FUNCTION", "ANYKEY", "FETCH", "UTI", "INRANGE"]

    mutating func operand() throws(QueryError) -> Operand {
        let token = advance()
        switch token.kind {
        case .string(let s):
            return .value(.string(s), token.position, suffix: token.suffix.flatMap(Self.options) ?? [])
        case .number(let n):
            return .value(.number(n), token.position, suffix: [])
        case .mark("-"):
            guard case .number(let n) = peek.kind else { throw unexpected(peek, expecting: "a number after '-'") }
            _ = advance()
            return .value(.number(-n), token.position, suffix: [])
        case .mark("{"):
            var elements: [Value] = []
            if isMark(peek, "}") {
                _ = advance()
                return .value(.array([]), token.position, suffix: [])
            }
            while true {
                guard case .value(let v, let at, _) = try operand() else { throw QueryError("an array holds values, not keys", at: tokens[index - 1].position) }
                if case .array = v { throw QueryError("arrays do not nest", at: at) }
                elements.append(v)
                if isMark(peek, ",") { _ = advance(); continue }
                guard isMark(peek, "}") else { throw unexpected(peek, expecting: "',' or '}'") }
                _ = advance()
                return .value(.array(elements), token.position, suffix: [])
            }
        case .word(let w, let escaped):
            if !escaped {
                switch w.uppercased() {
                case "TRUE", "YES": return .value(.bool(true), token.position, suffix: [])
                case "FALSE", "NO": return .value(.bool(false), token.position, suffix: [])
                case "NULL", "NIL": return .value(.null, token.position, suffix: [])
                case "CAST": return try cast(at: token.position)
                case let u where Self.unsupported.contains(u):
                    throw QueryError("\(w) is not supported in metadata queries", at: token.position)
                default: break
                }
            }
            var name = w
            while isMark(peek, "."), case .word(let part, _) = tokens[index + 1].kind {
                _ = advance()
                _ = advance()
                name += "." + part
            }
            guard let key = KeyTable.key(named: name) else { throw QueryError("unknown key '\(name)'", at: token.position) }
            return .key(key, token.position)
        case .dollar(let name):
            if name.hasPrefix("time.") { return .value(.date(try time(String(name.dropFirst(5)), at: token.position)), token.position, suffix: []) }
            guard let bound = variables[name] else { throw QueryError("$\(name) has no value: bind it with --var \(name)=VALUE", at: token.position) }
            return .value(.string(bound), token.position, suffix: [])
        case .placeholder(let kind):
            guard nextArgument < arguments.count else { throw QueryError("%\(kind) has no argument: give one with --arg", at: token.position) }
            let argument = arguments[nextArgument]
            nextArgument += 1
            if kind == "@" { return .value(.string(argument), token.position, suffix: []) }
            guard let key = KeyTable.key(named: argument) else { throw QueryError("unknown key '\(argument)' (the argument of %K)", at: token.position) }
            return .key(key, token.position)
        case .end:
            throw QueryError("unexpected end of the query: expected a key or a value", at: length)
        default:
            throw QueryError("expected a key or a value", at: token.position)
        }
    }

    /// `$time.now`, `$time.today`, `$time.yesterday`, each with an optional `(±n)`, and
    /// `$time.iso("…")` (G7).
    mutating func time(_ name: String, at position: Int) throws(QueryError) -> TimeValue {
        switch name {
        case "now": return .now(offsetSeconds: try offset())
        case "today": return .today(offsetDays: try offset())
        case "yesterday": return .today(offsetDays: try offset() - 1)
        case "iso":
            guard isMark(peek, "(") else { throw unexpected(peek, expecting: "'(' after $time.iso") }
            _ = advance()
            let text = advance()
            guard case .string(let s) = text.kind else { throw unexpected(text, expecting: "an ISO-8601 string") }
            guard ISOTime.parse(s) != nil else { throw QueryError("'\(s)' is not an ISO-8601 date", at: text.position) }
            guard isMark(peek, ")") else { throw unexpected(peek, expecting: "')'") }
            _ = advance()
            return .iso(s)
        case "this_week", "this_month", "this_year":
            throw QueryError("$time.\(name) is a range, which is not supported: compare with $time.today(-n)", at: position)
        default:
            throw QueryError("unknown time '$time.\(name)' (now, today, yesterday, iso)", at: position)
        }
    }

    mutating func offset() throws(QueryError) -> Double {
        guard isMark(peek, "(") else { return 0 }
        _ = advance()
        var sign = 1.0
        if isMark(peek, "-", "+") { sign = isMark(advance(), "-") ? -1 : 1 }
        let n = advance()
        guard case .number(let value) = n.kind else { throw unexpected(n, expecting: "a number") }
        guard isMark(peek, ")") else { throw unexpected(peek, expecting: "')'") }
        _ = advance()
        return sign * value
    }

    /// `CAST(n, "NSDate")` or `CAST('ISO', "NSDate")`.
    mutating func cast(at position: Int) throws(QueryError) -> Operand {
        guard isMark(peek, "(") else { throw unexpected(peek, expecting: "'(' after CAST") }
        _ = advance()
        let what = advance()
        var negative = false
        var subject = what
        if isMark(what, "-") {
            negative = true
            subject = advance()
        }
        guard isMark(peek, ",") else { throw unexpected(peek, expecting: "',' in CAST") }
        _ = advance()
        let type = advance()
        guard case .string(let t) = type.kind, t.lowercased() == "nsdate" else { throw QueryError("CAST makes dates only: CAST(…, \"NSDate\")", at: type.position) }
        guard isMark(peek, ")") else { throw unexpected(peek, expecting: "')'") }
        _ = advance()
        switch subject.kind {
        case .number(let n): return .value(.date(.referenceSeconds(negative ? -n : n)), position, suffix: [])
        case .string(let s) where !negative:
            guard ISOTime.parse(s) != nil else { throw QueryError("'\(s)' is not an ISO-8601 date", at: subject.position) }
            return .value(.date(.iso(s)), position, suffix: [])
        default: throw QueryError("CAST takes a number of seconds or an ISO-8601 string", at: subject.position)
        }
    }
}
