import Foundation
import GRDB
import ItemModel
import LocalState
import MetadataIndex
import QueryLanguage
import Testing

/// Transfers under way, as a test sets them.
struct FixedTransfers: TransfersInFlight {
    var downloads: [Int64: Int] = [:]
    var uploads: [Int64: Int?] = [:]
    func downloadPercent(_ ino: Int64) -> Int? { downloads[ino] }
    func upload(_ ino: Int64) -> (uploading: Bool, percent: Int?) { uploads[ino].map { (true, $0) } ?? (false, nil) }
}

/// A small deterministic generator (SplitMix64): a failing seed reproduces.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// A mount's rows, random but with the names and states that tell SQL and Swift apart:
/// Unicode forms, case pairs outside ASCII, glob characters, `.nosync`, the versions folder,
/// conflicts, queued changes, transfers in memory.
struct RandomIndex {
    let store: LocalStore
    var transfers = FixedTransfers()

    static let names = [
        "notes.txt", "Notes.TXT", "notes.xml", "é.txt", "e\u{301}.txt", "Résumé.pdf", "RESUME.pdf", "straße.md", "STRASSE.md",
        "ſ.txt", "\u{212A}elvin.txt", "kelvin.txt", "a*b.txt", "a?b", "[x].json", "100%_done.csv", "back\\slash.txt",
        "photo.JPG", "data.bin", "x", ".hidden", "Ünïcödé.swift", "tab\tname.txt", "line\r\nbreak.txt", "ǅ.txt", "ﬁle.txt",
        "İstanbul.txt", "istanbul.txt", "日本語.txt", "emoji 😀.png", "a.b.c.tar", "song.mp3", "Makefile", "script.sh",
    ]
    static let folders = ["Documents", "Photos", "cache.nosync", "Ärchive", "deep"]

    init(seed: UInt64) throws {
        var random = SeededRandom(state: seed)
        store = try LocalStore()
        var transfers = FixedTransfers()
        let versions = try store.read { try $0.versionsFolder()?.ino }
        try store.write { w in
            var parents: [Int64] = [LocalItem.rootIno]
            func time(_ r: inout SeededRandom) -> Timestamp {
                // Around 2025–2026, with nanoseconds, and now and then exactly on a second.
                let seconds = Int64.random(in: 1_735_689_600...1_798_761_600, using: &r)
                return seconds * 1_000_000_000 + (Bool.random(using: &r) ? 0 : Int64.random(in: 0..<1_000_000_000, using: &r))
            }
            for n in 0..<60 {
                let folder = n < 12
                // The versions folder holds files only, as the mount makes it.
                let inVersions = !folder && Int.random(in: 0..<8, using: &random) == 0
                let parent = n < 5 ? LocalItem.rootIno : (inVersions ? (versions ?? 1) : parents.randomElement(using: &random)!)
                var name = folder ? Self.folders.randomElement(using: &random)! : Self.names.randomElement(using: &random)!
                while try w.reader.child(of: parent, named: name) != nil { name = "\(n)-" + name }
                let content: ContentState = folder ? .current : [.placeholder, .current, .stale, .dirty].randomElement(using: &random)!
                var xattrs: [String: Data] = [:]
                if Bool.random(using: &random) { xattrs["user.xdg.tags"] = Data(["work, urgent", "Work", "ünï,x", "", "red,blue,green"].randomElement(using: &random)!.utf8) }
                if Bool.random(using: &random) { xattrs["user.color"] = Data(["red", "Red", "rÉd", "*"].randomElement(using: &random)!.utf8) }
                let revision: Revision? = Int.random(in: 0..<5, using: &random) == 0 ? nil : Revision("r\(n)")
                var conflicts: [ConflictVersion] = []
                if !folder && Int.random(in: 0..<5, using: &random) == 0 {
                    conflicts = (0..<Int.random(in: 1...2, using: &random)).map { k in
                        ConflictVersion(id: ItemID("c\(n)-\(k)"), digest: .of(Data([UInt8(k)])), size: 1, device: "d", modified: 0, base: Revision("r"))
                    }
                }
                let item = try w.insert(LocalItem(
                    itemID: ItemID("id\(n)"), parent: parent, name: name, kind: folder ? .folder : .file,
                    size: Int64([0, 1, 50, 100, 4096, 5000, 1 << 30].randomElement(using: &random)!), mode: folder ? 0o755 : 0o644,
                    created: time(&random), modified: time(&random), changed: 0, xattrs: xattrs, revision: revision,
                    content: content, pinned: Bool.random(using: &random),
                    downloadError: Int.random(in: 0..<6, using: &random) == 0 ? ["timed out", "Digest MISMATCH"].randomElement(using: &random)! : nil,
                    uploadError: Int.random(in: 0..<6, using: &random) == 0 ? "quota" : nil, conflicts: conflicts))
                if folder { parents.append(item.ino) }
                if Int.random(in: 0..<5, using: &random) == 0 { try w.enqueue(.content, ino: item.ino) }
                if let first = conflicts.first, Bool.random(using: &random) {
                    try w.setResolution(item.ino, ConflictResolution(settled: [first.id], keep: nil))
                }
                if !folder && content == .placeholder && Bool.random(using: &random) { transfers.downloads[item.ino] = Int.random(in: 0...99, using: &random) }
                if Int.random(in: 0..<6, using: &random) == 0 { transfers.uploads[item.ino] = Bool.random(using: &random) ? Int.random(in: 0...99, using: &random) : nil }
            }
        }
        self.transfers = transfers
    }

    func sql(_ predicate: QueryPredicate, clock: QueryClock, scope: QueryScope = .all) throws -> [String] {
        try store.read { try MetadataQuery.run(predicate, in: $0, transfers: transfers, scope: scope, clock: clock) }.map(\.path)
    }

    func count(_ predicate: QueryPredicate, clock: QueryClock, scope: QueryScope = .all) throws -> Int {
        try store.read { try MetadataQuery.count(predicate, in: $0, transfers: transfers, scope: scope, clock: clock) }
    }

    func memory(_ predicate: QueryPredicate, clock: QueryClock, scope: QueryScope = .all) throws -> [String] {
        try store.read { r in
            MetadataQuery.evaluate(predicate, items: try r.allItems(), snapshot: try IndexSnapshot(r, transfers: transfers), scope: scope, clock: clock)
        }.map(\.path)
    }
}

/// Generates predicates as text, with string values bound through `%@` (so any string can be
/// one), as a program would pass them.
struct PredicateWriter {
    var random: SeededRandom
    var arguments: [String] = []

    static let stringKeys = ["name", "displayName", "path", "contentType", "downloadingError", "uploadingError", "xattr.user.color", "url", "kMDItemFSName"]
    static let severalKeys = ["tags", "contentTypeTree"]
    static let numberKeys = ["size", "percentDownloaded", "percentUploaded"]
    static let dateKeys = ["created", "modified"]
    static let boolKeys = ["isUbiquitous", "isDownloading", "isDownloaded", "hasUnresolvedConflicts", "isUploaded", "isUploading", "pinned", "isShared"]
    static let strings = [
        "*.txt", "notes.txt", "NOTES.TXT", "*", "?.txt", "e*", "é*", "E\u{301}*", "*e", "a\\*b.txt", "a*b.txt", "", "straße*", "STRASSE*",
        "k*", "K*", "s*", "ſ*", "100%*", "*_*", "[x]*", "public.text", "public.plain-text", "public.data", "work", "WORK", "ünï", "UNI",
        "/Documents/*", "/Documents", "*.nosync*", "red", "RED", "red*", "quota", "timed", "Digest", "x", "i*", "İ*", "ǆ*", "fi*", "*😀*",
        ".*\\.txt", "[a-z]+\\..*", "(?i)notes.*", "tab*", "*\n*", "line*",
    ]

    mutating func pick<T>(_ values: [T]) -> T { values.randomElement(using: &random)! }

    mutating func bound(_ s: String) -> String {
        arguments.append(s)
        return "%@"
    }

    mutating func predicate(depth: Int = 0) -> String {
        switch Int.random(in: 0..<(depth >= 3 ? 1 : 5), using: &random) {
        case 1: return "(\(predicate(depth: depth + 1)) AND \(predicate(depth: depth + 1)))"
        case 2: return "(\(predicate(depth: depth + 1)) OR \(predicate(depth: depth + 1)))"
        case 3: return "NOT (\(predicate(depth: depth + 1)))"
        default: return comparison()
        }
    }

    mutating func modifier() -> String { pick(["", "", "[c]", "[d]", "[cd]"]) }

    mutating func stringComparison(_ key: String) -> String {
        switch Int.random(in: 0..<9, using: &random) {
        case 0: return "\(key) IN {\(bound(pick(Self.strings))), \(bound(pick(Self.strings)))}"
        case 1: return "\(key) BETWEEN {\(bound(pick(Self.strings))), \(bound(pick(Self.strings)))}"
        case 2: return "\(bound(pick(Self.strings))) IN\(modifier()) \(key)"
        case 3: return "\(key) \(pick(["==", "!="])) nil"
        default:
            let op = pick(["==", "!=", "LIKE", "BEGINSWITH", "ENDSWITH", "CONTAINS", "MATCHES", "<", ">=", "=="])
            return "\(key) \(op)\(modifier()) \(bound(pick(Self.strings)))"
        }
    }

    mutating func comparison() -> String {
        switch Int.random(in: 0..<7, using: &random) {
        case 0, 1: return stringComparison(pick(Self.stringKeys))
        case 2:
            let key = pick(Self.severalKeys)
            return Bool.random(using: &random) ? "\(pick(["", "ANY ", "ALL ", "NONE "]))\(stringComparison(key))" : "\(key) CONTAINS\(modifier()) \(bound(pick(Self.strings)))"
        case 3:
            let key = pick(Self.numberKeys)
            let n = pick(["0", "1", "50", "100", "4096", "5000", "-1", "1e9"])
            return Bool.random(using: &random) ? "\(key) \(pick(["==", "!=", "<", "<=", ">", ">="])) \(n)" : "\(key) \(pick(["IN {0, 100, 50}", "BETWEEN {1, 5000}"]))"
        case 4:
            let key = pick(Self.dateKeys)
            let when = pick(["$time.now(-86400)", "$time.today(-300)", "'2026-01-01T00:00:00Z'", "'2025-06-15'", #"CAST(780000000, "NSDate")"#, "$time.now"])
            return Bool.random(using: &random) ? "\(key) \(pick(["==", "!=", "<", "<=", ">", ">="])) \(when)" : "\(key) BETWEEN {'2025-03-01', \(when)}"
        case 5:
            return "\(pick(Self.boolKeys)) \(pick(["==", "!="])) \(pick(["YES", "NO", "1", "0", "TRUE"]))"
        default:
            let status = pick(["notDownloaded", "current", "downloaded", "excluded", "NSMetadataUbiquitousItemDownloadingStatusCurrent"])
            return Bool.random(using: &random)
                ? "downloadingStatus \(pick(["==", "!=", "<", ">="])) '\(status)'"
                : "downloadingStatus IN {'notDownloaded', '\(status)'}"
        }
    }
}

@Suite("SQL and the in-memory evaluator")
struct SQLAgreementTests {
    static let clock = QueryClock(now: Date(timeIntervalSince1970: 1_780_000_000), timeZone: TimeZone(identifier: "Europe/Paris")!)

    @Test("generated predicates over generated rows: the compiled SQL selects exactly what the evaluator selects", arguments: [UInt64(1), 2, 3, 4])
    func generatedPredicatesAgree(seed: UInt64) async throws {
        let index = try RandomIndex(seed: seed)
        var compared = 0
        var matchedSome = 0
        for n in 0..<400 {
            var writer = PredicateWriter(random: SeededRandom(state: seed &* 1_000_003 &+ UInt64(n)))
            let text = writer.predicate()
            let predicate: QueryPredicate
            do { predicate = try QueryParser.parse(text, arguments: writer.arguments) } catch { continue }
            let scope = [QueryScope.all, .all, .documents, .data][n % 4]
            let (sql, memory) = (try index.sql(predicate, clock: Self.clock, scope: scope), try index.memory(predicate, clock: Self.clock, scope: scope))
            #expect(sql == memory, "seed \(seed), \(text) with \(writer.arguments.debugDescription), scope \(scope)")
            #expect(try index.count(predicate, clock: Self.clock, scope: scope) == memory.count, "count: seed \(seed), \(text), scope \(scope)")
            compared += 1
            if !memory.isEmpty { matchedSome += 1 }
            await Task.yield()
        }
        // The generator is worth something only if most predicates type-check and many select
        // some rows but not all.
        #expect(compared > 250, "\(compared) predicates compared")
        #expect(matchedSome > 100, "\(matchedSome) predicates matched something")
    }

    @Test("the rows that tell SQL's LIKE and GLOB from Unicode rules: NFD, non-ASCII case pairs, control characters")
    func unicodeEdges() throws {
        let index = try RandomIndex(seed: 99)
        for (text, arguments) in [
            ("name LIKE[c] %@", ["*.txt"]), ("name BEGINSWITH %@", ["e"]), ("name BEGINSWITH[cd] %@", ["e"]), ("name ==[c] %@", ["k*"]),
            ("name LIKE[c] %@", ["s*"]), ("name LIKE %@", ["?.txt"]), ("name LIKE %@", ["line?break.txt"]), ("name CONTAINS[c] %@", ["i"]),
            ("name == %@", ["a\\*b.txt"]), ("name LIKE %@", ["100%*"]), ("name LIKE[c] %@", ["*_*"]), ("name LIKE %@", ["[x]*"]),
        ] {
            let predicate = try QueryParser.parse(text, arguments: arguments)
            #expect(try index.sql(predicate, clock: Self.clock) == index.memory(predicate, clock: Self.clock), "\(text) \(arguments)")
        }
    }

    @Test("a count of statuses alone, answered from the counts kept per state, follows every change of content, place and name")
    func statusCountsFollowChanges() throws {
        let index = try RandomIndex(seed: 7)
        let predicates = try [
            "downloadingStatus == 'notDownloaded'", "downloadingStatus == 'current'", "downloadingStatus != 'downloaded'",
            "downloadingStatus == 'excluded'", "downloadingStatus IN {'notDownloaded', 'excluded'}", "downloadingStatus >= 'downloaded'",
            "NOT (downloadingStatus == 'NSMetadataUbiquitousItemDownloadingStatusCurrent')", "TRUEPREDICATE", "FALSEPREDICATE",
        ].map { try QueryParser.parse($0) }
        func agree(_ when: String) throws {
            for predicate in predicates {
                #expect(try index.count(predicate, clock: Self.clock) == index.memory(predicate, clock: Self.clock).count, "\(when): \(predicate)")
            }
        }
        try agree("as made")
        let items = try index.store.read { try $0.allItems() }.filter { $0.ino != LocalItem.rootIno }
        let files = items.filter { $0.kind == .file }
        let folders = items.filter { $0.kind == .folder && $0.name != LocalItem.versionsFolderName }
        try #require(files.count > 10 && folders.count > 2)
        try index.store.write { w in
            for (n, var file) in files.prefix(10).enumerated() {
                file.content = [ContentState.placeholder, .current, .stale, .dirty][n % 4]
                try w.updateContentState(file)
            }
        }
        try agree("after content changes")
        try index.store.write { w in
            var folder = folders[0]
            folder.name = folder.name.hasSuffix(".nosync") ? "back" : folder.name + ".nosync"
            try w.update(folder)
        }
        try agree("after a folder's rename in or out of .nosync")
        try index.store.write { w in
            for file in files.suffix(5) { try w.delete(file.ino) }
            _ = try w.insert(LocalItem(
                itemID: ItemID("new"), parent: folders[1].ino, name: "new.txt", kind: .file, size: 1, mode: 0o644,
                created: 0, modified: 0, changed: 0, xattrs: [:], revision: nil, content: .placeholder))
        }
        try agree("after deletes and an insert")
    }

    @Test("values are bound, never spliced into the SQL text")
    func valuesAreBound() throws {
        let predicate = try QueryParser.parse("name == %@ OR xattr.user.x == %@ OR size > 1234567", arguments: ["'; DROP TABLE items; --", "zz9"])
        let query = SQLCompiler.compile(predicate, clock: Self.clock)
        #expect(!query.condition.contains("DROP"))
        #expect(!query.condition.contains("zz9"))
        #expect(!query.condition.contains("user.x"))
        #expect(!query.condition.contains("1234567"))
        #expect(query.arguments.contains("'; DROP TABLE items; --".databaseValue))
        let index = try RandomIndex(seed: 5)
        #expect(try index.sql(predicate, clock: Self.clock) == index.memory(predicate, clock: Self.clock))
        #expect(try index.store.read { try $0.itemCount() } > 60)
    }
}
