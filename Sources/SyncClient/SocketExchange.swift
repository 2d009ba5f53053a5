import Foundation
import SyncAPI
#if canImport(Glibc)
import Glibc
#endif

/// One HTTP/1.1 request and its whole answer over a Unix socket, with blocking calls on a
/// thread of its own.
///
/// A command (`ubiq query`, `ubiq status`) asks its daemon one thing and exits. An HTTP
/// client's event loops, connection pool and the generic types they instantiate cost about
/// 10 ms of a command's start, more than most answers take; this costs a socket and a thread.
/// Streams (`ControlClient.lines`) stay on the HTTP client: they live long enough not to care.
enum SocketExchange {
    struct Answer: Equatable {
        var status: Int
        var body: Data
    }

    enum Failure: Error, CustomStringConvertible {
        case socket(String)
        case malformed(String)

        var description: String {
            switch self {
            case .socket(let why): why
            case .malformed(let why): "a malformed answer: \(why)"
            }
        }
    }

    /// Runs `exchange` on a new thread: its calls block, and the tasks of a process (the
    /// daemon's own routes, in a test that runs one) must keep their threads.
    static func run(socketPath: String, method: String, target: String, body: Data?, timeout: Duration) async throws -> Answer {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                continuation.resume(with: Result { try exchange(socketPath: socketPath, method: method, target: target, body: body, timeout: timeout) })
            }
            thread.start()
        }
    }

    /// `timeout` bounds each wait for the socket (connect, every read and write), not the whole.
    static func exchange(socketPath: String, method: String, target: String, body: Data?, timeout: Duration) throws -> Answer {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure.socket("socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var wait = timeval(tv_sec: Int(max(1, timeout.components.seconds)), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
        try connect(fd, to: socketPath)

        var request = Data("\(method) \(target) HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: \(body?.count ?? 0)\r\n\r\n".utf8)
        if let body { request.append(body) }
        try request.withUnsafeBytes { raw in
            var sent = 0
            while sent < raw.count {
                let n = send(fd, raw.baseAddress! + sent, raw.count - sent, Int32(MSG_NOSIGNAL))
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { throw Failure.socket("send: \(String(cString: strerror(errno)))") }
                sent += n
            }
        }

        var received = Data()
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            if let answer = try parse(received, ended: false) { return answer }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw Failure.socket(errno == EAGAIN ? "no answer within \(timeout)" : "recv: \(String(cString: strerror(errno)))") }
            if n == 0 {
                guard let answer = try parse(received, ended: true) else { throw Failure.malformed("the connection ended early") }
                return answer
            }
            received.append(contentsOf: buffer[..<n])
        }
    }

    /// The socket address of `path`, NUL-terminated in `sun_path`.
    static func address(of path: String) throws -> sockaddr_un {
        let bytes = Array(path.utf8)
        guard bytes.count <= UnixSocketAddress.longestPath else {
            throw Failure.socket("the socket's path is longer than \(UnixSocketAddress.longestPath) bytes: \(path)")
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return address
    }

    private static func connect(_ fd: Int32, to path: String) throws {
        var address = try address(of: path)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else { throw Failure.socket("connect to \(path): \(String(cString: strerror(errno)))") }
    }

    /// The answer in `data` once it is whole (by its `Content-Length`, its last chunk, or the
    /// end of the connection); nil while more is to come.
    static func parse(_ data: Data, ended: Bool) throws -> Answer? {
        guard let headEnd = data.firstRange(of: Data("\r\n\r\n".utf8)) else {
            if ended { throw Failure.malformed("no header") }
            return nil
        }
        let head = String(decoding: data[..<headEnd.lowerBound], as: UTF8.self).split(separator: "\r\n", omittingEmptySubsequences: false)
        let statusLine = head.first?.split(separator: " ") ?? []
        guard statusLine.count >= 2, statusLine[0].hasPrefix("HTTP/1."), let status = Int(statusLine[1]) else {
            throw Failure.malformed("status line \(head.first.map(String.init) ?? "")")
        }
        var headers: [String: String] = [:]
        for line in head.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { throw Failure.malformed("header \(line)") }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        let rest = data[headEnd.upperBound...]
        if headers["transfer-encoding"]?.lowercased() == "chunked" {
            // Decoded once its last chunk may be in (or the connection ended), not after every
            // read: a long answer would be parsed again from its start each time.
            guard ended || rest.suffix(5).elementsEqual("0\r\n\r\n".utf8) else { return nil }
            return try dechunk(rest).map { Answer(status: status, body: $0) }
        }
        if let length = headers["content-length"] {
            guard let length = Int(length), length >= 0 else { throw Failure.malformed("Content-Length \(length)") }
            if rest.count >= length { return Answer(status: status, body: Data(rest.prefix(length))) }
            if ended { throw Failure.malformed("the connection ended \(length - rest.count) bytes early") }
            return nil
        }
        return ended ? Answer(status: status, body: Data(rest)) : nil
    }

    /// A chunked body once its last chunk is in; nil before.
    static func dechunk(_ data: Data) throws -> Data? {
        var body = Data()
        var cursor = data.startIndex
        let crlf = Data("\r\n".utf8)
        while true {
            guard let lineEnd = data[cursor...].firstRange(of: crlf) else { return nil }
            let sizeText = String(decoding: data[cursor..<lineEnd.lowerBound], as: UTF8.self).split(separator: ";").first ?? ""
            guard let size = Int(sizeText.trimmingCharacters(in: .whitespaces), radix: 16), size >= 0 else {
                throw Failure.malformed("chunk size \(sizeText)")
            }
            let start = lineEnd.upperBound
            if size == 0 { return body }
            guard data.distance(from: start, to: data.endIndex) >= size + 2 else { return nil }
            let end = data.index(start, offsetBy: size)
            body.append(data[start..<end])
            cursor = data.index(end, offsetBy: 2)
        }
    }
}
