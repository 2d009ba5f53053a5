import QueryLanguage
import Testing

/// The grammar (G rules), precedence (P1) and type checks (S13) of docs/QUERY_LANGUAGE.md.
struct ParserTests {
    func parse(_ text: String, arguments: [String] = [], variables: [String: String] = [:]) throws -> QueryPredicate {
        try QueryParser.parse(text, arguments: arguments, variables: variables)
    }

    func comparison(_ text: String, arguments: [String] = []) throws -> Comparison {
        guard case .comparison(let c) = try parse(text, arguments: arguments) else { throw QueryError("not a comparison", at: 0) }
        return c
    }

    /// The error's offset, or nil when the text parses.
    func errorAt(_ text: String, arguments: [String] = []) -> Int? {
        do {
            _ = try parse(text, arguments: arguments)
            return nil
        } catch let error as QueryError {
            return error.position
        } catch {
            return -1
        }
    }

    @Test("what iCloud apps write parses as it is, under every spelling of the key")
    func iCloudPredicates() throws {
        for text in ["NSMetadataItemFSNameKey == '*'", "kMDItemFSName == '*.txt'", "name LIKE '*.ext'", "%K == 'notes.xml'"] {
            let c = try comparison(text, arguments: text.contains("%K") ? ["NSMetadataItemFSNameKey"] : [])
            #expect(c.key.name == "name" && c.key.type == .string, "\(text)")
        }
        let c = try comparison("%K LIKE %@", arguments: ["NSMetadataItemFSNameKey", "*.ext"])
        #expect(c.op == .like && c.value == .string("*.ext"))
    }

    @Test("P1: NOT binds tighter than AND, and AND tighter than OR; both associate to the left")
    func precedence() throws {
        let a = QueryPredicate.comparison(try comparison("size == 1"))
        let b = QueryPredicate.comparison(try comparison("size == 2"))
        let c = QueryPredicate.comparison(try comparison("size == 3"))
        #expect(try parse("size == 1 OR size == 2 AND size == 3") == .or(a, .and(b, c)))
        #expect(try parse("size == 1 && size == 2 || size == 3") == .or(.and(a, b), c))
        #expect(try parse("NOT size == 1 AND size == 2") == .and(.not(a), b))
        #expect(try parse("!(size == 1 or size == 2)") == .not(.or(a, b)))
        #expect(try parse("size == 1 AND size == 2 AND size == 3") == .and(.and(a, b), c))
        #expect(try parse("TRUEPREDICATE or falsepredicate") == .or(.constant(true), .constant(false)))
    }

    @Test("operators, their spellings and options; a key on the right is turned round")
    func operators() throws {
        let spellings: [(String, Operator)] = [
            ("==", .equal), ("=", .equal), ("!=", .notEqual), ("<>", .notEqual), ("<", .less), ("<=", .lessOrEqual), ("=<", .lessOrEqual),
            (">", .greater), (">=", .greaterOrEqual), ("=>", .greaterOrEqual),
        ]
        for (mark, op) in spellings { #expect(try comparison("size \(mark) 5").op == op, "\(mark)") }
        #expect(try comparison("name beginswith[cd] 'a'").options == [.caseInsensitive, .diacriticInsensitive])
        #expect(try comparison("name ENDSWITH[c] 'a'").options == .caseInsensitive)
        #expect(try comparison("name == 'Steve'cd").options == [.caseInsensitive, .diacriticInsensitive], "G11: a suffix modifier")
        let flipped = try comparison("5 < size")
        #expect(flipped.op == .greater && flipped.flipped)
        let member = try comparison("'work' IN tags")
        #expect(member.op == .in && member.flipped && member.key.name == "tags")
        let between = try comparison("size BETWEEN {1, 0x10}")
        #expect(between.value == .bounds(.number(1), .number(16)))
        #expect(try comparison("ANY tags == 'a'").quantifier == .any)
        #expect(try comparison("SOME tags == 'a'").quantifier == .any, "S9: SOME is ANY")
        #expect(try comparison("NONE tags CONTAINS 'a'").quantifier == QueryLanguage.Quantifier.none)
        #expect(try comparison("size IN {1, 2, -3}").value == .array([.number(1), .number(2), .number(-3)]))
    }

    @Test("literals: both quotes, the escapes of G4, numbers of G5")
    func literals() throws {
        #expect(try comparison(#"name == "it's""#).value == .string("it's"))
        #expect(try comparison(#"name == 'say "hi"'"#).value == .string("say \"hi\""))
        #expect(try comparison(#"name == 'a\tb\n\x41\u00e9\101\q'"#).value == .string("a\tb\nAéAq"))
        for (text, n) in [("0x1F", 31.0), ("0o17", 15), ("0b101", 5), ("9.2e-5", 9.2e-5), ("1e3", 1000), ("-7", -7)] {
            #expect(try comparison("size == \(text)").value == .number(n), "\(text)")
        }
        #expect(try comparison("xattr.user.xdg.comment == 'x'").key.name == "xattr.user.xdg.comment")
        #expect(try comparison("#name == 'x'").key.name == "name", "#word is a key")
    }

    @Test("values take the key's type: dates, booleans, the downloading status")
    func types() throws {
        #expect(try comparison("modified > '2026-03-15'").value == .date(.iso("2026-03-15")))
        #expect(try comparison("modified > $time.now(-60)").value == .date(.now(offsetSeconds: -60)))
        #expect(try comparison("modified > $time.today(+1)").value == .date(.today(offsetDays: 1)))
        #expect(try comparison("modified > $time.yesterday").value == .date(.today(offsetDays: -1)))
        #expect(try comparison(#"modified > $time.iso("2026-03-15T10:00:00Z")"#).value == .date(.iso("2026-03-15T10:00:00Z")))
        #expect(try comparison(#"created < CAST(-978250148.000000, "NSDate")"#).value == .date(.referenceSeconds(-978250148)))
        #expect(try comparison(#"created < CAST("2013-01-02T00:00:00Z", "NSDATE")"#).value == .date(.iso("2013-01-02T00:00:00Z")))
        #expect(try comparison("isUploaded == YES").value == .bool(true))
        #expect(try comparison("NSMetadataUbiquitousItemIsDownloadingKey == 0").value == .bool(false))
        for spelling in ["current", "NSMetadataUbiquitousItemDownloadingStatusCurrent", "NSURLUbiquitousItemDownloadingStatusCurrent"] {
            #expect(try comparison("downloadingStatus == '\(spelling)'").value == .string("current"), "\(spelling)")
        }
        #expect(try comparison("uploadingError == nil").value == .null)
    }

    @Test("G10: every error names the offset of the offending token, or the length for an early end")
    func errors() {
        let cases: [(String, Int)] = [
            ("nosuchkey == 1", 0),                       // G2: unknown key
            ("name == 'open", 8),                         // G3: unterminated string
            ("name == 1 ==  2", 10),                      // comparisons do not chain
            ("size == 'big'", 8),                         // S13: a string for a number
            ("size CONTAINS 1", 5),                       // S13: a string operator on a number
            ("size ==[c] 1", 5),                          // S13: options on a number
            ("ANY name == 'a'", 0),                       // S9: a quantifier on a scalar key
            ("downloadingStatus == 'sort of'", 21),       // S15: an unknown status
            ("modified > 'yesterday'", 11),               // S14: not ISO-8601
            ("name MATCHES '(unclosed'", 13),             // S4: a bad regex
            ("name == 'a' AND", 15),                      // unexpected end
            ("(name == 'a'", 12),                         // missing ')'
            ("SELF == 'a'", 0),                           // G9
            ("name == %@", 8),                            // G8: no binding
            ("name == $who", 8),                          // G8: no variable
            ("name ? 'a'", 5),                            // '?' is not a token
            ("size BETWEEN {1}", 15),                     // two bounds
            ("size BETWEEN[c] {1, 2}", 12),               // no options on BETWEEN
            ("name == name", 8),                          // a key with a key
            ("'a' == 'b'", 0),                            // no key
            ("name == 'a' 'b'", 12),                      // extra text
            ("modified > $time.this_week", 11),           // G7: a range
            ("size IN 5", 8),                             // IN takes an array
        ]
        for (text, at) in cases { #expect(errorAt(text) == at, "\(text)") }
        #expect(errorAt("name == 'a'", arguments: ["left over"]) == 11, "an argument nothing uses")
        #expect(errorAt("%K == 1", arguments: ["nosuch"]) == 0)
    }
}
