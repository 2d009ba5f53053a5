/// One byte range of an HTTP `Range: bytes=…` header, resolved against a content length.
/// Only single ranges are served; a multi-range request gets the whole content (RFC 9110 allows it).
enum ByteRange: Equatable {
    case whole
    case partial(ClosedRange<Int64>)
    case unsatisfiable

    static func parse(_ header: String?, size: Int64) -> ByteRange {
        guard let header, header.hasPrefix("bytes=") else { return .whole }
        let spec = header.dropFirst("bytes=".count).trimmingCharacters(in: .whitespaces)
        if spec.contains(",") { return .whole }
        let parts = spec.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return .whole }
        let first = parts[0].trimmingCharacters(in: .whitespaces)
        let last = parts[1].trimmingCharacters(in: .whitespaces)
        if first.isEmpty {
            // Suffix range: the last N bytes.
            guard let n = Int64(last), n >= 0 else { return .whole }
            if n == 0 || size == 0 { return .unsatisfiable }
            return .partial(max(0, size - n)...(size - 1))
        }
        guard let start = Int64(first), start >= 0 else { return .whole }
        if start >= size { return .unsatisfiable }
        if last.isEmpty { return .partial(start...(size - 1)) }
        guard let end = Int64(last), end >= start else { return .whole }
        return .partial(start...min(end, size - 1))
    }
}

import Foundation
