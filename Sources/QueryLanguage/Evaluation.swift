import Foundation

/// A value an item has for a key, as the index hands it to `QueryPredicate.matches`.
public enum QueryValue: Equatable, Sendable {
    case string(String)
    case number(Double)
    case date(Date)
    case bool(Bool)
    /// Several strings (`tags`, `contentTypeTree`).
    case strings([String])
}

/// When and where a query runs: what `$time` and date-only values mean (rules G7, S14).
public struct QueryClock: Sendable {
    public var now: Date
    public var timeZone: TimeZone
    public init(now: Date = Date(), timeZone: TimeZone = .current) {
        self.now = now
        self.timeZone = timeZone
    }

    /// The instant a written time stands for.
    public func instant(_ time: TimeValue) -> Date? {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        switch time {
        case .now(let seconds): return now.addingTimeInterval(seconds)
        case .today(let days):
            return calendar.date(byAdding: .day, value: Int(days), to: calendar.startOfDay(for: now))
        case .referenceSeconds(let seconds): return Date(timeIntervalSinceReferenceDate: seconds)
        case .iso(let text):
            if text.count == 10, let day = ISOTime.parse(text) {
                // A date alone is that day's midnight here, not in UTC.
                let utc = Calendar(identifier: .gregorian).dateComponents(in: TimeZone(identifier: "UTC")!, from: day)
                return calendar.date(from: DateComponents(year: utc.year, month: utc.month, day: utc.day))
            }
            return ISOTime.parse(text)
        }
    }
}

extension QueryPredicate {
    /// The same predicate with every written time turned into its instant under `clock`: done
    /// once per query, not once per item (an ISO-8601 string is parsed by formatters made anew).
    public func fixingTimes(_ clock: QueryClock) -> QueryPredicate {
        switch self {
        case .and(let a, let b): return .and(a.fixingTimes(clock), b.fixingTimes(clock))
        case .or(let a, let b): return .or(a.fixingTimes(clock), b.fixingTimes(clock))
        case .not(let p): return .not(p.fixingTimes(clock))
        case .constant: return self
        case .comparison(var c):
            c.value = c.value.fixingTimes(clock)
            return .comparison(c)
        }
    }

    /// Whether an item matches: `value` answers each key (nil when the item has none, S12).
    public func matches(_ value: (Key) -> QueryValue?, clock: QueryClock) -> Bool {
        switch self {
        case .and(let a, let b): a.matches(value, clock: clock) && b.matches(value, clock: clock)
        case .or(let a, let b): a.matches(value, clock: clock) || b.matches(value, clock: clock)
        case .not(let p): !p.matches(value, clock: clock)
        case .constant(let c): c
        case .comparison(let c): c.matches(value(c.key), clock: clock)
        }
    }
}

extension Value {
    func fixingTimes(_ clock: QueryClock) -> Value {
        switch self {
        case .date(let t): clock.instant(t).map { .date(.referenceSeconds($0.timeIntervalSinceReferenceDate)) } ?? self
        case .array(let elements): .array(elements.map { $0.fixingTimes(clock) })
        case .bounds(let low, let high): .bounds(low.fixingTimes(clock), high.fixingTimes(clock))
        default: self
        }
    }
}

extension Comparison {
    func matches(_ actual: QueryValue?, clock: QueryClock) -> Bool {
        // S12: a missing value equals only NULL, differs from everything else, and orders with nothing.
        guard let actual else {
            switch op {
            case .equal: return value == .null
            case .notEqual: return value != .null
            default: return false
            }
        }
        if value == .null { return op == .notEqual }
        if case .strings(let elements) = actual {
            // S11: CONTAINS (and 'x' IN key) on several values is membership, unquantified.
            if quantifier == nil, op == .contains || (op == .in && flipped), case .string(let wanted) = value {
                return elements.contains { QueryText.equal($0, wanted, options) }
            }
            let each = elements.map { matchesOne(.string($0), clock: clock) }
            switch quantifier {
            case .some(.all): return each.allSatisfy { $0 }
            case .some(.none): return !each.contains(true)
            case .some(.any), nil: return each.contains(true)  // S10: an unquantified comparison is ANY
            }
        }
        return matchesOne(actual, clock: clock)
    }

    func matchesOne(_ actual: QueryValue, clock: QueryClock) -> Bool {
        switch op {
        case .in where !flipped:
            guard case .array(let elements) = value else { return false }
            return elements.contains { Comparison(quantifier: nil, key: key, op: .equal, options: options, value: $0, flipped: false).plainEqual(actual, clock: clock) }
        case .between:
            guard case .bounds(let low, let high) = value,
                  let l = order(actual, low, clock: clock), let h = order(actual, high, clock: clock)
            else { return false }
            return l >= 0 && h <= 0
        default: break
        }
        switch (actual, value) {
        case (.string(let s), .string(let pattern)) where ![.less, .lessOrEqual, .greater, .greaterOrEqual].contains(op):
            return QueryText.compare(s, op, pattern, options: options, flipped: flipped)
        case (.bool(let b), .bool(let wanted)):
            return op == .equal ? b == wanted : op == .notEqual ? b != wanted : false
        default:
            guard let sign = order(actual, value, clock: clock) else { return false }
            switch op {
            case .equal: return sign == 0
            case .notEqual: return sign != 0
            case .less: return sign < 0
            case .lessOrEqual: return sign <= 0
            case .greater: return sign > 0
            case .greaterOrEqual: return sign >= 0
            default: return false
            }
        }
    }

    /// `==` without globbing: what `IN {…}` compares with.
    func plainEqual(_ actual: QueryValue, clock: QueryClock) -> Bool {
        if case .string(let s) = actual, case .string(let v) = value { return QueryText.equal(s, v, options) }
        if case .bool(let b) = actual, case .bool(let v) = value { return b == v }
        return order(actual, value, clock: clock) == 0
    }

    /// -1, 0, 1: the item's value against a written one; nil when they do not compare.
    func order(_ actual: QueryValue, _ written: Value, clock: QueryClock) -> Int? {
        switch (actual, written) {
        case (.number(let a), .number(let b)): return a < b ? -1 : a > b ? 1 : 0
        case (.date(let a), .date(let t)):
            guard let b = clock.instant(t) else { return nil }
            return a < b ? -1 : a > b ? 1 : 0
        case (.string(let a), .string(let b)): return QueryText.order(a, b, options)
        default: return nil
        }
    }
}

/// String comparison: NFC (S1), case folding for `[c]` (S5), diacritics removed for `[d]` (S6).
/// Public: the index's SQL calls the same functions, so that both evaluations agree.
public enum QueryText {
    public static func folded(_ s: String, _ options: Options) -> String {
        var out = s.precomposedStringWithCanonicalMapping
        var fold: String.CompareOptions = []
        if options.contains(.caseInsensitive) { fold.insert(.caseInsensitive) }
        if options.contains(.diacriticInsensitive) { fold.insert(.diacriticInsensitive) }
        if !fold.isEmpty { out = out.folding(options: fold, locale: nil).precomposedStringWithCanonicalMapping }
        return out
    }

    public static func equal(_ a: String, _ b: String, _ options: Options) -> Bool { folded(a, options) == folded(b, options) }

    /// -1, 0, 1: `a` against `b`, folded, by Unicode scalars.
    public static func order(_ a: String, _ b: String, _ options: Options) -> Int {
        let (x, y) = (folded(a, options), folded(b, options))
        return x.unicodeScalars.lexicographicallyPrecedes(y.unicodeScalars) ? -1 : x == y ? 0 : 1
    }

    public static func compare(_ subject: String, _ op: Operator, _ pattern: String, options: Options, flipped: Bool) -> Bool {
        let s = folded(subject, options)
        let p = folded(pattern, options)
        switch op {
        // S2: `==` takes Spotlight's value pattern: `*` and `?` glob unless escaped.
        case .equal: return glob(s, p)
        case .notEqual: return !glob(s, p)
        case .like: return glob(s, p)
        case .beginsWith: return !p.isEmpty && s.hasPrefix(p)  // S7: "" matches nothing
        case .endsWith: return !p.isEmpty && s.hasSuffix(p)
        case .contains: return !p.isEmpty && s.contains(p)
        case .in: return flipped && !p.isEmpty && s.contains(p)  // 'x' IN key: x is a part of the key's value
        case .matches:
            guard !pattern.isEmpty, let regex = try? NSRegularExpression(
                pattern: pattern, options: options.contains(.caseInsensitive) ? [.caseInsensitive, .dotMatchesLineSeparators] : [.dotMatchesLineSeparators])
            else { return false }
            let subjectText = options.contains(.diacriticInsensitive) ? folded(subject, .diacriticInsensitive) : subject.precomposedStringWithCanonicalMapping
            let whole = NSRange(subjectText.startIndex..., in: subjectText)
            return regex.firstMatch(in: subjectText, options: [.anchored], range: whole).map { $0.range == whole } ?? false
        default: return false
        }
    }

    /// One element of a whole-string pattern: any run of characters, one character, or a
    /// literal one. The index's SQL writes the same parts as `GLOB` and `LIKE` patterns.
    public enum GlobPart: Equatable, Sendable { case any, one, literal(Character) }

    /// S3, as a pattern reads: `*`, `?`, and `\` making the next character literal (a `\` at
    /// the end stands for itself).
    public static func globParts(_ pattern: String) -> [GlobPart] {
        var parts: [GlobPart] = []
        var escaping = false
        for c in pattern {
            if escaping { parts.append(.literal(c)); escaping = false; continue }
            switch c {
            case "\\": escaping = true
            case "*": parts.append(.any)
            case "?": parts.append(.one)
            default: parts.append(.literal(c))
            }
        }
        if escaping { parts.append(.literal("\\")) }
        return parts
    }

    /// S3: the whole string against `pattern`, where `*` is any run of characters, `?` one
    /// character (S8), and `\` makes the next character literal.
    public static func glob(_ string: String, _ pattern: String) -> Bool {
        let parts = globParts(pattern)
        let s = Array(string)
        // matched[j]: the first i characters match the first j parts.
        var matched = [Bool](repeating: false, count: parts.count + 1)
        matched[0] = true
        for (j, part) in parts.enumerated() where part == .any { matched[j + 1] = matched[j] }
        for c in s {
            var next = [Bool](repeating: false, count: parts.count + 1)
            for (j, part) in parts.enumerated() {
                switch part {
                case .any: next[j + 1] = next[j] || matched[j + 1] || matched[j]
                case .one: next[j + 1] = matched[j]
                case .literal(let l): next[j + 1] = matched[j] && l == c
                }
            }
            matched = next
        }
        return matched[parts.count]
    }
}
