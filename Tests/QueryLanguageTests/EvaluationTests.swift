import Foundation
import QueryLanguage
import Testing

/// The semantics (S rules) of docs/QUERY_LANGUAGE.md, on items given as key → value.
struct EvaluationTests {
    let clock = QueryClock(now: ISO8601DateFormatter().date(from: "2026-11-27T12:00:00Z")!, timeZone: TimeZone(identifier: "UTC")!)

    func item(_ values: [String: QueryValue]) -> (Key) -> QueryValue? { { values[$0.name] } }

    func matches(_ query: String, _ values: [String: QueryValue], arguments: [String] = []) throws -> Bool {
        try QueryParser.parse(query, arguments: arguments).matches(item(values), clock: clock)
    }

    func name(_ n: String) -> [String: QueryValue] { ["name": .string(n)] }

    @Test("S2, S3: == and LIKE glob over the whole name; escapes make * and ? literal")
    func globbing() throws {
        #expect(try matches("NSMetadataItemFSNameKey == '*'", name("anything")))
        #expect(try matches("kMDItemFSName == '*.txt'", name("notes.txt")))
        #expect(try !matches("kMDItemFSName == '*.txt'", name("notes.txt.bak")))
        #expect(try matches("name LIKE 'n?tes.*'", name("notes.md")))
        #expect(try !matches("name LIKE 'n?tes.*'", name("nootes.md")))
        #expect(try matches(#"name == 'what\?'"#, name("what?")))
        #expect(try !matches(#"name == 'what\?'"#, name("whatX")))
        #expect(try matches("name LIKE 'a.b'", name("a.b")) && !(try matches("name LIKE 'a.b'", name("axb"))), "only * and ? are special")
        #expect(try matches("name != '*.txt'", name("a.md")))
        #expect(try matches("name LIKE '?'", name("é")), "S8: one character, whatever its bytes")
    }

    @Test("S1, S5, S6: NFC always, case folding with [c], diacritics dropped with [d]")
    func folding() throws {
        let decomposed = "Cafe\u{301}.txt"
        #expect(try matches("name == 'Café.txt'", name(decomposed)), "canonically equivalent names are equal")
        #expect(try !matches("name == 'café.txt'", name(decomposed)))
        #expect(try matches("name ==[c] 'café.txt'", name(decomposed)))
        #expect(try !matches("name ==[c] 'cafe.txt'", name(decomposed)))
        #expect(try matches("name ==[cd] 'cafe.txt'", name(decomposed)))
        #expect(try matches("name == 'CAFE.TXT'cd", name(decomposed)), "G11")
        #expect(try matches("name BEGINSWITH[d] 'Cafe'", name("Café")))
    }

    @Test("string operators; S7: an empty pattern matches nothing")
    func stringOperators() throws {
        #expect(try matches("name BEGINSWITH 'no'", name("notes")))
        #expect(try matches("name ENDSWITH 'es'", name("notes")))
        #expect(try matches("name CONTAINS 'ote'", name("notes")))
        for op in ["BEGINSWITH", "ENDSWITH", "CONTAINS", "MATCHES"] { #expect(try !matches("name \(op) ''", name("notes")), "\(op)") }
        #expect(try matches("name MATCHES 'n.*s'", name("notes")))
        #expect(try !matches("name MATCHES 'ote'", name("notes")), "S4: the whole string")
        #expect(try matches("name MATCHES[c] 'NOTES'", name("notes")))
        #expect(try matches("'ote' IN name", name("notes")))
        #expect(try matches("name IN {'a', 'notes'}", name("notes")))
        #expect(try !matches("name IN {'*'}", name("notes")), "IN does not glob")
        #expect(try matches("name < 'o'", name("notes")) && !(try matches("name > 'o'", name("notes"))))
    }

    @Test("numbers, dates, booleans and the downloading status")
    func typedValues() throws {
        let file: [String: QueryValue] = [
            "size": .number(2048), "modified": .date(clock.now.addingTimeInterval(-30)), "isUploaded": .bool(true),
            "downloadingStatus": .string("current"),
        ]
        #expect(try matches("size > 1000 AND size <= 2048", file))
        #expect(try matches("size BETWEEN {2048, 4096}", file) && !(try matches("size BETWEEN {0, 2047}", file)))
        #expect(try matches("size IN {1, 2048}", file))
        #expect(try matches("2000 < size", file))
        #expect(try matches("modified > $time.now(-60)", file) && !(try matches("modified > $time.now(-10)", file)))
        #expect(try matches("modified > $time.today", file) && !(try matches("modified < $time.yesterday", file)))
        #expect(try matches("modified >= '2026-11-27'", file) && !(try matches("modified >= '2026-11-28'", file)))
        #expect(try matches(#"modified > CAST(0, "NSDate")"#, file))
        #expect(try matches("isUploaded == YES", file) && !(try matches("isUploaded == 0", file)))
        #expect(try matches("downloadingStatus == 'NSMetadataUbiquitousItemDownloadingStatusCurrent'", file))
    }

    @Test("S9, S10, S11: several values; empty ones under each quantifier")
    func severalValues() throws {
        let tagged: [String: QueryValue] = ["tags": .strings(["work", "Urgent"])]
        let bare: [String: QueryValue] = ["tags": .strings([])]
        #expect(try matches("tags == 'work'", tagged), "S10: implicit ANY")
        #expect(try matches("tags CONTAINS 'work'", tagged) && !(try matches("tags CONTAINS 'wor'", tagged)), "S11: membership")
        #expect(try matches("tags CONTAINS[c] 'urgent'", tagged))
        #expect(try matches("'work' IN tags", tagged))
        #expect(try matches("ANY tags BEGINSWITH 'Ur'", tagged))
        #expect(try !matches("ALL tags BEGINSWITH 'Ur'", tagged))
        #expect(try matches("NONE tags == 'home'", tagged))
        #expect(try !matches("ANY tags == 'a'", bare))
        #expect(try matches("ALL tags == 'a'", bare))
        #expect(try matches("NONE tags == 'a'", bare))
    }

    @Test("S12: a missing value equals only NULL and differs from everything else")
    func missing() throws {
        let none: [String: QueryValue] = [:]
        #expect(try matches("uploadingError == nil", none))
        #expect(try !matches("uploadingError != nil", none))
        #expect(try matches("uploadingError != 'x'", none))
        #expect(try !matches("uploadingError == 'x'", none))
        #expect(try !matches("uploadingError BEGINSWITH 'x'", none))
        #expect(try !matches("size > 0", none) && !(try matches("size < 0", none)))
        #expect(try matches("uploadingError != nil", ["uploadingError": .string("denied")]))
    }

    @Test("P1 decides: an answer that depends on the order of AND and OR")
    func precedenceDecides() throws {
        // With AND first: false OR (true AND false) = false; with OR first it would be false
        // AND … = false too, so the other order: true OR (false AND false) = true, while
        // (true OR false) AND false = false.
        let file = name("a.txt")
        #expect(try matches("name == 'a.txt' OR name == 'b' AND name == 'c'", file))
        #expect(try !matches("(name == 'a.txt' OR name == 'b') AND name == 'c'", file))
    }
}
