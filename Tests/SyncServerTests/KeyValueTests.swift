import Foundation
import ItemModel
import SyncAPI
import TestSupport
import Testing

extension TestHTTP {
    func setKeyValue(_ c: ContainerID, _ key: String, _ json: String) async throws -> TestResponse {
        try await setKeyValue(c, key, Data(json.utf8))
    }

    func setKeyValue(_ c: ContainerID, _ key: String, _ json: Data) async throws -> TestResponse {
        try await send(.PUT, APIPath.keyValue(c, key), headers: [("Content-Type", "application/json")], body: json)
    }

    func keyValues(_ c: ContainerID, since: Int64 = 0) async throws -> KeyValuePage {
        let r = try await send(.GET, APIPath.keyValues(c) + "?since=\(since)")
        guard r.status == 200 else { throw TestSupportError("kv read failed: \(r.status) \(r.text)") }
        return try KeyValuePage(json: r.body)
    }

    /// Writes that must succeed; returns the versions they answered.
    @discardableResult
    func setKeyValues(_ c: ContainerID, _ pairs: [(String, String)]) async throws -> [Int64] {
        var versions: [Int64] = []
        for (key, json) in pairs {
            let r = try await setKeyValue(c, key, json)
            guard r.status == 200 else { throw TestSupportError("kv write of \(key) failed: \(r.status) \(r.text)") }
            versions.append(try r.decode(KeyValueWriteAnswer.self).version)
        }
        return versions
    }
}

/// Sends `request` as it is on a new connection to the server and reads the answer to its
/// end (the request asks the server to close): for paths no HTTP client sends as written.
func rawHTTP(port: Int, _ request: String) async throws -> (status: Int, body: String) {
    let connection = try RawConnection(port: port)
    connection.write(request)
    let (text, closed) = await connection.read(within: .seconds(10))
    guard closed else { throw TestSupportError("the answer did not end within 10 s: \(text.prefix(200))") }
    guard let statusLine = text.split(separator: "\r\n").first, let status = Int(statusLine.split(separator: " ").dropFirst().first ?? "") else {
        throw TestSupportError("not an HTTP answer: \(text.prefix(200))")
    }
    let body = text.range(of: "\r\n\r\n").map { String(text[$0.upperBound...]) } ?? ""
    return (status, body)
}

/// The events of a push stream as they arrive, taken one at a time with a deadline.
final class EventQueue: @unchecked Sendable {
    private let lock = NSLock()
    private var events: [ServerEvent] = []
    private var taken = 0
    private var end: (any Error)?
    private var reader: Task<Void, Never>?

    init(_ stream: EventStreamReader) {
        reader = Task { [self] in
            do {
                for try await event in stream.events { lock.withLock { events.append(event) } }
                lock.withLock { end = TestSupportError("the stream ended") }
            } catch {
                lock.withLock { end = error }
            }
        }
    }

    /// The next event; fails once `within` has passed without one.
    func next(within: Duration = .seconds(10)) async throws -> ServerEvent {
        try await eventually(timeout: within, "the next event of the push stream") {
            lock.withLock { taken < events.count || end != nil }
        }
        return try lock.withLock {
            guard taken < events.count else { throw end! }
            defer { taken += 1 }
            return events[taken]
        }
    }
}

@Suite struct KeyValueTests {
    /// What every refusal must leave: the store as it was.
    func expectRefused(
        _ r: TestResponse, _ code: APIErrorCode, _ status: Int, naming limit: String, unchanged before: KeyValuePage,
        _ http: TestHTTP, _ c: ContainerID, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        #expect(r.status == status && r.errorCode == code, "\(r.status) \(r.text)", sourceLocation: sourceLocation)
        #expect(r.error?.message.contains(limit) == true, "the message names the limit: \(r.text)", sourceLocation: sourceLocation)
        #expect(try await http.keyValues(c) == before, "a refused write stores nothing", sourceLocation: sourceLocation)
    }

    @Test func aKeyPastItsLengthIsRefusedAndStoresNothing() async throws {
        try await withLive { live in
            let (a, c) = (live.alice, live.c)
            _ = try await a.send(.PUT, APIPath.container(c))
            let before = try await a.keyValues(c)
            try await expectRefused(try await a.setKeyValue(c, String(repeating: "k", count: 65), "1"), .kvKeyTooLong, 400, naming: "64", unchanged: before, a, c)
            // Bytes, not characters: 21 three-byte characters and one of two bytes.
            try await expectRefused(
                try await a.setKeyValue(c, String(repeating: "\u{20AC}", count: 21) + "\u{E9}", "1"), .kvKeyTooLong, 400, naming: "64", unchanged: before, a, c)
            try await expectRefused(try await a.send(.PUT, APIPath.keyValues(c) + "/", body: Data("1".utf8)), .kvKeyTooLong, 400, naming: "64", unchanged: before, a, c)
            try await expectRefused(try await a.send(.DELETE, APIPath.keyValues(c) + "/"), .kvKeyTooLong, 400, naming: "64", unchanged: before, a, c)
            // HTTP clients will not send these paths as they are: written on a socket.
            for (path, what) in [("/%FF", "not UTF-8"), ("/a%2", "not percent-encoded"), ("/a%zz", "not hex")] {
                let r = try await rawHTTP(port: live.server.port, "PUT \(APIPath.keyValues(c))\(path) HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer \(a.token!)\r\nContent-Length: 1\r\nConnection: close\r\n\r\n1")
                #expect(r.status == 400 && r.body.contains(#""code":"invalid_request""#), "\(what): \(r.status) \(r.body)")
            }
            #expect(try await a.keyValues(c) == before)

            let longest = String(repeating: "\u{E9}", count: 32)
            try #require(longest.utf8.count == 64)
            #expect(try await a.setKeyValues(c, [(longest, "1")]) == [1], "64 bytes in 32 characters is a key")
            #expect(try await a.keyValues(c).entries.map { Array($0.key.utf8) } == [Array(longest.utf8)])
        }
    }

    @Test func aValueOrAStorePastItsSizeIsRefusedAndStoresNothing() async throws {
        try await withLive { live in
            let (a, c) = (live.alice, live.c)
            _ = try await a.send(.PUT, APIPath.container(c))
            try await a.setKeyValues(c, [("small", "1")])
            let before = try await a.keyValues(c)
            // A JSON string of `bytes` bytes, quotes included.
            func string(_ bytes: Int) -> Data { Data("\"".utf8) + Data(repeating: UInt8(ascii: "x"), count: bytes - 2) + Data("\"".utf8) }
            try await expectRefused(
                try await a.setKeyValue(c, "big", string(KeyValueLimits.maxValueBytes + 1)), .kvValueTooLarge, 413, naming: "1048576", unchanged: before, a, c)
            try await expectRefused(
                try await a.setKeyValue(c, "big", string(4 << 20)), .kvValueTooLarge, 413, naming: "1048576", unchanged: before, a, c)
            // The store: "small" and 1 hold 6 bytes; "k" and its value fill it to the last byte.
            let fill = KeyValueLimits.maxStoreBytes - 6 - 1
            #expect(try await a.setKeyValues(c, [("k", String(decoding: string(fill), as: UTF8.self))]) == [2], "a store filled to its last byte")
            let full = try await a.keyValues(c)
            try await expectRefused(try await a.setKeyValue(c, "x", "1"), .kvStoreTooLarge, 413, naming: "1048576", unchanged: full, a, c)
            try await expectRefused(
                try await a.setKeyValue(c, "k", string(KeyValueLimits.maxValueBytes)), .kvStoreTooLarge, 413, naming: "1048576", unchanged: full, a, c)
            #expect(try await a.send(.DELETE, APIPath.keyValue(c, "small")).decode(KeyValueWriteAnswer.self).version == 3)
            #expect(try await a.setKeyValues(c, [("x", "1")]) == [4], "a removal frees its bytes")
        }
    }

    @Test func aStoreHoldsAtMost1024Keys() async throws {
        try await withLive { live in
            let (a, c) = (live.alice, live.c)
            _ = try await a.send(.PUT, APIPath.container(c))
            for start in stride(from: 0, to: KeyValueLimits.maxKeys, by: 8) {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for i in start..<(start + 8) { group.addTask { _ = try await a.setKeyValues(c, [("key \(i)", "\(i)")]) } }
                    try await group.waitForAll()
                }
            }
            let full = try await a.keyValues(c)
            #expect(full.version == 1024 && full.entries.count == 1024)
            try await expectRefused(try await a.setKeyValue(c, "one more", "1"), .kvTooManyKeys, 413, naming: "1024", unchanged: full, a, c)
            #expect(try await a.setKeyValues(c, [("key 7", #""changed""#)]) == [1025], "a key that is there can change")
            #expect(try await a.send(.DELETE, APIPath.keyValue(c, "key 8")).decode(KeyValueWriteAnswer.self).version == 1026)
            #expect(try await a.setKeyValues(c, [("one more", "1")]) == [1027], "a removal makes room")
        }
    }

    @Test func valuesOfEveryKindComeBackByteForByte() async throws {
        try await withLive { live in
            let (a, c) = (live.alice, live.c)
            _ = try await a.send(.PUT, APIPath.container(c))
            let values: [(String, String)] = [
                ("string", #""hello""#),
                ("escapes", #""\u00e9 é \ud83d\ude00 \"quoted\" \\ \/ \n""#),
                ("integer", "42"),
                ("number", "-0.5E+10"),
                ("big number", "123456789012345678901234567890"),
                ("true", "true"),
                ("false", "false"),
                ("array", #"[1, "two", [3], {"four": 4}, true, null]"#),
                ("object", #"{ "b" :1 ,"a":[ ],"c" : {"d":"e"} }"#),
                ("spaced", "\n\t {\"x\":\r\n1} \n"),
                ("data", #"{"$data":"AAEC/w=="}"#),
                ("empty data", #"{"$data":""}"#),
                ("empty string", #""""#),
                ("empty array", "[]"),
                ("empty object", "{}"),
                ("brackets in strings", #"{"a]":"}],[{", "b":["\\", "\"]", ","]}"#),
            ]
            let keys = ["a/b", ".", "..", "a b", "100%", "?#&=+", "\u{E9}", "e\u{301}", "ключ/ünïcödé", "a\u{0}b", "🙂"]
            var written: [(String, String)] = values
            for (i, key) in keys.enumerated() { written.append((key, "\(i)")) }
            let versions = try await a.setKeyValues(c, written)
            #expect(versions == Array(1...Int64(written.count)))
            let page = try await a.keyValues(c)
            #expect(page.version == Int64(written.count))
            #expect(page.entries.map { Array($0.key.utf8) } == written.map { Array($0.0.utf8) }, "every key, byte for byte, in version order")
            for (entry, (key, json)) in zip(page.entries, written) {
                #expect(entry.value == Data(json.utf8), "\(key): \(String(decoding: entry.value ?? Data(), as: UTF8.self))")
            }
            // The raw answer carries each value as it was written, inside the answer's JSON.
            let raw = try await a.send(.GET, APIPath.keyValues(c))
            #expect(raw.headers.first(name: "Content-Type") == "application/json")
            #expect(raw.text.contains(#"{"key":"object","version":9,"value":{ "b" :1 ,"a":[ ],"c" : {"d":"e"} }}"#), "\(raw.text.prefix(2000))")
            #expect((try? JSONSerialization.jsonObject(with: raw.body)) is [String: Any], "the answer is JSON")

            // As deep as the server's parser goes; the answer that carries it is deeper, and
            // is read without parsing it whole.
            let deep = String(repeating: "[", count: 511) + String(repeating: "]", count: 511)
            try await a.setKeyValues(c, [("deep", deep)])
            #expect(try await a.keyValues(c, since: page.version).entries.map(\.value) == [Data(deep.utf8)])
            let tooDeep = "[" + deep + "]"
            #expect(try await a.setKeyValue(c, "deeper", tooDeep).errorCode == .invalidRequest, "the parser's limit")
        }
    }

    @Test func whatIsNotOneJSONDocumentIsRefused() async throws {
        try await withLive { live in
            let (a, c) = (live.alice, live.c)
            _ = try await a.send(.PUT, APIPath.container(c))
            try await a.setKeyValues(c, [("k", "1")])
            let before = try await a.keyValues(c)
            let refused: [(String, Data)] = [
                ("empty", Data()),
                ("only spaces", Data("  ".utf8)),
                ("two documents", Data("1 2".utf8)),
                ("a list", Data("1,2".utf8)),
                ("a member", Data(#"1,"a":2"#.utf8)),
                ("unclosed", Data("{".utf8)),
                ("trailing", Data(#"{"a":1}x"#.utf8)),
                ("a word", Data("hello".utf8)),
                ("null", Data("null".utf8)),
                ("null spaced", Data(" null ".utf8)),
                ("a lone surrogate", Data(#""\udc80""#.utf8)),
                ("not UTF-8", Data([0x22, 0xFF, 0x22])),
                ("UTF-16", Data([0x22, 0x00, 0x61, 0x00, 0x22, 0x00])),
                ("UTF-16 with its mark", Data([0xFF, 0xFE, 0x31, 0x00])),
                ("a byte-order mark", Data([0xEF, 0xBB, 0xBF, 0x31])),
                ("a control character", Data("\"a\u{1}b\"".utf8)),
            ]
            for (what, body) in refused {
                let r = try await a.setKeyValue(c, "k", body)
                #expect(r.status == 400 && r.errorCode == .invalidRequest, "\(what): \(r.status) \(r.text)")
            }
            #expect(try await a.keyValues(c) == before, "nothing stored")
        }
    }

    @Test func theLastWriteToReachTheServerWins() async throws {
        try await withLive { live in
            let c = live.c
            let one = live.alice
            let two = try await live.anonymous.login("alice", "alice-pw")
            _ = try await one.send(.PUT, APIPath.container(c))
            #expect(try await one.setKeyValues(c, [("theme", #""light""#)]) == [1])
            #expect(try await two.setKeyValues(c, [("theme", #""dark""#)]) == [2])
            #expect(try await one.keyValues(c).entries == [KeyValueEntry(key: "theme", version: 2, value: Data(#""dark""#.utf8))])
            // At once: each write gets its own version, and the one that committed last stays.
            let answers = try await withThrowingTaskGroup(of: (String, Int64).self) { group in
                for i in 0..<12 {
                    let http = i % 2 == 0 ? one : two
                    group.addTask { ("\(i)", try await http.setKeyValues(c, [("theme", "\(i)")])[0]) }
                }
                return try await group.reduce(into: [(String, Int64)]()) { $0.append($1) }
            }
            #expect(answers.map(\.1).sorted() == Array(3...14))
            let last = answers.max { $0.1 < $1.1 }!
            #expect(try await two.keyValues(c) == KeyValuePage(version: 14, entries: [KeyValueEntry(key: "theme", version: last.1, value: Data(last.0.utf8))]))
        }
    }

    @Test func aReadSinceAVersionHasTheChangesAndRemovalsAfterItInOrder() async throws {
        try await withLive { live in
            let (a, c) = (live.alice, live.c)
            _ = try await a.send(.PUT, APIPath.container(c))
            try await a.setKeyValues(c, [("a", "1"), ("b", "2"), ("c", "3")])
            let removed = try await a.send(.DELETE, APIPath.keyValue(c, "b"))
            #expect(try removed.status == 200 && removed.decode(KeyValueWriteAnswer.self).version == 4)
            for key in ["b", "never set"] {
                let again = try await a.send(.DELETE, APIPath.keyValue(c, key))
                #expect(try again.status == 200 && again.decode(KeyValueWriteAnswer.self).version == 4, "no error, no new version: \(again.text)")
            }
            try await a.setKeyValues(c, [("a", "10")])
            let all = try await a.keyValues(c)
            #expect(all.version == 5)
            #expect(all.entries == [KeyValueEntry(key: "c", version: 3, value: Data("3".utf8)), KeyValueEntry(key: "a", version: 5, value: Data("10".utf8))],
                    "from 0: the live keys only")
            let since2 = try await a.send(.GET, APIPath.keyValues(c) + "?since=2")
            #expect(since2.text == #"{"version":5,"entries":[{"key":"c","version":3,"value":3},{"key":"b","version":4,"removed":true},{"key":"a","version":5,"value":10}]}"#)
            #expect(try await a.keyValues(c, since: 4).entries.map(\.key) == ["a"])
            #expect(try await a.keyValues(c, since: 5) == KeyValuePage(version: 5, entries: []))
            #expect(try await a.send(.GET, APIPath.keyValues(c)).text == (try await a.send(.GET, APIPath.keyValues(c) + "?since=0").text), "since defaults to 0")
            for bad in ["6", "-1", "01", "abc", ""] {
                let r = try await a.send(.GET, APIPath.keyValues(c) + "?since=\(bad)")
                #expect(r.status == 400 && r.errorCode == .invalidCursor, "since=\(bad): \(r.text)")
            }
        }
    }

    @Test func thePushStreamSaysWhenTheStoreChanged() async throws {
        try await withLive { live in
            let (a, c) = (live.alice, live.c)
            let other = try await live.anonymous.login("alice", "alice-pw")
            _ = try await a.send(.PUT, APIPath.container(c))
            try await other.setKeyValues(c, [("before", "1")])
            let cursor = try await a.send(.GET, APIPath.container(c)).decode(ContainerInfo.self).cursor
            let stream = EventStreamReader.open(a, path: APIPath.changeStream(c) + "?since=\(cursor)")
            defer { stream.cancel() }
            let events = EventQueue(stream)
            #expect(try await events.next().name == "ready")
            // Right after `ready`: the version now, to compare with the one the client holds.
            let first = try await events.next()
            #expect(first.name == "kv" && first.id == nil && first.data == #"{"version":1}"#, "\(first)")

            try await other.setKeyValues(c, [("theme", #""dark""#)])
            let changed = try await events.next()
            #expect(changed.name == "kv" && changed.data == #"{"version":2}"#, "another client's write: \(changed)")

            // An item change is a change event as before, and moves no key-value version.
            let folder = try await other.createFolder(c, name: "Folder")
            let item = try await events.next()
            #expect(item.name == "change" && item.id != nil)
            #expect(try JSONDecoder().decode(ItemChange.self, from: Data(item.data.utf8)).item.id == folder.id)

            #expect(try await other.send(.DELETE, APIPath.keyValue(c, "never set")).status == 200)
            _ = try await other.send(.DELETE, APIPath.keyValue(c, "theme"))
            let removal = try await events.next()
            #expect(removal.name == "kv" && removal.data == #"{"version":3}"#, "a removal that changed nothing sends nothing; one that did: \(removal)")
        }
    }

    @Test func anAccountNeverSeesAnotherAccountsKeys() async throws {
        try await withLive { live in
            let c = live.c
            _ = try await live.alice.send(.PUT, APIPath.container(c))
            try await live.alice.setKeyValues(c, [("secret", #""alice only""#)])
            // 404, never 403: bob cannot tell alice's container exists.
            for r in [
                try await live.bob.send(.GET, APIPath.keyValues(c)),
                try await live.bob.setKeyValue(c, "secret", #""bob's""#),
                try await live.bob.send(.DELETE, APIPath.keyValue(c, "secret")),
                try await live.alice.send(.GET, APIPath.keyValues(try ContainerID("never-made"))),
            ] {
                #expect(r.status == 404 && r.errorCode == .containerNotFound, "\(r.status) \(r.text)")
            }
            #expect(try await live.anonymous.send(.GET, APIPath.keyValues(c)).status == 401)
            _ = try await live.bob.send(.PUT, APIPath.container(c))
            #expect(try await live.bob.keyValues(c) == KeyValuePage(version: 0, entries: []), "bob's container of that name has its own, empty store")
            try await live.bob.setKeyValues(c, [("secret", #""bob's""#)])
            #expect(try await live.alice.keyValues(c).entries == [KeyValueEntry(key: "secret", version: 1, value: Data(#""alice only""#.utf8))])
        }
    }

    /// Every write the server answered is on disk: `kill -9` in the middle of a run of writes
    /// loses none of them.
    @Test func theStoreSurvivesARestartWithNoAcknowledgedWriteLost() async throws {
        try await withServer { server in
            try await server.addAccount("alice", password: "pw")
            let http = try await TestHTTP(baseURL: server.baseURL).login("alice", "pw")
            let c = ContainerID.default
            _ = try await http.send(.PUT, APIPath.container(c))
            try await http.setKeyValues(c, [("removed", "0")])
            _ = try await http.send(.DELETE, APIPath.keyValue(c, "removed"))
            let acknowledged = AcknowledgedWrites()
            let writer = Task {
                for i in 0..<10_000 {
                    guard let r = try? await http.setKeyValue(c, "key \(i % 40)", "\(i)"), r.status == 200 else { return }
                    acknowledged.record(key: "key \(i % 40)", value: "\(i)", version: (try? r.decode(KeyValueWriteAnswer.self).version) ?? 0)
                }
            }
            try await eventually("60 writes acknowledged") { acknowledged.count >= 60 }
            server.kill9()
            await writer.value
            try await server.restart()
            let after = try await TestHTTP(baseURL: server.baseURL, token: http.token).keyValues(c)
            let last = acknowledged.latest
            #expect(after.version >= last.version, "\(after.version) against \(last.version) acknowledged")
            for (key, (value, version)) in last.values {
                let entry = after.entries.first { $0.key == key }
                // A write in flight at the kill may have landed after the last acknowledged one.
                #expect(entry.map { $0.version >= version } == true && (entry?.version != version || entry?.value == Data(value.utf8)), "\(key): \(String(describing: entry))")
            }
            let since = try await TestHTTP(baseURL: server.baseURL, token: http.token).keyValues(c, since: 1)
            #expect(since.entries.contains { $0.key == "removed" && $0.removed }, "the tombstone too")
        }
    }
}

/// The writes a server answered, as the writer saw them.
final class AcknowledgedWrites: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [String: (String, Int64)] = [:]
    private var version: Int64 = 0
    private var writes = 0

    func record(key: String, value: String, version: Int64) {
        lock.withLock {
            values[key] = (value, version)
            self.version = max(self.version, version)
            writes += 1
        }
    }

    var count: Int { lock.withLock { writes } }
    var latest: (values: [String: (String, Int64)], version: Int64) { lock.withLock { (values, version) } }
}
