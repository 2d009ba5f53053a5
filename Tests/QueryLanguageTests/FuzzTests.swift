import QueryLanguage
import Testing

/// Seeded random and mutated inputs: the parser never crashes or hangs, and every refusal
/// names a position inside the input (or its end).
struct FuzzTests {
    /// xorshift64*: the same inputs for the same seed.
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state ^= state >> 12
            state ^= state << 25
            state ^= state >> 27
            return state &* 2_685_821_657_736_338_717
        }
    }

    static let seeds = [
        "NSMetadataItemFSNameKey == '*'", "%K LIKE %@", "size > 1000000 AND modified > $time.today(-7)",
        "downloadingStatus == 'notDownloaded' OR hasUnresolvedConflicts == 1", "tags CONTAINS 'work' AND NOT (path BEGINSWITH '/Documents/Archive')",
        #"name MATCHES[cd] 'a.*\u00e9\x41'"#, "ANY tags IN {'a', \"b\"}", #"created < CAST(-978250148.000000, "NSDate")"#, "size BETWEEN {0x10, 1e3}",
    ]
    static let pieces = ["(", ")", "{", "}", "[c]", "'", "\"", "\\", "%K", "%@", "$time.", "AND", "OR", "NOT", "==", "<", "!", ",", ".", "#", "-", "0x", "é", "\u{0}", " "]

    /// Yields now and then: a long synchronous loop would hold one of the few threads of the
    /// cooperative pool, which the suites that start beside it (mounts, engines) need.
    @Test("5,000 generated and mutated queries: no crash, no hang, every error inside the input")
    func fuzz() async {
        var rng = Generator(state: 0x9E37_79B9_7F4A_7C15)
        for round in 0..<5_000 {
            if round % 50 == 0 { await Task.yield() }
            var text = Self.seeds.randomElement(using: &rng)!
            for _ in 0..<Int.random(in: 1...4, using: &rng) {
                var scalars = Array(text.unicodeScalars)
                let at = scalars.isEmpty ? 0 : Int.random(in: 0..<scalars.count, using: &rng)
                switch Int.random(in: 0..<3, using: &rng) {
                case 0 where !scalars.isEmpty: scalars.remove(at: at)
                case 1: scalars.insert(contentsOf: Self.pieces.randomElement(using: &rng)!.unicodeScalars, at: at)
                default: if !scalars.isEmpty { scalars = Array(scalars[..<at]) }
                }
                text = String(String.UnicodeScalarView(scalars))
            }
            let length = text.unicodeScalars.count
            do {
                _ = try QueryParser.parse(text, arguments: ["name", "x", "y"])
            } catch {
                #expect((0...length).contains(error.position), "\(text.debugDescription): \(error)")
            }
        }
    }
}
