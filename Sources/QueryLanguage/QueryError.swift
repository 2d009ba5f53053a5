/// A query that cannot run, and where: `position` is the offset, in Unicode scalars from 0, of
/// the first offending token, or the input's length for an unexpected end (rule G10 in
/// docs/QUERY_LANGUAGE.md).
public struct QueryError: Error, Equatable, Sendable, CustomStringConvertible {
    public let message: String
    public let position: Int

    public init(_ message: String, at position: Int) {
        self.message = message
        self.position = position
    }

    public var description: String { "at \(position): \(message)" }
}
