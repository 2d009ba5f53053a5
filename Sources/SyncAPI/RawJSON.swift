import Foundation

/// Where the values of a JSON text are, as byte ranges, without decoding them: the key-value
/// store's answers carry each value as the exact bytes it was written with, and a JSON decoder
/// would hand back a tree that re-encodes differently (spacing, escapes, number spelling).
///
/// Meant for texts that are JSON: on anything else it throws, or finds nonsense, but always
/// ends and never reads out of bounds. It keeps no stack, so a value nested however deep costs
/// nothing more.
public enum RawJSON {
    public struct Malformed: Error, CustomStringConvertible {
        public let offset: Int
        public var description: String { "malformed JSON at byte \(offset)" }
    }

    /// The members of the object at `range`: each name, decoded, and its value's range. A
    /// value's range runs from the colon to the comma or brace after it, so it keeps the
    /// whitespace around the value: from a text whose writer put no whitespace there of its
    /// own, that is exactly the bytes it embedded.
    public static func members(of bytes: [UInt8], in range: Range<Int>) throws -> [(name: String, value: Range<Int>)] {
        var members: [(String, Range<Int>)] = []
        try walk(bytes, range, open: UInt8(ascii: "{"), close: UInt8(ascii: "}")) { i, last in
            guard bytes[i] == UInt8(ascii: "\"") else { throw Malformed(offset: i) }
            let nameEnd = try skip(bytes, from: i, upTo: last)
            let name = try JSONDecoder().decode(String.self, from: Data(bytes[i..<nameEnd]))
            let colon = whitespace(bytes, from: nameEnd, upTo: last)
            guard colon < last, bytes[colon] == UInt8(ascii: ":") else { throw Malformed(offset: colon) }
            let value = whitespace(bytes, from: colon + 1, upTo: last)
            let end = whitespace(bytes, from: try skip(bytes, from: value, upTo: last), upTo: last)
            members.append((name, (colon + 1)..<end))
            return end
        }
        return members
    }

    /// The elements of the array at `range`: each one's range, with the whitespace around it
    /// (as for `members`).
    public static func elements(of bytes: [UInt8], in range: Range<Int>) throws -> [Range<Int>] {
        var elements: [Range<Int>] = []
        try walk(bytes, range, open: UInt8(ascii: "["), close: UInt8(ascii: "]")) { i, last in
            // From the bracket or comma before it.
            var start = i
            while isWhitespace(bytes[start - 1]) { start -= 1 }
            let end = whitespace(bytes, from: try skip(bytes, from: i, upTo: last), upTo: last)
            elements.append(start..<end)
            return end
        }
        return elements
    }

    /// Calls `each` with the start of every entry of the object or array at `range` (which may
    /// have whitespace around it) and the position of its closing bracket; `each` returns
    /// where its entry ends, the whitespace after it included.
    static func walk(_ bytes: [UInt8], _ range: Range<Int>, open: UInt8, close: UInt8, _ each: (Int, Int) throws -> Int) throws {
        let first = whitespace(bytes, from: range.lowerBound, upTo: range.upperBound)
        var last = range.upperBound - 1
        while last > first, isWhitespace(bytes[last]) { last -= 1 }
        guard first < last, bytes[first] == open, bytes[last] == close else { throw Malformed(offset: first) }
        var i = whitespace(bytes, from: first + 1, upTo: last)
        if i == last { return }
        while true {
            i = try each(i, last)
            if i == last { return }
            guard i < last, bytes[i] == UInt8(ascii: ",") else { throw Malformed(offset: i) }
            i = whitespace(bytes, from: i + 1, upTo: last)
        }
    }

    static func isWhitespace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D }

    static func whitespace(_ bytes: [UInt8], from start: Int, upTo end: Int) -> Int {
        var i = start
        while i < end, isWhitespace(bytes[i]) { i += 1 }
        return i
    }

    /// Where the value that starts at `start` ends: past its closing quote or bracket, or at
    /// the separator, bracket or whitespace after a number or a literal.
    static func skip(_ bytes: [UInt8], from start: Int, upTo end: Int) throws -> Int {
        guard start < end else { throw Malformed(offset: start) }
        switch bytes[start] {
        case UInt8(ascii: "\""):
            var i = start + 1
            while i < end {
                if bytes[i] == UInt8(ascii: "\\") {
                    i += 2
                    continue
                }
                if bytes[i] == UInt8(ascii: "\"") { return i + 1 }
                i += 1
            }
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            // Brackets inside strings do not count.
            var depth = 0
            var i = start
            while i < end {
                switch bytes[i] {
                case UInt8(ascii: "\""):
                    i = try skip(bytes, from: i, upTo: end)
                    continue
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    depth -= 1
                    if depth == 0 { return i + 1 }
                default: break
                }
                i += 1
            }
        default:
            var i = start
            while i < end, !isSeparator(bytes[i]) { i += 1 }
            if i > start { return i }
        }
        throw Malformed(offset: start)
    }

    static func isSeparator(_ b: UInt8) -> Bool {
        b == UInt8(ascii: ",") || b == UInt8(ascii: ":") || b == UInt8(ascii: "}") || b == UInt8(ascii: "]") || isWhitespace(b)
    }
}
