import Foundation
import ItemModel
import SyncAPI
import TestSupport
import Testing

@Suite struct DurabilityTests {
    @Test func anAcknowledgedUploadSurvivesKill9() async throws {
        try await withServer { server in
            try await server.addAccount("alice", password: "pw")
            var http = try await TestHTTP(baseURL: server.baseURL).login("alice", "pw")
            let c = ContainerID.default
            var acknowledged: [(ItemMetadata, Data)] = []
            for i in 0..<20 {
                let content = Data((0..<(50_000 + i)).map { UInt8(truncatingIfNeeded: $0 ^ i) })
                acknowledged.append((try await http.createFile(c, name: "file \(i)", content: content), content))
            }
            let last = acknowledged.last!.0
            let v2 = Data("second version")
            let updated = try await http.json(.PUT, APIPath.content(c, last.id), UpdateContentRequest(baseRevision: last.revision, digest: try await http.uploadBlob(v2)))
            #expect(updated.status == 200)
            // No shutdown code runs: what was acknowledged must already be on disk.
            server.kill9()
            try await server.restart()
            http = try await TestHTTP(baseURL: server.baseURL).login("alice", "pw")
            for (item, content) in acknowledged.dropLast() {
                let r = try await http.send(.GET, APIPath.content(c, item.id))
                #expect(r.status == 200 && sha256(r.body) == sha256(content), "\(item.name)")
            }
            let r = try await http.send(.GET, APIPath.content(c, last.id))
            #expect(r.body == v2)
            #expect(try await http.send(.GET, APIPath.item(c, last.id)).decode(ItemMetadata.self) == (try updated.decode(ItemMetadata.self)))
        }
    }

    /// A test run that crashes or is killed must not leave servers behind: each test server
    /// runs with `--exit-with-stdin` and its standard input is a pipe only the test holds.
    @Test func theServerStopsWhenItsParentLetsGoOfItsStandardInput() async throws {
        try await withServer { server in
            try await server.addAccount("alice", password: "pw")
            let http = try await TestHTTP(baseURL: server.baseURL).login("alice", "pw")
            #expect(try await http.send(.PUT, APIPath.container(.default)).status == 201)
            #expect(server.isRunning)
            server.dropLifeline()
            try await eventually("the server to exit once its standard input ended") { !server.isRunning }
            #expect(server.terminationStatus == 0, "a graceful stop, as on SIGTERM")
        }
    }

    @Test func tokensSurviveARestart() async throws {
        try await withServer { server in
            try await server.addAccount("alice", password: "pw")
            let http = try await TestHTTP(baseURL: server.baseURL).login("alice", "pw")
            server.kill9()
            try await server.restart()
            let again = TestHTTP(baseURL: server.baseURL, token: http.token)
            #expect(try await again.send(.GET, APIPath.containers).status == 200)
        }
    }
}
