import AsyncHTTPClient
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

    /// Two servers on one data folder would share its database, and the second would unlink
    /// the first's socket: the second exits at once. Once the first is gone, a server on a Unix
    /// socket serves the same data (each user's embedded server listens so).
    @Test(.oneServerOnly) func oneServerPerDataFolderAndAUnixSocketServesTheSameData() async throws {
        try await withServer { server in
            try await server.addAccount("alice", password: "pw")
            let http = try await TestHTTP(baseURL: server.baseURL).login("alice", "pw")
            #expect(try await http.send(.PUT, APIPath.container(.default)).status == 201)
            let socket = server.dataDirectory + "/s.sock"
            let second = try await run(Binaries.path("ubiq-server"), ["--data", server.dataDirectory, "--listen", "unix:" + socket], timeout: .seconds(30))
            #expect(second.status == 1)
            #expect(second.stderr.contains("another ubiq-server (pid ") && second.stderr.contains("serves the data folder \(server.dataDirectory)"), "\(second.stderr)")
            #expect(server.isRunning)

            server.kill9()
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Binaries.path("ubiq-server"))
            process.arguments = ["--data", server.dataDirectory, "--listen", "unix:" + socket, "--log-level", "warning"]
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            defer { process.terminate(); process.waitUntilExit() }
            let base = try #require(URL(httpURLWithSocketPath: socket, uri: "")).absoluteString.trimmingCharacters(in: CharacterSet(charactersIn: "/"))
            let overSocket = TestHTTP(baseURL: base, token: http.token)
            try await eventually("the server to answer on its socket") { (try? await overSocket.send(.GET, APIPath.health).status) == 200 }
            #expect(try await overSocket.send(.GET, APIPath.container(.default)).status == 200)
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
