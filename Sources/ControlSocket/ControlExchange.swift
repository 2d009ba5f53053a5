#if canImport(Glibc)
import Glibc
#endif

/// One HTTP/1.1 request and its whole answer over a mount daemon's Unix socket, with blocking
/// calls. Glibc only: `ubiq` answers a query with it and links no Foundation (see `QuickQuery`),
/// and the full command (`SyncClient`'s `SocketExchange`) runs it on a thread of its own.
public enum ControlExchange {
    public struct Answer: Equatable, Sendable {
        public var status: Int
        public var headers: [String: String]
        public var body: [UInt8]
        public init(status: Int, headers: [String: String] = [:], body: [UInt8]) {
            (self.status, self.headers, self.body) = (status, headers, body)
        }
    }

    public enum Failure: Error, CustomStringConvertible {
        case socket(String)
        case malformed(String)

        public var description: String {
            switch self {
            case .socket(let why): why
            case .malformed(let why): "a malformed answer: \(why)"
            }
        }
    }

    /// The longest path a Unix socket address holds (`sun_path` less its NUL).
    public static let longestPath = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1

    /// `timeoutSeconds` bounds each wait for the socket (connect, every read and write), not
    /// the whole.
    public static func exchange(socketPath: String, method: String, target: String, body: [UInt8]?, timeoutSeconds: Int) throws -> Answer {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure.socket("socket: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var wait = timeval(tv_sec: max(1, timeoutSeconds), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
        try connect(fd, to: socketPath)

        var request = Array("\(method) \(target) HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: \(body?.count ?? 0)\r\n\r\n".utf8)
        if let body { request += body }
        try send(request, on: fd)

        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            if let answer = try parse(received, ended: false) { return answer }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { throw Failure.socket(errno == EAGAIN ? "no answer within \(timeoutSeconds) s" : "recv: \(String(cString: strerror(errno)))") }
            if n == 0 {
                guard let answer = try parse(received, ended: true) else { throw Failure.malformed("the connection ended early") }
                return answer
            }
            received += buffer[..<n]
        }
    }

    /// The socket address of `path`, NUL-terminated in `sun_path`.
    public static func address(of path: String) throws(Failure) -> sockaddr_un {
        let bytes = Array(path.utf8)
        guard bytes.count <= longestPath else {
            throw .socket("the socket's path is longer than \(longestPath) bytes: \(path)")
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: bytes)
            raw[bytes.count] = 0
        }
        return address
    }

    static func connect(_ fd: Int32, to path: String) throws(Failure) {
        var address = try address(of: path)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else { throw .socket("connect to \(path): \(String(cString: strerror(errno)))") }
    }

    static func send(_ bytes: [UInt8], on fd: Int32) throws(Failure) {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { raw in Glibc.send(fd, raw.baseAddress! + sent, raw.count - sent, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw .socket("send: \(String(cString: strerror(errno)))") }
            sent += n
        }
    }

    /// The status and headers (names lowercased) of an answer's head, without its blank line.
    static func head(_ bytes: ArraySlice<UInt8>) throws(Failure) -> (status: Int, headers: [String: String]) {
        let head = String(decoding: bytes, as: UTF8.self).split(separator: "\r\n", omittingEmptySubsequences: false)
        let statusLine = head.first?.split(separator: " ") ?? []
        guard statusLine.count >= 2, statusLine[0].hasPrefix("HTTP/1."), let status = Int(statusLine[1]) else {
            throw .malformed("status line \(head.first.map(String.init) ?? "")")
        }
        var headers: [String: String] = [:]
        for line in head.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { throw .malformed("header \(line)") }
            headers[line[..<colon].lowercased()] = trimmed(line[line.index(after: colon)...])
        }
        return (status, headers)
    }

    /// The answer in `data` once it is whole (by its `Content-Length`, its last chunk, or the
    /// end of the connection); nil while more is to come. Header names are lowercased.
    public static func parse(_ data: [UInt8], ended: Bool) throws(Failure) -> Answer? {
        guard let headEnd = find([13, 10, 13, 10], in: data, from: 0) else {
            if ended { throw Failure.malformed("no header") }
            return nil
        }
        let (status, headers) = try head(data[..<headEnd])
        let rest = data[(headEnd + 4)...]
        if headers["transfer-encoding"]?.lowercased() == "chunked" {
            // Decoded once its last chunk may be in (or the connection ended), not after every
            // read: a long answer would be parsed again from its start each time.
            guard ended || rest.suffix(5).elementsEqual("0\r\n\r\n".utf8) else { return nil }
            return try dechunk(rest).map { Answer(status: status, headers: headers, body: $0) }
        }
        if let length = headers["content-length"] {
            guard let length = Int(length), length >= 0 else { throw Failure.malformed("Content-Length \(length)") }
            if rest.count >= length { return Answer(status: status, headers: headers, body: Array(rest.prefix(length))) }
            if ended { throw Failure.malformed("the connection ended \(length - rest.count) bytes early") }
            return nil
        }
        return ended ? Answer(status: status, headers: headers, body: Array(rest)) : nil
    }

    /// A chunked body once its last chunk is in; nil before.
    static func dechunk(_ data: ArraySlice<UInt8>) throws(Failure) -> [UInt8]? {
        var body: [UInt8] = []
        var cursor = data.startIndex
        while true {
            guard let lineEnd = find([13, 10], in: data, from: cursor) else { return nil }
            let size = try chunkSize(data[cursor..<lineEnd])
            let start = lineEnd + 2
            if size == 0 { return body }
            guard data.endIndex - start >= size + 2 else { return nil }
            body += data[start..<(start + size)]
            cursor = start + size + 2
        }
    }

    /// The size a chunk's head line gives (hexadecimal, extensions after `;` ignored).
    static func chunkSize(_ line: ArraySlice<UInt8>) throws(Failure) -> Int {
        let sizeText = String(decoding: line, as: UTF8.self).split(separator: ";").first ?? ""
        guard let size = Int(trimmed(sizeText), radix: 16), size >= 0 else { throw .malformed("chunk size \(sizeText)") }
        return size
    }

    /// Where `needle` first starts in `data` at or after `from`.
    static func find<C: RandomAccessCollection>(_ needle: [UInt8], in data: C, from: C.Index) -> C.Index? where C.Element == UInt8, C.Index == Int {
        guard data.endIndex - from >= needle.count else { return nil }
        var i = from
        while i <= data.endIndex - needle.count {
            if data[i] == needle[0] && data[i..<(i + needle.count)].elementsEqual(needle) { return i }
            i += 1
        }
        return nil
    }

    static func trimmed(_ text: Substring) -> String {
        String(text.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
    }
}
