import ControlSocket
import Foundation
import Synchronization
import Testing
@testable import SyncClient
#if canImport(Glibc)
import Glibc
#endif

@Suite struct SocketExchangeTests {
    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test func anAnswerIsWholeByItsLengthItsLastChunkOrTheEnd() throws {
        let sized = Self.bytes("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        #expect(try ControlExchange.parse(sized, ended: false)?.body == Self.bytes("hello"))
        #expect(try ControlExchange.parse(sized.dropLast(2), ended: false) == nil)

        let chunked = Self.bytes("HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\nA;x=y\r\n0123456789\r\n0\r\n\r\n")
        let answer = try #require(try ControlExchange.parse(chunked, ended: false))
        #expect(answer.status == 404)
        #expect(answer.body == Self.bytes("abc0123456789"))
        for cut in 1..<chunked.count {
            #expect(try ControlExchange.parse(Array(chunked.prefix(cut)), ended: false) == nil, "cut at \(cut)")
        }
        // A chunk whose bytes end as the last chunk does, cut there: not yet whole.
        let lookalike = Self.bytes("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n0\r\n\r\n")
        #expect(try ControlExchange.parse(lookalike, ended: false) == nil)
        #expect(try ControlExchange.parse(lookalike + Self.bytes("\r\n0\r\n\r\n"), ended: false)?.body == Self.bytes("0\r\n\r\n"))

        let unsized = Self.bytes("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{}")
        #expect(try ControlExchange.parse(unsized, ended: false) == nil)
        #expect(try ControlExchange.parse(unsized, ended: true)?.body == Self.bytes("{}"))
    }

    @Test func aMalformedOrCutAnswerIsAnError() {
        for text in ["HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort", "nonsense\r\n\r\n", "HTTP/1.1 abc OK\r\n\r\n",
                     "HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "HTTP/1.1 200 OK\r\n"] {
            #expect(throws: ControlExchange.Failure.self, "\(text.debugDescription)") { try ControlExchange.parse(Self.bytes(text), ended: true) }
        }
    }

    @Test func noDaemonIsAnErrorNamingTheSocket() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("absent-\(UUID().uuidString).sock").path
        await #expect(throws: ControlExchange.Failure.self) {
            try await SocketExchange.run(socketPath: path, method: "GET", target: "/status", body: nil, timeout: .seconds(2))
        }
    }

    /// A listener that takes one connection, reads the request's head and answers with
    /// `answer`, a few bytes at a time.
    @Test func aRealSocketAnsweredInPieces() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("x-\(UUID().uuidString.prefix(8)).sock").path
        defer { unlink(path) }
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        try #require(listener >= 0)
        defer { close(listener) }
        var address = try ControlExchange.address(of: path)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        try #require(bound == 0 && listen(listener, 1) == 0)
        let answer = Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n{\"a\":1\r\n1\r\n}\r\n0\r\n\r\n".utf8)
        let request = Mutex<String>("")
        let server = Thread {
            let fd = accept(listener, nil, nil)
            guard fd >= 0 else { return }
            var head = [UInt8]()
            var byte: UInt8 = 0
            while read(fd, &byte, 1) == 1 {
                head.append(byte)
                if head.suffix(4) == Array("\r\n\r\n".utf8) { break }
            }
            var body = [UInt8](repeating: 0, count: 4)
            _ = read(fd, &body, 4)
            request.withLock { $0 = String(decoding: head + body, as: UTF8.self) }
            for piece in stride(from: 0, to: answer.count, by: 7) {
                _ = answer[piece..<min(piece + 7, answer.count)].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
                usleep(1000)
            }
            close(fd)
        }
        server.start()
        let got = try await SocketExchange.run(socketPath: path, method: "POST", target: "/a?b=%2B", body: Data("body".utf8), timeout: .seconds(10))
        #expect(got.status == 200)
        #expect(got.body == Array("{\"a\":1}".utf8))
        let sent = request.withLock { $0 }
        #expect(sent.hasPrefix("POST /a?b=%2B HTTP/1.1\r\n"))
        #expect(sent.contains("Content-Length: 4\r\n"))
        #expect(sent.hasSuffix("\r\n\r\nbody"))
    }
}
