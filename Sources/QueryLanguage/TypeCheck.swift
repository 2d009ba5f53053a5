import Foundation

/// ISO-8601 as queries write it: a date (`2026-03-15`) or a date and time with `Z` or an offset.
enum ISOTime {
    static func parse(_ text: String) -> Date? {
        let full = ISO8601DateFormatter()
        if let date = full.date(from: text) { return date }
        let fractional = ISO8601DateFormatter()
        fractional.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let date = fractional.date(from: text) { return date }
        let day = ISO8601DateFormatter()
        day.formatOptions = [.withFullDate]
        return text.count == 10 ? day.date(from: text) : nil
    }
}

extension QueryParser {
    /// Puts the key on the left and checks the comparison against the key's type (S9, S13).
    static func check(quantifier: (Quantifier, Int)?, _ left: Operand, _ written: Operator, at opAt: Int, options: Options, _ right: Operand) throws(QueryError) -> Comparison {
        let key: Key
        var op = written
        var value: Value
        let valueAt: Int
        var suffix: Options = []
        var flipped = false
        switch (left, right) {
        case (.key(let k, _), .value(let v, let at, let s)):
            (key, value, valueAt, suffix) = (k, v, at, s)
        case (.value(let v, let at, let s), .key(let k, _)):
            (key, value, valueAt, suffix, flipped) = (k, v, at, s, true)
            switch op {
            case .less: op = .greater
            case .lessOrEqual: op = .greaterOrEqual
            case .greater: op = .less
            case .greaterOrEqual: op = .lessOrEqual
            case .equal, .notEqual, .in: break
            default: throw QueryError("put the key on the left of \(written.rawValue.uppercased())", at: opAt)
            }
        case (.key, .key(_, let at)):
            throw QueryError("compare a key with a value, not with another key", at: at)
        case (.value(_, let at, _), .value):
            throw QueryError("a comparison needs a key", at: at)
        }
        let allOptions = options.union(suffix)
        if let (_, at) = quantifier, key.type != .strings {
            throw QueryError("ANY, ALL and NONE apply to keys with several values (tags, contentTypeTree), not to \(key.name)", at: at)
        }
        let textual = key.type == .string || key.type == .strings
        if op.isStringOnly && !textual { throw QueryError("\(op.rawValue.uppercased()) compares strings; \(key.name) is a \(key.type.rawValue)", at: opAt) }
        if !allOptions.isEmpty && !textual { throw QueryError("[c] and [d] apply to strings; \(key.name) is a \(key.type.rawValue)", at: opAt) }
        if op == .in && !flipped {
            guard case .array = value else { throw QueryError("IN takes an array: \(key.name) IN {…}", at: valueAt) }
        }
        if op == .in && flipped && !textual { throw QueryError("'…' IN \(key.name): \(key.name) is not a string", at: opAt) }
        value = try typed(value, for: key, op: op, at: valueAt)
        return Comparison(quantifier: quantifier?.0, key: key, op: op, options: allOptions, value: value, flipped: flipped)
    }

    /// The value as the key's type has it, or an error at the value (S13, S14, S15).
    static func typed(_ value: Value, for key: Key, op: Operator, at position: Int) throws(QueryError) -> Value {
        switch value {
        case .null:
            return .null
        case .array(let elements):
            var out: [Value] = []
            for element in elements { out.append(try typed(element, for: key, op: op, at: position)) }
            return .array(out)
        case .bounds(let low, let high):
            return .bounds(try typed(low, for: key, op: op, at: position), try typed(high, for: key, op: op, at: position))
        default: break
        }
        switch key.type {
        case .string, .strings:
            guard case .string(let s) = value else { throw QueryError("\(key.name) is a string: compare it with a quoted string", at: position) }
            if op == .matches && !s.isEmpty {
                do { _ = try NSRegularExpression(pattern: s) } catch { throw QueryError("'\(s)' is not a regular expression", at: position) }
            }
            return value
        case .number:
            guard case .number = value else { throw QueryError("\(key.name) is a number", at: position) }
            return value
        case .date:
            switch value {
            case .date: return value
            case .string(let s):
                guard ISOTime.parse(s) != nil else { throw QueryError("'\(s)' is not an ISO-8601 date (\(key.name) is a date)", at: position) }
                return .date(.iso(s))
            default: throw QueryError("\(key.name) is a date: use an ISO-8601 string, $time or CAST", at: position)
            }
        case .bool:
            switch value {
            case .bool: return value
            case .number(let n) where n == 0 || n == 1: return .bool(n == 1)
            default: throw QueryError("\(key.name) is 0 or 1 (YES, NO, TRUE, FALSE)", at: position)
            }
        case .downloadingStatus:
            guard case .string(let s) = value, let status = DownloadingStatus(spelling: s) else {
                throw QueryError("downloadingStatus is one of notDownloaded, downloaded, current, excluded", at: position)
            }
            return .string(status.rawValue)
        }
    }
}
