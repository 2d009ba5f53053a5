import Foundation
import MetadataIndex
import QueryLanguage
import Testing

/// Seeded random and mutated inputs: the parser never crashes or hangs, and every refusal
/// names a position inside the input (or its end).
struct QueryFuzzTests {
    static let seeds = [
        "NSMetadataItemFSNameKey == '*'", "%K LIKE %@", "size > 1000000 AND modified > $time.today(-7)",
        "downloadingStatus == 'notDownloaded' OR hasUnresolvedConflicts == 1", "tags CONTAINS 'work' AND NOT (path BEGINSWITH '/Documents/Archive')",
        #"name MATCHES[cd] 'a.*\u00e9\x41'"#, "ANY tags IN {'a', \"b\"}", #"created < CAST(-978250148.000000, "NSDate")"#, "size BETWEEN {0x10, 1e3}",
    ]
    static let pieces = ["(", ")", "{", "}", "[c]", "'", "\"", "\\", "%K", "%@", "$time.", "AND", "OR", "NOT", "==", "<", "!", ",", ".", "#", "-", "0x", "é", "\u{0}", " "]

    /// How many inputs: 5,000 in the suite; `scripts/fuzz` asks for a million or more.
    static var inputs: Int { ProcessInfo.processInfo.environment["UBIQ_FUZZ_INPUTS"].flatMap(Int.init) ?? 5_000 }
    static var seed: UInt64 { ProcessInfo.processInfo.environment["UBIQ_FUZZ_SEED"].flatMap(UInt64.init) ?? 0x9E37_79B9_7F4A_7C15 }

    /// One input: a seed query or a generated one (`PredicateWriter`), then none or up to four cuts,
    /// deletions or insertions of pieces that break the grammar.
    static func input(_ rng: inout SeededRandom) -> (text: String, arguments: [String]) {
        var text: String
        var arguments = ["name", "x", "y"]
        if Bool.random(using: &rng) {
            text = seeds.randomElement(using: &rng)!
        } else {
            var writer = PredicateWriter(random: SeededRandom(state: rng.next()))
            text = writer.predicate()
            arguments = writer.arguments
        }
        // Half stay whole: the compiler and SQLite see inputs that parse, not only the parser.
        for _ in 0..<(Bool.random(using: &rng) ? 0 : Int.random(in: 1...4, using: &rng)) {
            var scalars = Array(text.unicodeScalars)
            let at = scalars.isEmpty ? 0 : Int.random(in: 0..<scalars.count, using: &rng)
            switch Int.random(in: 0..<3, using: &rng) {
            case 0 where !scalars.isEmpty: scalars.remove(at: at)
            case 1: scalars.insert(contentsOf: pieces.randomElement(using: &rng)!.unicodeScalars, at: at)
            default: if !scalars.isEmpty { scalars = Array(scalars[..<at]) }
            }
            text = String(String.UnicodeScalarView(scalars))
        }
        return (text, arguments)
    }

    /// Yields now and then: a long synchronous loop would hold one of the few threads of the
    /// cooperative pool, which the suites that start beside it (mounts, engines) need. Every
    /// input that parses is compiled, and every 10th compiled query runs against an index:
    /// SQLite must take every statement the compiler writes.
    @Test("generated and mutated queries: no crash, no hang; every error is inside the input; every query that parses compiles and runs")
    func fuzz() async throws {
        let index = try RandomIndex(seed: 7)
        let clock = QueryClock()
        var rng = SeededRandom(state: Self.seed)
        var (parsed, ran) = (0, 0)
        for round in 0..<Self.inputs {
            if round % 50 == 0 { await Task.yield() }
            let (text, arguments) = Self.input(&rng)
            let length = text.unicodeScalars.count
            let predicate: QueryPredicate
            do throws(QueryError) {
                predicate = try QueryParser.parse(text, arguments: arguments)
            } catch {
                #expect((0...length).contains(error.position), "\(text.debugDescription): \(error)")
                continue
            }
            parsed += 1
            let query = SQLCompiler.compile(predicate, clock: clock)
            #expect(!query.condition.isEmpty)
            if parsed % 10 == 0 {
                do { _ = try index.sql(predicate, clock: clock) } catch { Issue.record("\(text.debugDescription) with \(arguments): \(error)") }
                ran += 1
            }
        }
        #expect(parsed > Self.inputs / 5, "\(parsed) of \(Self.inputs) inputs parsed")
        print("fuzz: \(Self.inputs) inputs from seed \(Self.seed), \(parsed) parsed and compiled, \(ran) run")
    }
}
