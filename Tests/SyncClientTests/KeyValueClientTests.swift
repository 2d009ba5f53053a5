import Foundation
import ItemModel
import SyncAPI
@testable import SyncClient
import Testing
import TestSupport

@Suite struct KeyValueClientTests {
    /// The client's calls against a real server: values go and come back as the bytes given,
    /// refusals arrive as `RemoteError.refused` with the protocol's code.
    @Test func theKeyValueCallsAndWhoami() async throws {
        try await withServer { server in
            try await server.addAccount("alice", password: "pw")
            let token = try #require(try await TestHTTP(baseURL: server.baseURL).login("alice", "pw").token)
            let client = SyncHTTPClient(baseURL: server.baseURL, token: token, container: .default)
            let other = SyncHTTPClient(baseURL: "http://localhost:\(server.port)", token: token, container: .default)
            do {
                let me = try await client.whoami()
                #expect(me.account == "alice" && me.identity.count == 64)
                #expect(try await other.whoami() == me, "the same through another address")

                _ = try await client.ensureContainer()
                #expect(try await client.keyValues() == KeyValuePage(version: 0, entries: []))
                let data = Data(#" {"$data" : "AAEC/w=="} "#.utf8)
                #expect(try await client.setKeyValue("a/b ü", json: data) == 1)
                #expect(try await other.setKeyValue("n", json: Data("1.50".utf8)) == 2)
                let page = try await client.keyValues()
                #expect(page == KeyValuePage(version: 2, entries: [
                    KeyValueEntry(key: "a/b ü", version: 1, value: data), KeyValueEntry(key: "n", version: 2, value: Data("1.50".utf8)),
                ]))
                #expect(try await client.removeKeyValue("a/b ü") == 3)
                #expect(try await client.removeKeyValue("a/b ü") == 3, "not there: no error, the same version")
                #expect(try await client.keyValues(since: 2) == KeyValuePage(version: 3, entries: [KeyValueEntry(key: "a/b ü", version: 3, value: nil)]))

                await #expect(throws: RemoteError.refused(code: .kvKeyTooLong, message: "a key is 1 to 64 bytes of UTF-8; this one is 65; nothing was stored", current: nil)) {
                    try await client.setKeyValue(String(repeating: "k", count: 65), json: Data("1".utf8))
                }
                await #expect(throws: RemoteError.refused(code: .kvKeyTooLong, message: "a key is 1 to 64 bytes of UTF-8; this one is 0; nothing was stored", current: nil)) {
                    try await client.removeKeyValue("")
                }
                do {
                    _ = try await client.setKeyValue("k", json: Data("not json".utf8))
                    Issue.record("a value that is not JSON was taken")
                } catch let error as RemoteError {
                    #expect(error.code == .invalidRequest)
                }
                do {
                    _ = try await client.keyValues(since: 99)
                    Issue.record("a version ahead of the store's was taken")
                } catch let error as RemoteError {
                    #expect(error.code == .invalidCursor)
                }
            } catch {
                await client.shutdown()
                await other.shutdown()
                throw error
            }
            await client.shutdown()
            await other.shutdown()
        }
    }

    /// The push stream as the client reads it: `kv` events become `.keyValues`, after `ready`
    /// and after each change of the store.
    @Test func thePushStreamCarriesTheKeyValueVersion() async throws {
        try await withServer { server in
            try await server.addAccount("alice", password: "pw")
            let token = try #require(try await TestHTTP(baseURL: server.baseURL).login("alice", "pw").token)
            let client = SyncHTTPClient(baseURL: server.baseURL, token: token, container: .default)
            do {
                let info = try await client.ensureContainer()
                let events = client.changeStream(since: info.cursor)
                var iterator = events.makeAsyncIterator()
                #expect(try await iterator.next() == .ready(info.cursor))
                #expect(try await iterator.next() == .keyValues(version: 0))
                _ = try await client.setKeyValue("k", json: Data("true".utf8))
                #expect(try await iterator.next() == .keyValues(version: 1))
            } catch {
                await client.shutdown()
                throw error
            }
            await client.shutdown()
        }
    }

    /// A newer server may send events this client does not know: they are skipped, and the
    /// ones around them still arrive.
    @Test func anUnknownEventIsSkipped() throws {
        var parser = ServerSentEventParser()
        let text = """
            event: some-future-event
            data: {"whatever":[1,2]}

            id: 7
            event: change
            data: {"cursor":"7","kind":"upsert","item":{"id":"root","name":"","kind":"folder","revision":"7","size":0,"mode":493,"created":1,"modified":1,"xattrs":{},"deleted":false}}

            event: ready
            data: {"cursor":"7"}

            event: kv
            data: {"version":3}

            event: another
            data: not even JSON


            """
        let events = parser.feed(Array(text.utf8))
        #expect(events.map(\.name) == ["some-future-event", "change", "ready", "kv", "another"])
        let known = try events.compactMap(SyncHTTPClient.streamEvent)
        #expect(known.count == 3)
        guard known.count == 3 else { return }
        if case .change(let change) = known[0] { #expect(change.item.id == .root) } else { Issue.record("\(known[0])") }
        #expect(known[1] == .ready(ChangeCursor("7")))
        #expect(known[2] == .keyValues(version: 3))
    }
}
