import Foundation
import ItemModel
import SyncAPI
import TestSupport
import Testing

/// What one client may hold: a real server with small limits, and clients over raw sockets
/// that send too much, too slowly, or stop reading.
@Suite struct LimitTests {
    @Test func aRequestHeadPastTheLimitIsRefused() async throws {
        try await withServer(extraArguments: ["--max-header-bytes", "2048"]) { server in
            let small = try RawConnection(port: server.port)
            small.write("GET /health HTTP/1.1\r\nHost: x\r\nX-Fill: \(String(repeating: "a", count: 1000))\r\nConnection: close\r\n\r\n")
            #expect(await small.read(within: .seconds(10)).text.hasPrefix("HTTP/1.1 200"))
            let large = try RawConnection(port: server.port)
            large.write("GET /health HTTP/1.1\r\nHost: x\r\nX-Fill: \(String(repeating: "a", count: 4000))\r\nConnection: close\r\n\r\n")
            let answer = await large.read(within: .seconds(10))
            #expect(answer.closed && !answer.text.hasPrefix("HTTP/1.1 200"), "\(answer.text.prefix(200))")
        }
    }

    @Test func aClientThatSendsItsRequestTooSlowlyIsCutOff() async throws {
        try await withServer(extraArguments: ["--idle-timeout", "2s"]) { server in
            // A head that never ends, one byte at a time (each byte within the limit), until
            // the server cuts it or a deadline far past the limit passes.
            let slow = try RawConnection(port: server.port)
            let deadline = ContinuousClock.now + .seconds(60)
            slow.write("GET /health HTTP/1.1\r\n")
            var closed = false
            for byte in String(repeating: "X-Slow: drip\r\n", count: 40) where ContinuousClock.now < deadline {
                slow.write(String(byte))
                if await slow.read(within: .milliseconds(500)).closed { closed = true; break }
            }
            #expect(closed, "the connection is closed though bytes kept coming")
            // Idle between requests: closed too; an answered request is not cut.
            let idle = try RawConnection(port: server.port)
            idle.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            let answered = await idle.read(within: .seconds(10))
            #expect(answered.text.hasPrefix("HTTP/1.1 200") && answered.closed, "\(answered)")
        }
    }

    @Test func aClientThatStopsReadingADownloadIsCutOff() async throws {
        try await withServer(extraArguments: ["--write-timeout", "4s"]) { server in
            try await server.addAccount("alice", password: "alice-pw")
            let alice = try await TestHTTP(baseURL: server.baseURL).login("alice", "alice-pw")
            let size = 64 << 20
            let digest = try await alice.uploadBlob(Data(count: size))
            let reader = try RawConnection(port: server.port, receiveBuffer: 4096)
            reader.write("GET \(APIPath.blob(digest)) HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(alice.token!)\r\n\r\n")
            // It reads nothing for longer than the limit, then all there is.
            try await Task.sleep(for: .seconds(8))
            let read = await reader.drain(within: .seconds(20))
            #expect(read != nil, "the server closed the connection")
            #expect((read ?? size) < size, "only what the buffers held before it stopped: \(read ?? -1) of \(size)")
            // A client that reads gets it all (curl, which reads as fast as it can: a test
            // process starved of CPU on a loaded machine could stall past the limit itself).
            let whole = try await run("/usr/bin/curl", [
                "-sS", "-o", "/dev/null", "-w", "%{size_download}", "-H", "Authorization: Bearer \(alice.token!)", server.baseURL + APIPath.blob(digest),
            ])
            #expect(whole.stdout == "\(size)", "\(whole)")
        }
    }

    @Test func connectionsPastTheLimitWaitForOneToClose() async throws {
        try await withServer(extraArguments: ["--max-connections", "2"]) { server in
            let held = try [RawConnection(port: server.port), RawConnection(port: server.port)]
            for c in held { c.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n") }
            for c in held { #expect(await c.read(within: .seconds(10)).text.hasPrefix("HTTP/1.1 200")) }
            let third = try RawConnection(port: server.port)
            third.write("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            #expect(await third.read(within: .seconds(2)).text.isEmpty, "not answered while two are open")
            held[0].close()
            #expect(await third.read(within: .seconds(10)).text.hasPrefix("HTTP/1.1 200"), "answered once one closed")
        }
    }

    @Test func anAccountPastItsRateGets429AndOthersGoOn() async throws {
        try await withLive(extraArguments: ["--account-rate", "5"]) { live in
            for n in 1...5 { #expect(try await live.alice.send(.GET, APIPath.whoami).status == 200, "request \(n)") }
            let refused = try await live.alice.send(.GET, APIPath.whoami)
            #expect(refused.status == 429 && refused.errorCode == .rateLimited, "\(refused.text)")
            #expect(Int(refused.headers.first(name: "Retry-After") ?? "").map { $0 >= 1 } == true)
            #expect(try await live.bob.send(.GET, APIPath.whoami).status == 200)
        }
    }
}
