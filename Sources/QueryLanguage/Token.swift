/// One token of a query, with the offset (in Unicode scalars) where it starts.
struct Token: Equatable, Sendable {
    enum Kind: Equatable, Sendable {
        /// A word: a keyword or a key's part. `escaped` for `#word`, which is never a keyword.
        case word(String, escaped: Bool)
        case string(String)
        case number(Double)
        /// `==` `!=` `<=` `&&` `(` `{` `.` and the other marks.
        case mark(String)
        /// `$NAME` (a variable) and `$time.…` (a time).
        case dollar(String)
        /// `%K` or `%@`.
        case placeholder(Character)
        case end
    }

    let kind: Kind
    let position: Int
    /// The string literal's Spotlight-style suffix modifier (`"…"cd`, rule G11).
    var suffix: String? = nil
}

/// Splits a query into tokens (rules G1, G3–G5, G11).
struct Lexer {
    let scalars: [Unicode.Scalar]
    var index = 0

    init(_ text: String) { scalars = Array(text.unicodeScalars) }

    static let marks = ["==", "!=", "<>", "<=", "=<", ">=", "=>", "&&", "||", "=", "<", ">", "!", "(", ")", "{", "}", "[", "]", ",", ".", "-", "+"]

    mutating func tokens() throws(QueryError) -> [Token] {
        var out: [Token] = []
        while true {
            let token = try next()
            out.append(token)
            if token.kind == .end { return out }
        }
    }

    func peek(_ offset: Int = 0) -> Unicode.Scalar? {
        index + offset < scalars.count ? scalars[index + offset] : nil
    }

    static func isWordStart(_ s: Unicode.Scalar) -> Bool { s.isASCII && (s.properties.isAlphabetic || s == "_") }
    static func isWordPart(_ s: Unicode.Scalar) -> Bool { isWordStart(s) || ("0"..."9").contains(s) }

    mutating func next() throws(QueryError) -> Token {
        while let s = peek(), [" ", "\t", "\n", "\r", "\u{0C}"].contains(s) { index += 1 }
        let start = index
        guard let s = peek() else { return Token(kind: .end, position: start) }
        if s == "'" || s == "\"" { return try string(quote: s) }
        if ("0"..."9").contains(s) { return Token(kind: .number(try number()), position: start) }
        if Self.isWordStart(s) { return Token(kind: .word(word(), escaped: false), position: start) }
        if s == "#", let n = peek(1), Self.isWordStart(n) {
            index += 1
            return Token(kind: .word(word(), escaped: true), position: start)
        }
        if s == "$" {
            index += 1
            var name = ""
            while let c = peek(), Self.isWordPart(c) || c == "." {
                name.unicodeScalars.append(c)
                index += 1
            }
            guard !name.isEmpty else { throw QueryError("'$' must be followed by a name", at: start) }
            return Token(kind: .dollar(name), position: start)
        }
        if s == "%", let n = peek(1), n == "K" || n == "@" {
            index += 2
            return Token(kind: .placeholder(Character(n)), position: start)
        }
        for mark in Self.marks where matches(mark) {
            index += mark.unicodeScalars.count
            return Token(kind: .mark(mark), position: start)
        }
        if s == "?" { throw QueryError("'?' is not a token (a wildcard goes inside a string)", at: start) }
        if s == "*" { throw QueryError("'*' is not supported in metadata queries: not as a key, nor for arithmetic (a wildcard goes inside a string)", at: start) }
        if s == "/" || s == ":" { throw QueryError("'\(s)' is not supported in metadata queries", at: start) }
        throw QueryError("unexpected character '\(s)'", at: start)
    }

    func matches(_ mark: String) -> Bool {
        for (i, m) in mark.unicodeScalars.enumerated() where peek(i) != m { return false }
        return true
    }

    mutating func word() -> String {
        var text = ""
        while let c = peek(), Self.isWordPart(c) {
            text.unicodeScalars.append(c)
            index += 1
        }
        return text
    }

    /// Decimal with fraction and exponent, or `0x`, `0o`, `0b` (G5).
    mutating func number() throws(QueryError) -> Double {
        let start = index
        if peek() == "0", let base = peek(1), let radix = ["x": 16, "X": 16, "o": 8, "O": 8, "b": 2, "B": 2][Character(base)] {
            index += 2
            var digits = ""
            while let c = peek(), Self.isWordPart(c) {
                digits.unicodeScalars.append(c)
                index += 1
            }
            guard let value = Int64(digits, radix: radix) else { throw QueryError("'\(String(scalars[start..<index].map(Character.init)))' is not a number", at: start) }
            return Double(value)
        }
        var text = ""
        func digits() { while let c = peek(), ("0"..."9").contains(c) { text.unicodeScalars.append(c); index += 1 } }
        digits()
        if peek() == ".", let d = peek(1), ("0"..."9").contains(d) {
            text += "."
            index += 1
            digits()
        }
        if let e = peek(), e == "e" || e == "E" {
            let sign = peek(1)
            let hasSign = sign == "+" || sign == "-"
            if let d = peek(hasSign ? 2 : 1), ("0"..."9").contains(d) {
                text += "e" + (hasSign ? String(Character(sign!)) : "")
                index += hasSign ? 2 : 1
                digits()
            }
        }
        if let c = peek(), Self.isWordStart(c) { throw QueryError("a number cannot run into a word", at: index) }
        guard let value = Double(text) else { throw QueryError("'\(text)' is not a number", at: start) }
        return value
    }

    /// A quoted string with the escapes of G4; the other quote is literal inside (G3).
    mutating func string(quote: Unicode.Scalar) throws(QueryError) -> Token {
        let start = index
        index += 1
        var text = ""
        while true {
            guard let c = peek() else { throw QueryError("unterminated string", at: start) }
            index += 1
            if c == quote { break }
            if c != "\\" {
                text.unicodeScalars.append(c)
                continue
            }
            guard let e = peek() else { throw QueryError("unterminated string", at: start) }
            let escapeAt = index - 1
            index += 1
            switch e {
            case "a": text += "\u{07}"
            case "b": text += "\u{08}"
            case "f": text += "\u{0C}"
            case "n": text += "\n"
            case "r": text += "\r"
            case "t": text += "\t"
            case "v": text += "\u{0B}"
            case "x", "X": text.unicodeScalars.append(try code(digits: 2, radix: 16, at: escapeAt))
            case "u", "U": text.unicodeScalars.append(try code(digits: 4, radix: 16, at: escapeAt))
            case "0"..."7":
                index -= 1
                var octal = ""
                while octal.count < 3, let d = peek(), ("0"..."7").contains(d) {
                    octal.unicodeScalars.append(d)
                    index += 1
                }
                guard let v = UInt32(octal, radix: 8), let scalar = Unicode.Scalar(v) else { throw QueryError("bad octal escape", at: escapeAt) }
                text.unicodeScalars.append(scalar)
            // `\*` and `\?` keep their backslash: the pattern rules (S3) make them literal.
            case "*", "?": text += "\\" + String(Character(e))
            default: text.unicodeScalars.append(e)  // `\\`, `\'`, `\"`, and any other: itself
            }
        }
        var token = Token(kind: .string(text), position: start)
        // G11: `"…"c`, `"…"d`, `"…"cd` right after the closing quote.
        if let c = peek(), Self.isWordStart(c) {
            let suffixAt = index
            let letters = word()
            guard ["c", "d", "cd"].contains(letters.lowercased()) else {
                throw QueryError("'\(letters)' after a string: only the modifiers c, d and cd may follow it", at: suffixAt)
            }
            token.suffix = letters.lowercased()
        }
        return token
    }

    mutating func code(digits: Int, radix: Int, at position: Int) throws(QueryError) -> Unicode.Scalar {
        var hex = ""
        for _ in 0..<digits {
            guard let d = peek(), d.properties.isASCIIHexDigit else { throw QueryError("escape needs \(digits) hex digits", at: position) }
            hex.unicodeScalars.append(d)
            index += 1
        }
        guard let v = UInt32(hex, radix: radix), let scalar = Unicode.Scalar(v) else { throw QueryError("escape names no character", at: position) }
        return scalar
    }
}
