import Foundation

/// A strict reader of the Prometheus text exposition format (version 0.0.4): every line is a
/// `# HELP`, a `# TYPE` or a sample `name{label="value",…} number`, names and labels as the
/// format allows them, values numbers (or `+Inf`, `-Inf`, `NaN`), and every sample of a family
/// whose `# TYPE` came before it. Anything else is an error naming the line.
public struct PrometheusText: Sendable {
    public struct Sample: Sendable, Hashable {
        public var name: String
        public var labels: [String: String]
        public var value: Double
    }

    public private(set) var samples: [Sample] = []
    public private(set) var types: [String: String] = [:]

    static var name: Regex<Substring> { /[a-zA-Z_:][a-zA-Z0-9_:]*/ }
    static var sample: Regex<(Substring, Substring, Substring?, Substring?, Substring, Substring?)> { /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)( -?\d+)?$/ }
    static var label: Regex<(Substring, Substring, Substring, Substring)> { /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\[\\"n])*)"(,|$)/ }

    public init(_ text: String) throws {
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            func refuse(_ why: String) -> TestSupportError { TestSupportError("line \(index + 1) \(why): \(line)") }
            if line.isEmpty { continue }
            if line.hasPrefix("# HELP ") {
                guard line.dropFirst(7).prefixMatch(of: Self.name) != nil else { throw refuse("names no metric") }
            } else if line.hasPrefix("# TYPE ") {
                let parts = line.dropFirst(7).split(separator: " ")
                guard parts.count == 2, parts[0].wholeMatch(of: Self.name) != nil,
                      ["counter", "gauge", "histogram", "summary", "untyped"].contains(parts[1]) else { throw refuse("is not a TYPE line") }
                types[String(parts[0])] = String(parts[1])
            } else if line.hasPrefix("#") {
                continue
            } else {
                guard let m = line.wholeMatch(of: Self.sample) else { throw refuse("is not a sample") }
                let name = String(m.1)
                var labels: [String: String] = [:]
                if let body = m.3, !body.isEmpty {
                    var rest = Substring(body)
                    while !rest.isEmpty {
                        guard let l = rest.prefixMatch(of: Self.label) else { throw refuse("has a malformed label") }
                        labels[String(l.1)] = String(l.2)
                        rest = rest[l.range.upperBound...]
                    }
                }
                let raw = String(m.4)
                guard let value = raw == "+Inf" ? .infinity : raw == "-Inf" ? -.infinity : Double(raw) else { throw refuse("has no number") }
                let family = ["_bucket", "_sum", "_count"].reduce(name) { n, suffix in
                    n.hasSuffix(suffix) && types[String(n.dropLast(suffix.count))] != nil ? String(n.dropLast(suffix.count)) : n
                }
                guard types[family] != nil else { throw refuse("comes before its family's TYPE") }
                samples.append(Sample(name: name, labels: labels, value: value))
            }
        }
    }

    /// The sum of the samples of `name` whose labels include `labels`.
    public func value(_ name: String, _ labels: [String: String] = [:]) -> Double {
        samples.filter { sample in sample.name == name && labels.allSatisfy { sample.labels[$0.key] == $0.value } }.reduce(0) { $0 + $1.value }
    }
}
