import Foundation
import ItemModel
import SyncAPI
import SyncEngine
import TestSupport
import Testing

/// The engine's mirror of the key-value store, against the in-memory server: what a write
/// made offline, a write overtaken by a newer one, a refusal and another account do to it.
@Suite("Key-value mirror")
struct KeyValueMirrorTests {
    static func json(_ text: String) -> Data { Data(text.utf8) }

    @Test("a write made offline shows at once and goes up when the server is back; another device's change comes down with its notice")
    func offlineWriteThenServerChange() async throws {
        let h = try await Harness()
        defer { h.close() }
        let (notices, stop) = h.engine.keyValueNotices.subscribe()
        defer { stop() }
        var heard = notices.makeAsyncIterator()
        h.remote.isOnline = false
        try h.engine.setKeyValue("theme", json: Self.json(#""dark""#))
        #expect(try h.engine.keyValue("theme") == Self.json(#""dark""#))
        #expect(try await h.remote.storedKeyValues().isEmpty)
        h.remote.isOnline = true
        try await h.running([.changeFeed, .keyValues]) {
            #expect(await heard.next() == KeyValueNotice(.initialSync, keys: []))
            try await eventually("the write to reach the server") { try await h.remote.storedKeyValues()["theme"] == Self.json(#""dark""#) }
            try await h.remote.otherDevice.setKeyValue("size", json: Self.json("12"))
            #expect(await heard.next() == KeyValueNotice(.serverChange, keys: ["size"]))
            #expect(try h.engine.keyValue("size") == Self.json("12"))
        }
        #expect(try h.engine.keyValuePage().entries.map(\.key) == ["size", "theme"])
    }

    @Test("a newer write of a key made while the older one is on its way is not settled by the older one's answer")
    func newerWriteDuringSend() async throws {
        let h = try await Harness()
        defer { h.close() }
        let gate = h.remote.hold(.setKeyValue)
        try await h.running([.changeFeed, .keyValues]) {
            try h.engine.setKeyValue("k", json: Self.json("1"))
            try await eventually("the first write to be sent") { gate.arrivals == 1 }
            try h.engine.setKeyValue("k", json: Self.json("2"))
            gate.open()
            try await eventually("the newer write to reach the server") { try await h.remote.storedKeyValues()["k"] == Self.json("2") }
            try await eventually("nothing left to send") { try h.store.read { try $0.keyValueWrites().isEmpty } }
            #expect(try h.engine.keyValue("k") == Self.json("2"))
        }
    }

    @Test("a write the server refuses for a limit is reported as quotaViolation, dropped and never sent again")
    func serverRefusalIsReportedOnce() async throws {
        let h = try await Harness()
        defer { h.close() }
        try await h.remote.otherDevice.setKeyValue("kept", json: Self.json(#""server's""#))
        let (notices, stop) = h.engine.keyValueNotices.subscribe()
        defer { stop() }
        try await h.running([.changeFeed, .keyValues]) {
            try await eventually("the first read") { try h.engine.keyValue("kept") != nil }
            h.remote.failNext(.setKeyValue, with: .refused(code: .kvStoreTooLarge, message: "full", current: nil))
            try h.engine.setKeyValue("kept", json: Self.json(#""mine""#))
            #expect(try h.engine.keyValue("kept") == Self.json(#""mine""#))
            for await notice in notices where notice.reason == .quotaViolation {
                #expect(notice.keys == ["kept"])
                break
            }
            try await eventually("the server's value to show again") { try h.engine.keyValue("kept") == Self.json(#""server's""#) }
            #expect(h.remote.calls(.setKeyValue) == 1)
            #expect(h.observer.events.contains { $0.kind == .error && $0.detail?.contains("full") == true })
        }
    }

    @Test("a write past a limit as this device sees the store is refused before anything is queued")
    func localLimits() async throws {
        let h = try await Harness(inMemoryDatabase: true)
        defer { h.close() }
        #expect(throws: KeyValueWriteRefusal.self) { try h.engine.setKeyValue(String(repeating: "x", count: 65), json: Self.json("1")) }
        #expect(throws: KeyValueWriteRefusal.self) { try h.engine.setKeyValue("k", json: Self.json("null")) }
        #expect(throws: KeyValueWriteRefusal.self) { try h.engine.setKeyValue("k", json: Self.json("1 2")) }
        for i in 0..<KeyValueLimits.maxKeys { try h.engine.setKeyValue("key-\(i)", json: Self.json("1")) }
        #expect(throws: KeyValueWriteRefusal.self) { try h.engine.setKeyValue("one-more", json: Self.json("1")) }
        try h.engine.setKeyValue("key-1", json: Self.json("2"))
        try h.engine.removeKeyValue("key-2")
        try h.engine.setKeyValue("one-more", json: Self.json("1"))
        #expect(try h.store.read { try $0.keyValueWrites().count } == KeyValueLimits.maxKeys + 1)
    }

    @Test("a server that answers for another account stops the mount syncing and reports accountChange, keeping everything")
    func anotherAccountStopsSyncing() async throws {
        let h = try await Harness()
        defer { h.close() }
        try h.engine.setKeyValue("mine", json: Self.json("1"))
        let ino = try h.writeNewFile("kept.txt", Array("kept".utf8))
        let device = try #require(h.remote.base as? ServiceRemote)
        device.account = try await #require(h.remote.inMemory).otherAccount()
        let (notices, stop) = h.engine.keyValueNotices.subscribe()
        defer { stop() }
        try await h.running([.changeFeed, .outbox, .keyValues]) {
            try await eventually("the status to say why") { try h.engine.status().lastError?.contains("another account") == true }
            for await notice in notices where notice.reason == .accountChange { break }
            #expect(h.observer.events.contains { $0.kind == .accountChange })
        }
        #expect(try await h.remote.storedKeyValues().isEmpty, "nothing was sent")
        #expect(try await h.remote.tree().isEmpty, "nothing was sent")
        #expect(try await h.read(ino) == Array("kept".utf8))
        #expect(try h.engine.keyValue("mine") == Self.json("1"))
    }
}
