import Foundation
import ItemModel
import NIOCore
import SyncAPI
import SyncClient
import Testing
import TestSupport

/// The client against a real server behind a slow uplink (`ThrottledRelay`). The mount's
/// client gives a request a minute; the tests give it one second and send a few seconds' worth.
@Suite("A slow link")
struct SlowLinkTests {
    static let rate = 512 << 10  // 512 KiB/s
    static let size = 2 << 20  // four seconds of it

    @Test("uploads that take longer than a request's deadline go through: only a transfer that stops moving is cut")
    func transfersOfContentHaveNoDeadline() async throws {
        try await withServer { server in
            try await server.addAccount("alice", password: "alice-pw")
            let token = try #require(try await TestHTTP(baseURL: server.baseURL).login("alice", "alice-pw").token)
            let relay = try ThrottledRelay(to: server.port, bytesPerSecond: Self.rate)
            defer { relay.close() }
            let client = SyncHTTPClient(baseURL: relay.baseURL, token: token, container: .default, requestDeadline: .seconds(1))
            do {
                var generator = SeededGenerator(seed: 7)
                var content: [UInt8] = []
                content.reserveCapacity(Self.size)
                for _ in 0..<(Self.size / 8) { withUnsafeBytes(of: generator.next()) { content.append(contentsOf: $0) } }
                let file = FileManager.default.temporaryDirectory.appendingPathComponent("slow-\(UUID().uuidString)").path
                defer { try? FileManager.default.removeItem(atPath: file) }
                try Data(content).write(to: URL(fileURLWithPath: file))
                let digest = sha256(Data(content))
                _ = try await client.ensureContainer()
                let started = ContinuousClock.now
                try await client.uploadBlob(digest, size: Int64(content.count), fromFile: file)
                #expect(ContinuousClock.now - started > .seconds(1), "the upload outlasted the deadline")
                #expect(try await client.hasBlob(digest))

                // Inline content in a batch of creates: the same. The largest batch, 1 MiB and
                // a third more in base64, takes more than two seconds here.
                let started2 = ContinuousClock.now
                let parts = (0..<4).map { i in Array(content[(i * SyncProtocol.maxInlineContent)..<((i + 1) * SyncProtocol.maxInlineContent)]) }
                let results = try await client.createItems(parts.enumerated().map { i, part in
                    CreateItemRequest(parentID: .root, name: "part-\(i).bin", kind: .file, digest: sha256(Data(part)), content: Data(part))
                })
                #expect(ContinuousClock.now - started2 > .seconds(1), "the batch outlasted the deadline")
                #expect(results.map { (try? $0.get())?.size } == Array(repeating: Int64(SyncProtocol.maxInlineContent), count: 4))
            } catch {
                await client.shutdown()
                throw error
            }
            await client.shutdown()
        }
    }
}
