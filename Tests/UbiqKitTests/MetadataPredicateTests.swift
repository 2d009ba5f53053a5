import Foundation
import QueryLanguage
import Testing
import UbiqKit

/// `%K` and `%@` are filled as the query language reads them back: a value is never more than
/// one literal, whatever it holds.
@Suite struct MetadataPredicateTests {
    /// Each value, written into the text, parses to the same tree as the daemon's own binding
    /// of it as an argument.
    @Test(arguments: [
        "*.txt", "it's", #"say "hi""#, #"back\slash"#, #"a\*b"#, "' OR TRUEPREDICATE OR name == '", "new\nline\ttab\r\u{7F}\u{01}",
        "Résumé", "e\u{301}", "🙂", "%@", "%K", "", #"\"#, #"\'"#,
    ])
    func aStringArgumentReadsBackAsExactlyItself(_ value: String) throws {
        let predicate = try MetadataPredicate(format: "%K LIKE %@", NSMetadataItemFSNameKey, value)
        let written = try QueryParser.parse(predicate.predicateFormat)
        let bound = try QueryParser.parse("%K LIKE %@", arguments: [NSMetadataItemFSNameKey, value])
        #expect(written.tree == bound.tree, "\(predicate.predicateFormat)")
    }

    @Test func numbersBooleansAndDatesAreLiteralsOfTheirType() throws {
        let date = Date(timeIntervalSinceReferenceDate: 795_139_200.5)
        let predicate = try MetadataPredicate(
            format: "%K > %@ AND %K < %@ AND %K == %@ AND %K > %@", "size", 1000, "percentDownloaded", 99.5, "isUploaded", false, "modified", date)
        #expect(predicate.predicateFormat == #"size > 1000 AND percentDownloaded < 99.5 AND isUploaded == FALSE AND modified > CAST(795139200.5, "NSDate")"#)
        _ = try QueryParser.parse(predicate.predicateFormat)
        #expect(try MetadataPredicate(format: "size > %@", -3).predicateFormat == "size > -3")
        #expect(try MetadataPredicate(format: "size > %@", 1e-5).predicateFormat == "size > 1e-05")
        _ = try QueryParser.parse("size > 1e-05")
    }

    @Test func quotedDirectivesAndDoublePercentsAreLeftAlone() throws {
        let predicate = try MetadataPredicate(format: #"name == '%@' OR name == "100%%" OR name LIKE %@"#, "*.md")
        #expect(predicate.predicateFormat == #"name == '%@' OR name == "100%%" OR name LIKE "*.md""#)
        #expect(try MetadataPredicate(format: "name == 'a' AND 100%% == %@", "x").predicateFormat == #"name == 'a' AND 100% == "x""#)
    }

    @Test func aKeyMustBeAKeyNameAndArgumentsMustMatchTheDirectives() {
        #expect(throws: MetadataPredicate.FormatError.self) {
            try MetadataPredicate(format: "%K == 'y'", "name == 'x' OR TRUEPREDICATE")
        }
        #expect(throws: MetadataPredicate.FormatError.self) { try MetadataPredicate(format: "%K == %@", "name") }
        #expect(throws: MetadataPredicate.FormatError.self) { try MetadataPredicate(format: "name == %@", "a", "b") }
        #expect(throws: MetadataPredicate.FormatError.self) { try MetadataPredicate(format: "size > %@", Double.infinity) }
    }
}
