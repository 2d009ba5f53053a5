import Foundation
import ItemModel
import ServerStorage

extension StorageConformance.Fixture {
    var kv: any KeyValueStore { storage.keyValues }

    /// Every key changed after `since`.
    func keyValues(since: Int64 = 0, in container: ContainerRef? = nil) async throws -> [KeyValueEntry] {
        try await kv.keyValues(in: container ?? self.container, since: since).entries
    }

    func expectKeyValueRefusal(_ what: String, _ refusal: KeyValueRefusal, line: Int = #line, _ body: () async throws -> Int64) async throws {
        let before = try await kv.keyValues(in: container, since: 0)
        try await expectStorageError(what, line: line, { $0 == .keyValueLimit(refusal) }, body)
        let after = try await kv.keyValues(in: container, since: 0)
        try expect(after.version == before.version && after.entries == before.entries, "\(what): a refused write stores nothing", line: line)
    }
}

func entry(_ key: String, _ version: Int64, _ value: String?) -> KeyValueEntry {
    KeyValueEntry(key: key, version: version, value: value.map { Data($0.utf8) })
}

extension StorageConformance {
    static let keyValues: [StorageConformance] = [
        StorageConformance("key-value: values come back exactly, one version per change, the last write wins") { f in
            try expect(try await f.kv.keyValueVersion(in: f.container) == 0, "a new store is at version 0")
            try expect(try await f.keyValues().isEmpty, "and empty")
            try expect(try await f.kv.setValue(Data("1".utf8), for: "a", in: f.container) == 1, "the first write is version 1")
            try expect(try await f.kv.setValue(Data(#"{"x": [1, 2]}"#.utf8), for: "b", in: f.container) == 2, "then 2")
            try expect(try await f.kv.setValue(Data(#""two""#.utf8), for: "a", in: f.container) == 3, "a write of a key that is there moves the version too")
            let read = try await f.kv.keyValues(in: f.container, since: 0)
            try expect(read.version == 3, "the store's version with the read")
            try expect(read.entries == [entry("b", 2, #"{"x": [1, 2]}"#), entry("a", 3, #""two""#)], "each key once, its latest value, by version: \(read.entries)")
            try expect(try await f.kv.setValue(Data(#""two""#.utf8), for: "a", in: f.container) == 4, "the same value again is a write too")

            // Values are the bytes written, whatever they are; keys are their bytes.
            let odd = Data([0, 255, 10, 13, 0x22])
            _ = try await f.kv.setValue(odd, for: "bytes", in: f.container)
            _ = try await f.kv.setValue(Data(), for: "empty", in: f.container)
            let composed = "\u{E9}", decomposed = "e\u{301}"
            _ = try await f.kv.setValue(Data("1".utf8), for: composed, in: f.container)
            _ = try await f.kv.setValue(Data("2".utf8), for: decomposed, in: f.container)
            _ = try await f.kv.setValue(Data("3".utf8), for: "a\u{0}b", in: f.container)
            let all = try await f.keyValues()
            try expect(all.first { $0.key == "bytes" }?.value == odd, "any bytes come back exactly")
            try expect(all.first { $0.key == "empty" }?.value == Data(), "an empty value is a value, not a removal")
            let accents = all.filter { $0.key == composed }
            try expect(accents.map(\.value) == [Data("1".utf8), Data("2".utf8)] && accents.map { Array($0.key.utf8) } == [Array(composed.utf8), Array(decomposed.utf8)],
                       "keys are compared by their bytes, not as Swift compares strings: no Unicode normalization")
            try expect(all.contains { Array($0.key.utf8) == Array("a\u{0}b".utf8) && $0.value == Data("3".utf8) }, "a NUL in a key is kept")
            try expect(all.count == 7, "\(all.count) keys")
        },
        StorageConformance("key-value: a removal leaves a tombstone; a read from a version returns exactly the changes after it") { f in
            for key in ["a", "b", "c"] { _ = try await f.kv.setValue(Data(#""\#(key)""#.utf8), for: key, in: f.container) }
            try expect(try await f.kv.removeValue(for: "b", in: f.container) == 4, "a removal is a change")
            try expect(try await f.kv.removeValue(for: "b", in: f.container) == 4, "removing it again changes nothing")
            try expect(try await f.kv.removeValue(for: "never", in: f.container) == 4, "nor does removing a key never set")
            try expect(try await f.keyValues(since: 0) == [entry("a", 1, #""a""#), entry("c", 3, #""c""#)], "from 0: the live keys, no tombstones")
            try expect(try await f.keyValues(since: 2) == [entry("c", 3, #""c""#), entry("b", 4, nil)], "from 2: c, then b's removal")
            try expect(try await f.keyValues(since: 3) == [entry("b", 4, nil)], "from 3: the removal alone")
            try expect(try await f.keyValues(since: 4).isEmpty, "from the latest: nothing")
            for bad: Int64 in [5, -1] {
                try await expectStorageError("version \(bad)", { if case .invalidCursor = $0 { true } else { false } }) {
                    try await f.kv.keyValues(in: f.container, since: bad)
                }
            }
            try expect(try await f.kv.setValue(Data("9".utf8), for: "b", in: f.container) == 5, "a removed key can be set again")
            try expect(try await f.keyValues(since: 3) == [entry("b", 5, "9")], "and is live again")
            _ = try await f.kv.removeValue(for: "a", in: f.container)
            let page = try await f.kv.keyValues(in: f.container, since: 0)
            try expect(page.version == 6 && page.entries == [entry("c", 3, #""c""#), entry("b", 5, "9")], "from 0 after removals: \(page)")
        },
        StorageConformance("key-value: a write past a limit is refused and stores nothing") { f in
            _ = try await f.kv.setValue(Data("1".utf8), for: "first", in: f.container)
            try await f.expectKeyValueRefusal("an empty key", .keyLength(0)) { try await f.kv.setValue(Data("1".utf8), for: "", in: f.container) }
            try await f.expectKeyValueRefusal("a 65-byte key", .keyLength(65)) {
                try await f.kv.setValue(Data("1".utf8), for: String(repeating: "k", count: 65), in: f.container)
            }
            // Bytes, not characters: 21 three-byte characters and two bytes more.
            try await f.expectKeyValueRefusal("65 bytes in 22 characters", .keyLength(65)) {
                try await f.kv.setValue(Data("1".utf8), for: String(repeating: "\u{20AC}", count: 21) + "\u{E9}", in: f.container)
            }
            try await f.expectKeyValueRefusal("removing a key that cannot be", .keyLength(0)) { try await f.kv.removeValue(for: "", in: f.container) }
            let longest = String(repeating: "\u{E9}", count: 32)
            try expect(try await f.kv.setValue(Data("1".utf8), for: longest, in: f.container) == 2, "a key of 64 bytes in 32 characters is taken")
            try await f.expectKeyValueRefusal("a value over 1 MiB", .valueSize(KeyValueLimits.maxValueBytes + 1)) {
                try await f.kv.setValue(Data(count: KeyValueLimits.maxValueBytes + 1), for: "big", in: f.container)
            }
            // The store: keys and values of the live keys. It holds 5 + 1 + 64 + 1 bytes now.
            let held = 5 + 1 + 64 + 1
            let fill = KeyValueLimits.maxStoreBytes - held - 1
            try expect(try await f.kv.setValue(Data(count: fill), for: "k", in: f.container) == 3, "a store filled to its last byte")
            try await f.expectKeyValueRefusal("one key more", .storeSize(KeyValueLimits.maxStoreBytes + 2)) {
                try await f.kv.setValue(Data("1".utf8), for: "x", in: f.container)
            }
            try await f.expectKeyValueRefusal("a value one byte longer", .storeSize(KeyValueLimits.maxStoreBytes + 1)) {
                try await f.kv.setValue(Data(count: fill + 1), for: "k", in: f.container)
            }
            try await f.expectKeyValueRefusal("a whole 1 MiB value, with its key", .storeSize(KeyValueLimits.maxStoreBytes + held + 1)) {
                try await f.kv.setValue(Data(count: KeyValueLimits.maxValueBytes), for: "k", in: f.container)
            }
            try expect(try await f.kv.setValue(Data(count: fill - 2), for: "k", in: f.container) == 4, "a value replaced by a shorter one")
            try expect(try await f.kv.setValue(Data("1".utf8), for: "x", in: f.container) == 5, "leaves room: the store is full again")
            try expect(try await f.kv.removeValue(for: "k", in: f.container) == 6, "and a removal frees its bytes")
            try expect(try await f.kv.setValue(Data(count: fill - 2), for: "y", in: f.container) == 7, "for another key")
        },
        StorageConformance("key-value: at most 1024 keys; a key that is there can still change") { f in
            let m = f.kv, container = f.container
            // Eight writers at a time: the writes are serialized anyway, the waits overlap.
            for start in stride(from: 0, to: KeyValueLimits.maxKeys, by: 8) {
                try await withThrowingTaskGroup(of: Int64.self) { group in
                    for i in start..<(start + 8) { group.addTask { try await m.setValue(Data("\(i)".utf8), for: "key \(i)", in: container) } }
                    try await group.waitForAll()
                }
            }
            try expect(try await f.kv.keyValueVersion(in: f.container) == Int64(KeyValueLimits.maxKeys), "1024 writes")
            try await f.expectKeyValueRefusal("key 1025", .tooManyKeys) { try await f.kv.setValue(Data("1".utf8), for: "one more", in: f.container) }
            try expect(try await f.kv.setValue(Data("new".utf8), for: "key 7", in: f.container) == 1025, "a key that is there changes")
            _ = try await f.kv.removeValue(for: "key 8", in: f.container)
            try expect(try await f.kv.setValue(Data("1".utf8), for: "one more", in: f.container) == 1027, "a removal makes room")
            try await f.expectKeyValueRefusal("and then no more", .tooManyKeys) { try await f.kv.setValue(Data("1".utf8), for: "two more", in: f.container) }
            let other = try await f.m.container(try ContainerID("other"), of: f.alice, create: true)!
            try expect(try await f.kv.setValue(Data("1".utf8), for: "two more", in: other) == 1, "another container's store has its own limits")
        },
        StorageConformance("key-value: concurrent writes each get a version of their own, in the order they commit") { f in
            let m = f.kv, container = f.container
            let versions = try await withThrowingTaskGroup(of: (Int, Int64).self) { group in
                for i in 0..<16 { group.addTask { (i, try await m.setValue(Data("\(i)".utf8), for: i % 2 == 0 ? "shared" : "own \(i)", in: container)) } }
                return try await group.reduce(into: [(Int, Int64)]()) { $0.append($1) }
            }
            try expect(versions.map(\.1).sorted() == Array(1...16), "versions 1 to 16, once each: \(versions.map(\.1).sorted())")
            let last = versions.filter { $0.0 % 2 == 0 }.max { $0.1 < $1.1 }!
            let shared = try await f.keyValues().first { $0.key == "shared" }
            try expect(shared == entry("shared", last.1, "\(last.0)"), "the last write to commit wins: \(String(describing: shared)), expected \(last)")
        },
        StorageConformance("key-value: a store is its container's, and goes with its account") { f in
            let other = try await f.m.container(try ContainerID("iCloud.com.example.app"), of: f.alice, create: true)!
            _ = try await f.kv.setValue(Data("1".utf8), for: "a", in: f.container)
            _ = try await f.kv.setValue(Data("2".utf8), for: "a", in: f.container)
            try expect(try await f.kv.setValue(Data("3".utf8), for: "b", in: other) == 1, "each container has its own version")
            try expect(try await f.keyValues(in: other) == [entry("b", 1, "3")], "and its own keys")
            let bob = try await f.storage.accounts.addAccount(name: "bob", passwordHash: "h")
            let bobs = try await f.m.container(.default, of: bob, create: true)!
            try expect(try await f.keyValues(in: bobs).isEmpty, "bob's container of the same name has its own, empty store")
            _ = try await f.kv.setValue(Data("bob's".utf8), for: "a", in: bobs)
            try expect(try await f.keyValues() == [entry("a", 2, "2")], "alice's is untouched")
            _ = try await f.storage.accounts.removeAccount(name: "bob")
            try await expectStorageError("a removed account's store", { if case .containerNotFound = $0 { true } else { false } }) {
                try await f.kv.keyValues(in: bobs, since: 0)
            }
            let bobAgain = try await f.storage.accounts.addAccount(name: "bob", passwordHash: "h")
            let fresh = try await f.m.container(.default, of: bobAgain, create: true)!
            let freshVersion = try await f.kv.keyValueVersion(in: fresh)
            let freshKeys = try await f.keyValues(in: fresh)
            try expect(freshVersion == 0 && freshKeys.isEmpty, "the account added again starts empty")
            // The item log is not the key-value store's: a write adds no change-log entry.
            let cursor = try await f.storage.changes.latestCursor(in: f.container)
            _ = try await f.kv.setValue(Data("4".utf8), for: "c", in: f.container)
            try expect(try await f.storage.changes.latestCursor(in: f.container) == cursor, "no item change for a key-value write")
        },
    ]
}
