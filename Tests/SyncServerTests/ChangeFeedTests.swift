import Foundation
import ItemModel
import SyncAPI
import TestSupport
import Testing

@Suite struct ChangeFeedTests {
    @Test func changesSinceACursorAreOrderedAndPaged() async throws {
        try await withLive { live in
            let (a, c) = (live.alice, live.c)
            _ = try await a.send(.PUT, APIPath.container(c))
            let start = try await a.send(.GET, APIPath.container(c)).decode(ContainerInfo.self).cursor
            let f = try await a.createFile(c, name: "a", content: Data("a"))
            let g = try await a.createFolder(c, name: "g")
            _ = try await a.send(.DELETE, APIPath.item(c, f.id) + "?baseRevision=\(f.revision)")
            let page1 = try await a.send(.GET, APIPath.changes(c) + "?since=\(start)&limit=1").decode(ChangePage.self)
            #expect(page1.changes.map(\.item.id) == [g.id] && page1.hasMore)
            let page2 = try await a.send(.GET, APIPath.changes(c) + "?since=\(page1.cursor)&limit=1").decode(ChangePage.self)
            #expect(page2.changes.map(\.kind) == [.delete] && page2.changes[0].item.id == f.id && page2.changes[0].item.deleted)
            #expect(!page2.hasMore)
            let info = try await a.send(.GET, APIPath.container(c)).decode(ContainerInfo.self)
            #expect(info.cursor == page2.cursor)
            let none = try await a.send(.GET, APIPath.changes(c) + "?since=\(page2.cursor)").decode(ChangePage.self)
            #expect(none.changes.isEmpty && none.cursor == page2.cursor)
        }
    }

    /// A page put together from stored item JSON reads back as the page it stands for, with
    /// names and cursors that need escaping.
    @Test func aPageOfStoredItemJSONDecodesAsThePage() throws {
        let items = [
            ItemMetadata(id: .random(), parentID: .root, name: "quote \" back\\slash\ttab é", kind: .file, revision: Revision("7"),
                         size: 3, digest: sha256(Data("abc".utf8)), mode: 0o644, created: 1, modified: 2, xattrs: ["user.t": Data([0, 255])]),
            ItemMetadata(id: .random(), parentID: .root, name: "gone", kind: .folder, revision: Revision("8"),
                         size: 0, digest: nil, mode: 0o755, created: 3, modified: 4, deleted: true),
        ]
        let encoder = JSONEncoder()
        let cursors = [ChangeCursor("7"), ChangeCursor("odd \"cursor\"\u{1}")]
        let entries = try zip(items, cursors).map { item, cursor in (cursor: cursor, kind: item.deleted ? ItemChange.Kind.delete : .upsert, item: try encoder.encode(item)) }
        for hasMore in [true, false] {
            let page = try JSONDecoder().decode(ChangePage.self, from: ChangePage.encoded(entries, cursor: cursors[1], hasMore: hasMore))
            #expect(page.changes == zip(items, entries).map { ItemChange(cursor: $1.cursor, kind: $1.kind, item: $0) })
            #expect(page.cursor == cursors[1] && page.hasMore == hasMore)
        }
        let empty = try JSONDecoder().decode(ChangePage.self, from: ChangePage.encoded([], cursor: .start, hasMore: false))
        #expect(empty.changes.isEmpty && empty.cursor == .start && !empty.hasMore)
    }

    @Test func thePushStreamDeliversNewChangesWithin100ms() async throws {
        try await withLive { live in
            let (a, c) = (live.alice, live.c)
            _ = try await a.send(.PUT, APIPath.container(c))
            let cursor = try await a.send(.GET, APIPath.container(c)).decode(ContainerInfo.self).cursor
            let existing = try await a.createFolder(c, name: "before")
            let stream = EventStreamReader.open(a, path: APIPath.changeStream(c) + "?since=\(cursor)")
            defer { stream.cancel() }
            var events = stream.events.makeAsyncIterator()
            // Catch-up first, then `ready`, then the key-value version.
            let first = try await events.next()
            #expect(first?.name == "change")
            #expect(try JSONDecoder().decode(ItemChange.self, from: Data(first!.data)).item.id == existing.id)
            #expect(try await events.next()?.name == "ready")
            #expect(try await events.next()?.name == "kv")

            var latencies: [Duration] = []
            let clock = ContinuousClock()
            for i in 0..<9 {
                let made = try await a.createFolder(c, name: "pushed \(i)")
                // The answer comes after the commit: measured from it, the latency is an upper
                // bound of the time from the commit to the event (an event that overtook the
                // answer counts as zero).
                let acknowledged = clock.now
                let event = try await events.next()
                let arrived = clock.now
                #expect(event?.name == "change")
                let change = try JSONDecoder().decode(ItemChange.self, from: Data(event!.data))
                #expect(change.item.id == made.id && event?.id == change.cursor.rawValue)
                latencies.append(max(.zero, arrived - acknowledged))
            }
            let median = latencies.sorted()[latencies.count / 2]
            #expect(median < .milliseconds(100), "median push latency \(median), all: \(latencies)")
        }
    }

    @Test func pushStreamsAreSeparatePerAccount() async throws {
        try await withLive { live in
            let c = live.c
            _ = try await live.alice.send(.PUT, APIPath.container(c))
            _ = try await live.bob.send(.PUT, APIPath.container(c))
            let bobStream = EventStreamReader.open(live.bob, path: APIPath.changeStream(c) + "?since=0")
            defer { bobStream.cancel() }
            var bobEvents = bobStream.events.makeAsyncIterator()
            #expect(try await bobEvents.next()?.name == "change")  // bob's root
            #expect(try await bobEvents.next()?.name == "ready")
            #expect(try await bobEvents.next()?.name == "kv")
            _ = try await live.alice.createFolder(c, name: "alice's")
            let bobs = try await live.bob.createFolder(c, name: "bob's")
            // The next event bob sees is his own folder: alice's change never reached him.
            let next = try await bobEvents.next()
            #expect(try JSONDecoder().decode(ItemChange.self, from: Data(next!.data)).item.id == bobs.id)
            let noStream = try await live.anonymous.send(.GET, APIPath.changeStream(c))
            #expect(noStream.status == 401)
        }
    }
}
