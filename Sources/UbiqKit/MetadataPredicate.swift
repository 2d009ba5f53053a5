import Foundation
import QueryLanguage

/// A metadata query's predicate: the NSPredicate format strings iCloud apps give
/// NSMetadataQuery (docs/QUERY_LANGUAGE.md), with `%K` and `%@` filled from arguments as
/// `NSPredicate(format:)` fills them. swift-corelibs-foundation's `NSPredicate(format:)` does
/// not parse on Linux; this keeps the text for the mount's daemon, which does.
///
///     MetadataPredicate(format: "%K LIKE %@", NSMetadataItemFSNameKey, "*.txt")
public struct MetadataPredicate: Sendable, Hashable, CustomStringConvertible {
    /// The predicate with every argument written in: what the daemon parses.
    public let predicateFormat: String

    /// A value for `%K` or `%@`. A string fills `%@` as a quoted string literal (every quote,
    /// backslash and control character escaped, so no value can change the predicate around
    /// it) and `%K` as a key name; numbers, booleans and dates fill `%@` as literals of their type.
    public enum Argument: Sendable, Hashable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral, ExpressibleByBooleanLiteral {
        case string(String)
        case integer(Int64)
        case double(Double)
        case bool(Bool)
        case date(Date)

        public init(stringLiteral value: String) { self = .string(value) }
        public init(integerLiteral value: Int64) { self = .integer(value) }
        public init(floatLiteral value: Double) { self = .double(value) }
        public init(booleanLiteral value: Bool) { self = .bool(value) }
    }

    public enum FormatError: Error, CustomStringConvertible, Sendable, Equatable {
        /// More `%K`/`%@` than arguments, or arguments left over.
        case argumentCount(expected: Int, given: Int)
        /// `%K` takes a key name: letters, digits and `_ . # : -`.
        case notAKey(String)
        /// A number JSON and the query language have no literal for.
        case notFinite(Double)

        public var description: String {
            switch self {
            case .argumentCount(let expected, let given): "the format has \(expected) %K and %@, and \(given) arguments were given"
            case .notAKey(let text): "'\(text)' is not a key name for %K"
            case .notFinite(let number): "\(number) has no literal in a predicate"
            }
        }
    }

    /// A predicate written out in full, without substitutions.
    public init(_ predicateFormat: String) { self.predicateFormat = predicateFormat }

    /// `%K` and `%@` outside quotes take the arguments in order; `%%` is a `%`. Quoted text is
    /// left as it is, as NSPredicate leaves it.
    public init(format: String, arguments: [Argument]) throws(FormatError) {
        var out = ""
        var remaining = arguments[...]
        var expected = 0
        var quote: Character?
        var escaped = false
        var index = format.startIndex
        while index < format.endIndex {
            let c = format[index]
            let next = format.index(after: index)
            if let open = quote {
                out.append(c)
                if escaped { escaped = false } else if c == "\\" { escaped = true } else if c == open { quote = nil }
                index = next
                continue
            }
            if c == "'" || c == "\"" { quote = c }
            if c == "%", next < format.endIndex, ["K", "@", "%"].contains(format[next]) {
                let directive = format[next]
                index = format.index(after: next)
                if directive == "%" {
                    out.append("%")
                    continue
                }
                expected += 1
                guard let argument = remaining.popFirst() else { continue }
                out += try directive == "K" ? Self.key(argument) : Self.literal(argument)
                continue
            }
            out.append(c)
            index = next
        }
        guard remaining.isEmpty, expected == arguments.count else { throw .argumentCount(expected: expected, given: arguments.count) }
        predicateFormat = out
    }

    public init(format: String, _ arguments: any MetadataPredicateArgument...) throws(FormatError) {
        try self.init(format: format, arguments: arguments.map(\.predicateArgument))
    }

    public var description: String { predicateFormat }

    static func key(_ argument: Argument) throws(FormatError) -> String {
        guard case .string(let name) = argument, !name.isEmpty,
              name.unicodeScalars.allSatisfy({ $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "_.#:-".unicodeScalars.contains($0)) })
        else { throw .notAKey("\(argument)") }
        return name
    }

    static func literal(_ argument: Argument) throws(FormatError) -> String {
        switch argument {
        case .string(let text): return Value.quoted(text)
        case .integer(let number): return String(number)
        case .double(let number):
            guard number.isFinite else { throw .notFinite(number) }
            return "\(number)"
        case .bool(let value): return value ? "TRUE" : "FALSE"
        // Seconds since 2001-01-01 UTC, as NSDate keeps them: a literal without a rounding
        // to whole seconds or a time zone.
        case .date(let date): return "CAST(\(date.timeIntervalSinceReferenceDate), \"NSDate\")"
        }
    }
}

/// What fills `%K` or `%@`: strings, integers, floating-point numbers, booleans and dates.
public protocol MetadataPredicateArgument: Sendable {
    var predicateArgument: MetadataPredicate.Argument { get }
}

extension MetadataPredicate.Argument: MetadataPredicateArgument {
    public var predicateArgument: MetadataPredicate.Argument { self }
}

extension String: MetadataPredicateArgument {
    public var predicateArgument: MetadataPredicate.Argument { .string(self) }
}

extension Int: MetadataPredicateArgument {
    public var predicateArgument: MetadataPredicate.Argument { .integer(Int64(self)) }
}

extension Int64: MetadataPredicateArgument {
    public var predicateArgument: MetadataPredicate.Argument { .integer(self) }
}

extension Double: MetadataPredicateArgument {
    public var predicateArgument: MetadataPredicate.Argument { .double(self) }
}

extension Bool: MetadataPredicateArgument {
    public var predicateArgument: MetadataPredicate.Argument { .bool(self) }
}

extension Date: MetadataPredicateArgument {
    public var predicateArgument: MetadataPredicate.Argument { .date(self) }
}
