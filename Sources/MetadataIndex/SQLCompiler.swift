import Foundation
import GRDB
import ItemModel
import LocalState
import QueryLanguage

/// A query as an SQL condition over the mount's `items` table (as `i`), with every value
/// written in the query bound as a parameter, never spliced into the text.
public struct SQLQuery: Sendable, Equatable {
    public var condition: String
    public var arguments: [DatabaseValue]
    /// The condition reads the `excluded` table (`LocalReader.excludedTable`).
    public var usesExcluded: Bool

    /// The statement that selects the matching rows in `scope` (`COUNT(*)` of them when
    /// `counting`): never the root, nor the versions folder and what it holds.
    public func statement(scope: QueryScope = .all, counting: Bool = false) -> String {
        var tables: [String] = []
        if usesExcluded { tables.append(LocalReader.excludedTable) }
        var conditions = ["i.ino != \(LocalItem.rootIno)", LocalReader.outsideVersions]
        switch scope {
        case .all: break
        case .documents: conditions.append("i.ino IN (SELECT ino FROM documents)")
        case .data: conditions.append("i.ino NOT IN (SELECT ino FROM documents)")
        }
        if scope != .all { tables.append(LocalReader.documentsTable) }
        conditions.append("(\(condition))")
        let with = tables.isEmpty ? "" : "WITH RECURSIVE \(tables.joined(separator: ",\n"))\n"
        return "\(with)SELECT \(counting ? "COUNT(*)" : "i.*") FROM items AS i\nWHERE " + conditions.joined(separator: " AND ")
    }

    /// The bound values, `?1` first, as SQL literals.
    public var argumentTexts: [String] { arguments.map(\.description) }
}

/// Compiles a type-checked predicate (times fixed, `QueryPredicate.fixingTimes`) to SQL that
/// selects exactly the rows the in-memory evaluator (`QueryPredicate.matches` over a
/// `QueryRecord`) accepts. What SQL cannot say the same way (Unicode folding, globs over
/// characters, regular expressions, content types, tags, transfers in memory) it asks of the
/// functions `IndexFunctions` registers, which call the evaluator's own code.
///
/// Every comparison compiles to 0 or 1, never NULL: SQL's third truth value would turn
/// `NOT (missing == 'x')` false where the evaluator says true (S12).
public struct SQLCompiler {
    private var arguments: [DatabaseValue] = []
    private var usesExcluded = false
    private let clock: QueryClock

    public static func compile(_ predicate: QueryPredicate, clock: QueryClock) -> SQLQuery {
        var compiler = SQLCompiler(clock: clock)
        let condition = compiler.condition(predicate.fixingTimes(clock))
        return SQLQuery(condition: condition, arguments: compiler.arguments, usesExcluded: compiler.usesExcluded)
    }

    private init(clock: QueryClock) { self.clock = clock }

    /// Numbered (`?3`): a key's expression may appear more than once in the condition.
    private mutating func bind(_ value: some DatabaseValueConvertible) -> String {
        arguments.append(value.databaseValue)
        return "?\(arguments.count)"
    }

    private mutating func condition(_ predicate: QueryPredicate) -> String {
        switch predicate {
        case .and(let a, let b): return "(\(condition(a)) AND \(condition(b)))"
        case .or(let a, let b): return "(\(condition(a)) OR \(condition(b)))"
        case .not(let p): return "(NOT \(condition(p)))"
        case .constant(let c): return c ? "1" : "0"
        case .comparison(let c): return comparison(c)
        }
    }

    // MARK: Keys

    /// A key's value for the row, as SQL; `nullable` when the item may have none (S12).
    private struct Subject {
        var sql: String
        var nullable = false
    }

    private static let whole = "(i.kind = 'folder' OR i.content IN ('current', 'dirty'))"
    private static let folderOrFile = "(CASE WHEN i.kind = 'folder' THEN 0 ELSE i.size END)"
    /// Seconds since 2001 as `Date(timeIntervalSince1970: Double(ns) / 1e9)` has them: the
    /// same two floating-point operations, so that both sides compare the same doubles.
    private static func referenceSeconds(_ column: String) -> String {
        "(CAST(\(column) AS REAL) / 1e9 - \(Date.timeIntervalBetween1970AndReferenceDate))"
    }

    private mutating func excluded() -> String {
        usesExcluded = true
        return "(i.ino IN (SELECT ino FROM excluded))"
    }

    private mutating func unsent() -> String {
        "(NOT \(excluded()) AND (EXISTS (SELECT 1 FROM outbox o WHERE o.ino = i.ino) OR i.content = 'dirty' OR i.revision IS NULL))"
    }

    private mutating func downloadingStatus() -> String {
        "(CASE WHEN \(excluded()) THEN 'excluded' WHEN \(Self.whole) THEN 'current' WHEN i.content = 'stale' THEN 'downloaded' ELSE 'notDownloaded' END)"
    }

    /// The key's value as SQL, following `QueryRecord.value(_:)`.
    private mutating func subject(_ key: Key) -> Subject {
        if key.name.hasPrefix("xattr.") {
            return Subject(sql: "ubiq_xattr(i.xattrs, \(bind(String(key.name.dropFirst(6)))))", nullable: true)
        }
        switch key.name {
        case "name", "displayName": return Subject(sql: "i.name")
        case "path": return Subject(sql: "ubiq_path(i.ino, i.parent, i.name)", nullable: true)
        case "size": return Subject(sql: Self.folderOrFile)
        case "created": return Subject(sql: Self.referenceSeconds("i.created"))
        case "modified": return Subject(sql: Self.referenceSeconds("i.modified"))
        case "contentType": return Subject(sql: "ubiq_content_type(i.name, i.kind)")
        case "contentTypeTree": return Subject(sql: "ubiq_content_type_tree(i.name, i.kind)")
        case "tags": return Subject(sql: "ubiq_tags(i.xattrs)")
        case "isUbiquitous": return Subject(sql: "(NOT \(excluded()))")
        case "downloadingStatus": return Subject(sql: downloadingStatus())
        case "isDownloading": return Subject(sql: "ubiq_downloading(i.ino)")
        case "percentDownloaded": return Subject(sql: "(CASE WHEN \(Self.whole) OR i.content = 'stale' THEN 100 ELSE ubiq_download_percent(i.ino) END)")
        case "isDownloaded": return Subject(sql: "(NOT \(excluded()) AND \(Self.whole))")
        case "hasUnresolvedConflicts": return Subject(sql: "(i.conflicts IS NOT NULL AND ubiq_unsettled(i.ino, i.conflicts))")
        case "isUploaded": return Subject(sql: "(NOT \(unsent()))")
        case "isUploading": return Subject(sql: "ubiq_uploading(i.ino)")
        case "percentUploaded": return Subject(sql: "(CASE WHEN \(unsent()) THEN ubiq_upload_percent(i.ino) ELSE 100 END)")
        case "downloadingError": return Subject(sql: "i.download_error", nullable: true)
        case "uploadingError": return Subject(sql: "i.upload_error", nullable: true)
        case "pinned": return Subject(sql: "i.pinned")
        case "isExternalDocument", "isShared", "downloadRequested": return Subject(sql: "0")
        default: return Subject(sql: "NULL", nullable: true)
        }
    }

    // MARK: Comparisons

    private mutating func comparison(_ c: Comparison) -> String {
        // `downloadingStatus == 'notDownloaded'` and the like, as conditions on the columns
        // themselves, so that the index on `content` serves them.
        if c.key.name == "downloadingStatus", let direct = statusCondition(c) { return direct }
        let subject = subject(c.key)
        // S12: a missing value equals only NULL; NULL differs from every present value.
        if c.value == .null {
            switch c.op {
            case .equal: return subject.nullable ? "(\(subject.sql) IS NULL)" : "0"
            case .notEqual: return subject.nullable ? "(\(subject.sql) IS NOT NULL)" : "1"
            default: return "0"
            }
        }
        let present = c.key.type == .strings ? several(c, subject.sql) : one(c, subject.sql)
        guard subject.nullable else { return present }
        return "(CASE WHEN \(subject.sql) IS NULL THEN \(c.op == .notEqual ? 1 : 0) ELSE \(present) END)"
    }

    /// `tags` and `contentTypeTree`: a JSON array of strings, compared element by element.
    private mutating func several(_ c: Comparison, _ array: String) -> String {
        // S11: CONTAINS (and 'x' IN key), unquantified, is membership.
        if c.quantifier == nil, c.op == .contains || (c.op == .in && c.flipped), case .string(let wanted) = c.value {
            return "EXISTS (SELECT 1 FROM json_each(\(array)) AS j WHERE ubiq_equal(\(c.options.rawValue), j.value, \(bind(wanted))))"
        }
        let each = one(c, "j.value")
        switch c.quantifier {
        case .some(.all): return "(NOT EXISTS (SELECT 1 FROM json_each(\(array)) AS j WHERE NOT \(each)))"
        case .some(.none): return "(NOT EXISTS (SELECT 1 FROM json_each(\(array)) AS j WHERE \(each)))"
        case .some(.any), nil: return "EXISTS (SELECT 1 FROM json_each(\(array)) AS j WHERE \(each))"
        }
    }

    /// One present value against the written one (`Comparison.matchesOne`).
    private mutating func one(_ c: Comparison, _ subject: String) -> String {
        switch c.op {
        case .in where !c.flipped:
            guard case .array(let elements) = c.value else { return "0" }
            let equals = elements.compactMap { plainEqual(c, subject, $0) }
            return equals.isEmpty ? "0" : "(\(equals.joined(separator: " OR ")))"
        case .between:
            guard case .bounds(let low, let high) = c.value,
                  let l = order(c, subject, low), let h = order(c, subject, high) else { return "0" }
            return "(\(l.lhs) >= \(l.rhs) AND \(h.lhs) <= \(h.rhs))"
        default: break
        }
        switch c.value {
        case .string(let pattern) where ![.less, .lessOrEqual, .greater, .greaterOrEqual].contains(c.op):
            if c.key.type == .downloadingStatus {
                // Canonical names, no wildcards: `==` is plain equality.
                switch c.op {
                case .equal: return "(\(subject) = \(bind(pattern)))"
                case .notEqual: return "(\(subject) != \(bind(pattern)))"
                default: return "0"
                }
            }
            return text(c, subject, pattern)
        case .bool(let wanted):
            switch c.op {
            case .equal: return "(\(subject) = \(wanted ? 1 : 0))"
            case .notEqual: return "(\(subject) != \(wanted ? 1 : 0))"
            default: return "0"
            }
        default:
            guard let (lhs, rhs) = order(c, subject, c.value), let op = Self.orderings[c.op] else { return "0" }
            return "(\(lhs) \(op) \(rhs))"
        }
    }

    static let orderings: [Operator: String] = [.equal: "=", .notEqual: "!=", .less: "<", .lessOrEqual: "<=", .greater: ">", .greaterOrEqual: ">="]

    /// Two SQL operands that order as the row's value orders against `written`; nil when they
    /// do not compare (`Comparison.order`). Numbers, dates and status names compare in SQL
    /// itself, so that an index on the column can serve; strings through `ubiq_order`.
    private mutating func order(_ c: Comparison, _ subject: String, _ written: Value) -> (lhs: String, rhs: String)? {
        switch written {
        case .number(let n):
            guard c.key.type == .number else { return nil }
            return (subject, bind(n))
        case .date(let t):
            guard c.key.type == .date, let instant = clock.instant(t) else { return nil }
            return (subject, bind(instant.timeIntervalSinceReferenceDate))
        case .string(let s) where c.key.type == .downloadingStatus:
            return (subject, bind(s))  // ASCII names: byte order is scalar order
        case .string(let s) where c.key.type == .string || c.key.type == .strings:
            return ("ubiq_order(\(c.options.rawValue), \(subject), \(bind(s)))", "0")
        default:
            return nil
        }
    }

    /// `==` without globbing, for `IN {…}`; nil when the element never equals (NULL, another type).
    private mutating func plainEqual(_ c: Comparison, _ subject: String, _ element: Value) -> String? {
        switch element {
        case .string(let s) where c.key.type == .downloadingStatus: return "(\(subject) = \(bind(s)))"
        case .string(let s) where c.key.type == .string || c.key.type == .strings:
            return "ubiq_equal(\(c.options.rawValue), \(subject), \(bind(s)))"
        case .bool(let b) where c.key.type == .bool: return "(\(subject) = \(b ? 1 : 0))"
        case .null, .array, .bounds, .bool: return nil
        default: return order(c, subject, element).map { "(\($0.lhs) = \($0.rhs))" }
        }
    }

    // MARK: Strings

    /// A string operator (`==`, `LIKE`, `BEGINSWITH`, …): SQLite's own `GLOB` or `LIKE` where
    /// that is exact, `ubiq_text` (the evaluator's function) elsewhere.
    ///
    /// Exact means a printable ASCII pattern and a plain value (ASCII without a carriage
    /// return): there NFC changes nothing, diacritic folding changes nothing, case folding is
    /// what `LIKE` does, and every character is one `Character`, as `?` and `_` count them. A
    /// value with any other character goes to `ubiq_text`, decided per row.
    private mutating func text(_ c: Comparison, _ subject: String, _ pattern: String) -> String {
        let exact = "ubiq_text('\(c.op.rawValue)', \(c.options.rawValue), \(c.flipped ? 1 : 0), \(subject), \(bind(pattern)))"
        // The row's value is plain: ASCII without a carriage return (`\r\n` is one character).
        let plain = subject == "i.name" ? "i.plain_name" : "(length(CAST(\(subject) AS BLOB)) = length(\(subject)) AND instr(\(subject), char(13)) = 0)"
        guard pattern.unicodeScalars.allSatisfy({ (0x20...0x7E).contains($0.value) }), let parts = Self.nativeParts(c.op, c.flipped, pattern) else {
            return exact
        }
        // A name ending in a literal (`*.txt`): a plain name matches only if its key (the name
        // lowercased and reversed, `NameKey`) falls in the suffix's range, and the index on
        // (plain_name, name_key, parent) lists those without reading a row. Ignoring case, the
        // range is the whole answer: lowercasing ASCII is all that `[c]` does to a plain name.
        // The other names are compared one by one. Both sides name `plain_name` as a value, so
        // that SQLite serves each from the index.
        if subject == "i.name", c.op != .notEqual, let suffix = Self.suffix(parts), let range = NameKey.range(endingIn: suffix) {
            let keyed = "i.plain_name = 1 AND i.name_key >= \(bind(range.low)) AND i.name_key < \(bind(range.high))"
            let plainMatch = c.options.contains(.caseInsensitive) ? keyed : "\(keyed) AND \(native(c, subject, parts))"
            return "((\(plainMatch)) OR (i.plain_name = 0 AND \(exact)))"
        }
        return "(CASE WHEN \(plain) THEN \(c.op == .notEqual ? "NOT " : "")\(native(c, subject, parts)) ELSE \(exact) END)"
    }

    /// SQLite's `LIKE` (ignoring case) or `GLOB` for a pattern, exact on plain values.
    private mutating func native(_ c: Comparison, _ subject: String, _ parts: [Part]) -> String {
        if parts.isEmpty { return "0" }  // S7: an empty BEGINSWITH, ENDSWITH or CONTAINS matches nothing
        if c.options.contains(.caseInsensitive) { return "(\(subject) LIKE \(bind(Self.likePattern(parts))) ESCAPE '\\')" }
        return "(\(subject) GLOB \(bind(Self.globPattern(parts))))"
    }

    /// The literal a pattern ends in when it is `*` and then only literal characters.
    static func suffix(_ parts: [Part]) -> String? {
        guard parts.count > 1, case .any = parts[0] else { return nil }
        var literal = ""
        for part in parts.dropFirst() {
            guard case .literal(let c) = part else { return nil }
            literal.append(c)
        }
        return literal
    }

    typealias Part = QueryText.GlobPart

    /// The whole-string pattern an operator asks for; nil for those SQL does not do (MATCHES);
    /// empty for those that match nothing.
    static func nativeParts(_ op: Operator, _ flipped: Bool, _ pattern: String) -> [Part]? {
        let literal = pattern.map(Part.literal)
        switch op {
        case .equal, .notEqual, .like: return QueryText.globParts(pattern)
        case .beginsWith: return pattern.isEmpty ? [] : literal + [.any]
        case .endsWith: return pattern.isEmpty ? [] : [.any] + literal
        case .contains: return pattern.isEmpty ? [] : [.any] + literal + [.any]
        case .in where flipped: return pattern.isEmpty ? [] : [.any] + literal + [.any]
        default: return nil
        }
    }

    static func globPattern(_ parts: [Part]) -> String {
        parts.map { part -> String in
            switch part {
            case .any: "*"
            case .one: "?"
            case .literal(let c) where "*?[".contains(c): "[\(c)]"
            case .literal(let c): String(c)
            }
        }.joined()
    }

    static func likePattern(_ parts: [Part]) -> String {
        parts.map { part -> String in
            switch part {
            case .any: "%"
            case .one: "_"
            case .literal(let c) where "%_\\".contains(c): "\\\(c)"
            case .literal(let c): String(c)
            }
        }.joined()
    }

    // MARK: Status

    /// `downloadingStatus` compared for equality, as column conditions; nil for other operators.
    private mutating func statusCondition(_ c: Comparison) -> String? {
        func holds(_ status: String) -> String? {
            switch status {
            case "excluded": return excluded()
            case "current": return "(NOT \(excluded()) AND \(Self.whole))"
            case "downloaded": return "(NOT \(excluded()) AND i.kind = 'file' AND i.content = 'stale')"
            case "notDownloaded": return "(NOT \(excluded()) AND i.kind = 'file' AND i.content IN ('placeholder', 'partial'))"
            default: return nil
            }
        }
        switch (c.op, c.value) {
        case (.equal, .string(let s)): return holds(s) ?? "0"
        case (.notEqual, .string(let s)): return holds(s).map { "(NOT \($0))" } ?? "1"
        case (.in, .array(let elements)) where !c.flipped:
            let each = elements.compactMap { element -> String? in
                if case .string(let s) = element { return holds(s) }
                return nil
            }
            return each.isEmpty ? "0" : "(\(each.joined(separator: " OR ")))"
        default: return nil
        }
    }
}
