import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A TCP relay on loopback to a local port that passes what the client sends at no more than
/// `bytesPerSecond`, and the answers at no more than `answerBytesPerSecond`: a slow link in
/// front of a real server, for uploads and downloads that take a while. `cut()` takes the link down (every
/// relayed connection ends, new ones are refused) until `rejoin()`: one device offline while
/// the server and the others go on.
///
/// Plain blocking sockets on threads of its own, never the cooperative pool: the pacing sleeps.
public final class ThrottledRelay: @unchecked Sendable {
    public let port: Int
    public var baseURL: String { "http://127.0.0.1:\(port)" }
    let listener: Int32
    let targetPort: Int
    let bytesPerSecond: Int?
    let answerBytesPerSecond: Int?
    let open = NSLock()
    var sockets: Set<Int32> = []
    var closed = false
    var isCut = false

    /// A rate nil: no pacing that way.
    public init(to targetPort: Int, bytesPerSecond: Int? = nil, answerBytesPerSecond: Int? = nil) throws {
        self.targetPort = targetPort
        self.bytesPerSecond = bytesPerSecond
        self.answerBytesPerSecond = answerBytesPerSecond
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { throw TestSupportError("relay: socket failed: errno \(errno)") }
        var address = Self.loopback(port: 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(listener, 16) == 0 else {
            Glibc.close(listener)
            throw TestSupportError("relay: cannot listen: errno \(errno)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        self.listener = listener
        port = Int(UInt16(bigEndian: address.sin_port))
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    /// Stops listening and cuts every relayed connection.
    public func close() {
        let all = open.withLock { () -> Set<Int32> in
            closed = true
            return sockets
        }
        shutdown(listener, Int32(SHUT_RDWR))
        for fd in all { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    /// Ends every relayed connection and refuses new ones until `rejoin()`.
    public func cut() {
        let all = open.withLock { () -> Set<Int32> in
            isCut = true
            return sockets
        }
        for fd in all { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    public func rejoin() {
        open.withLock { isCut = false }
    }

    static func loopback(port: Int) -> sockaddr_in {
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_port = UInt16(port).bigEndian
        a.sin_addr.s_addr = inet_addr("127.0.0.1")
        return a
    }

    func acceptLoop() {
        defer { Glibc.close(listener) }
        while true {
            let client = accept(listener, nil, nil)
            guard client >= 0 else { return }
            let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = Self.loopback(port: targetPort)
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            let admitted = open.withLock { () -> Bool in
                guard !closed, !isCut, connected == 0 else { return false }
                sockets.formUnion([client, server])
                return true
            }
            guard admitted else {
                Glibc.close(client)
                Glibc.close(server)
                continue
            }
            let finished = Finished(count: 2) { [self] in
                open.withLock { sockets.subtract([client, server]) }
                Glibc.close(client)
                Glibc.close(server)
            }
            Thread.detachNewThread { [self] in pass(from: client, to: server, rate: bytesPerSecond); finished.one() }
            Thread.detachNewThread { [self] in pass(from: server, to: client, rate: answerBytesPerSecond); finished.one() }
        }
    }

    /// Copies until the end of `source`, then ends the other side's writing half.
    func pass(from source: Int32, to destination: Int32, rate: Int?) {
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        var start = Date()
        var sent = 0
        while true {
            let n = buffer.withUnsafeMutableBytes { read(source, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { break }
            if let bytesPerSecond = rate {
                // Wait until the bytes so far are within the rate, then send.
                var due = Double(sent + n) / Double(bytesPerSecond) - Date().timeIntervalSince(start)
                // Time the connection sat idle is no credit for a burst after it (at most 50 ms
                // of it): a kept-alive connection idle for seconds let a whole batch through at
                // once, and the test that needs it slow saw it take 0.75 s, not 2.6.
                if due < -0.05 {
                    start += -due - 0.05
                    due = -0.05
                }
                if due > 0 { usleep(useconds_t(due * 1_000_000)) }
            }
            var offset = 0
            while offset < n {
                let w = buffer.withUnsafeBytes { write(destination, $0.baseAddress! + offset, n - offset) }
                if w < 0 && errno == EINTR { continue }
                guard w > 0 else { return }
                offset += w
            }
            sent += n
        }
        shutdown(destination, Int32(SHUT_WR))
    }

    /// Runs `last` when both directions of a connection are done.
    final class Finished: @unchecked Sendable {
        let lock = NSLock()
        var left: Int
        let last: () -> Void
        init(count: Int, last: @escaping () -> Void) {
            left = count
            self.last = last
        }
        func one() {
            let done = lock.withLock { () -> Bool in
                left -= 1
                return left == 0
            }
            if done { last() }
        }
    }
}
