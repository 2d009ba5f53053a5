/// A parsed query: what the index evaluates.
public indirect enum QueryPredicate: Equatable, Sendable {
    case and(QueryPredicate, QueryPredicate)
    case or(QueryPredicate, QueryPredicate)
    case not(QueryPredicate)
    case constant(Bool)
    case comparison(Comparison)
}

extension QueryPredicate {
    /// Every key the predicate compares, in the order written.
    public var keys: [Key] {
        switch self {
        case .and(let a, let b), .or(let a, let b): a.keys + b.keys
        case .not(let p): p.keys
        case .constant: []
        case .comparison(let c): [c.key]
        }
    }
}

/// `[quantifier] key op value`, with the key on the left whichever side it was written on
/// (`flipped` says it was on the right, for `'x' IN tags`).
public struct Comparison: Equatable, Sendable {
    public var quantifier: Quantifier?
    public var key: Key
    public var op: Operator
    public var options: Options
    public var value: Value
    public var flipped: Bool
}

public enum Quantifier: String, Equatable, Sendable {
    case any, all, none
}

public enum Operator: String, Equatable, Sendable {
    case equal, notEqual, less, lessOrEqual, greater, greaterOrEqual
    case contains, `in`, beginsWith, endsWith, like, matches, between

    /// The operators that only strings have (S13).
    var isStringOnly: Bool { [.contains, .beginsWith, .endsWith, .like, .matches].contains(self) }
}

/// `[c]`, `[d]`, `[cd]` (G6, G11).
public struct Options: OptionSet, Equatable, Sendable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    public static let caseInsensitive = Options(rawValue: 1)
    public static let diacriticInsensitive = Options(rawValue: 2)
}

/// A comparison's value, as written.
public indirect enum Value: Equatable, Sendable {
    case string(String)
    case number(Double)
    case bool(Bool)
    case null
    case date(TimeValue)
    case array([Value])
    /// `BETWEEN {low, high}`.
    case bounds(Value, Value)
}

/// A point in time, as written; computed once when the query starts (rule G7).
public enum TimeValue: Equatable, Sendable {
    /// `$time.now(±seconds)`.
    case now(offsetSeconds: Double)
    /// `$time.today(±days)`; `$time.yesterday` is `today(-1)`.
    case today(offsetDays: Double)
    /// `$time.iso(…)`, an ISO-8601 string, or `CAST('…', "NSDate")`.
    case iso(String)
    /// `CAST(n, "NSDate")`: seconds after 2001-01-01T00:00:00Z.
    case referenceSeconds(Double)
}
