#if canImport(Glibc)
import Glibc
#endif

/// One connection to a mount daemon's Unix socket for an answer that goes on (a live query's
/// updates, the key-value store's changes): the body's lines are handed over as they come.
/// Blocking: `lines` runs on a thread of its own, and another thread ends it with `shutdown()`.
/// The socket is closed when the last holder lets go of the connection, never before: so a
/// `shutdown()` never meets a descriptor number that another file took since.
public final class ControlConnection: Sendable {
    let fd: Int32

    public init(socketPath: String) throws(ControlExchange.Failure) {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .socket("socket: \(String(cString: strerror(errno)))") }
        do { try ControlExchange.connect(fd, to: socketPath) } catch {
            Glibc.close(fd)
            throw error
        }
        self.fd = fd
    }

    deinit { Glibc.close(fd) }

    /// Sends `GET target` and hands `line` each line of a 200 answer's body (without its
    /// newline) until the daemon ends the answer or `shutdown()` is called. Throws for another
    /// status, with the daemon's words, and for a failed socket.
    public func lines(_ target: String, _ line: (String) -> Void) throws(ControlExchange.Failure) {
        try ControlExchange.send(Array("GET \(target) HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".utf8), on: fd)
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        func read() throws(ControlExchange.Failure) -> Bool {
            while true {
                let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                if n < 0 && errno == EINTR { continue }
                if n < 0 { throw .socket("recv: \(String(cString: strerror(errno)))") }
                received += buffer[..<n]
                return n > 0
            }
        }
        var headEnd: Int?
        while headEnd == nil {
            headEnd = ControlExchange.find([13, 10, 13, 10], in: received, from: 0)
            if headEnd == nil, try !read() { throw .malformed("the connection ended before the answer's head") }
        }
        let head = try ControlExchange.head(received[..<headEnd!])
        guard head.status == 200 else {
            while try read() {}
            let answer = try ControlExchange.parse(received, ended: true)
            throw .socket("the daemon answered \(head.status): \(String(decoding: answer?.body ?? [], as: UTF8.self))")
        }
        var body = LineSplitter(chunked: head.headers["transfer-encoding"]?.lowercased() == "chunked")
        var rest = Array(received[(headEnd! + 4)...])
        while true {
            if try body.take(&rest, line) { return }
            received = []
            guard try read() else { return }
            rest += received
        }
    }

    /// Ends a `lines` in progress on another thread: it returns once the daemon's side is cut.
    public func shutdown() {
        _ = Glibc.shutdown(fd, Int32(SHUT_RDWR))
    }
}

/// A body's bytes, chunked or not, cut into lines as they arrive.
struct LineSplitter {
    let chunked: Bool
    /// Bytes of the current chunk still to come (chunked only).
    var chunkLeft = 0
    var pending: [UInt8] = []

    /// Takes what it can of `data` (leaving an incomplete chunk head there) and hands over
    /// every whole line; true once the last chunk came.
    mutating func take(_ data: inout [UInt8], _ line: (String) -> Void) throws(ControlExchange.Failure) -> Bool {
        var ended = false
        if chunked {
            var cursor = 0
            while cursor < data.count {
                if chunkLeft > 0 {
                    let n = min(chunkLeft, data.count - cursor)
                    pending += data[cursor..<(cursor + n)]
                    (cursor, chunkLeft) = (cursor + n, chunkLeft - n)
                    continue
                }
                // Between chunks: the CRLF that ends the last one, then the next size line.
                guard let lineEnd = ControlExchange.find([13, 10], in: data, from: cursor) else { break }
                let head = data[cursor..<lineEnd]
                cursor = lineEnd + 2
                if head.isEmpty { continue }
                let size = try ControlExchange.chunkSize(head)
                if size == 0 {
                    ended = true
                    break
                }
                chunkLeft = size
            }
            data.removeFirst(cursor)
        } else {
            pending += data
            data = []
        }
        while let nl = pending.firstIndex(of: UInt8(ascii: "\n")) {
            line(String(decoding: pending[..<nl], as: UTF8.self))
            pending.removeSubrange(...nl)
        }
        return ended
    }
}
