/// Disjoint, sorted byte ranges: which parts of a cache file are downloaded.
public struct ByteRanges: Sendable, Equatable {
    public private(set) var ranges: [Range<Int64>] = []

    public init() {}

    public mutating func insert(_ r: Range<Int64>) {
        guard !r.isEmpty else { return }
        var merged = r
        var out: [Range<Int64>] = []
        for existing in ranges {
            if existing.upperBound < merged.lowerBound || existing.lowerBound > merged.upperBound {
                out.append(existing)
            } else {
                merged = min(existing.lowerBound, merged.lowerBound)..<max(existing.upperBound, merged.upperBound)
            }
        }
        out.append(merged)
        ranges = out.sorted { $0.lowerBound < $1.lowerBound }
    }

    public func contains(_ r: Range<Int64>) -> Bool {
        if r.isEmpty { return true }
        return ranges.contains { $0.lowerBound <= r.lowerBound && $0.upperBound >= r.upperBound }
    }

    public var total: Int64 { ranges.reduce(0) { $0 + ($1.upperBound - $1.lowerBound) } }
}
