import Foundation
import Glibc
import TestSupport

/// A TCP connection to the server, written and read by hand.
///
/// Reads wait on a thread of their own: a test's task runs on the few threads every test of
/// the process shares, and a read blocked there for seconds would stall all of them.
final class RawConnection: @unchecked Sendable {
    let fd: Int32

    init(port: Int, receiveBuffer: Int32? = nil) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestSupportError("socket: errno \(errno)") }
        if var size = receiveBuffer { setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size)) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw TestSupportError("connect: errno \(errno)") }
    }

    private var isOpen = true

    /// Once: a second close could close a descriptor the process has handed out again.
    func close() {
        guard isOpen else { return }
        isOpen = false
        Glibc.close(fd)
    }

    deinit { close() }

    func write(_ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// What arrives within `wait`, and whether the server closed the connection.
    func read(within wait: Duration) async -> (text: String, closed: Bool) {
        await onOwnThread { self.readHere(within: wait) }
    }

    /// Bytes read until the server closes the connection, or nil past `wait`.
    func drain(within wait: Duration) async -> Int? {
        await onOwnThread { self.drainHere(within: wait) }
    }

    private func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: body()) }
        }
    }

    private func readHere(within wait: Duration) -> (text: String, closed: Bool) {
        var collected: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65_536)
        let deadline = ContinuousClock.now + wait
        while ContinuousClock.now < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 100) > 0 else { continue }
            let n = recv(fd, &buffer, buffer.count, 0)
            if n <= 0 { return (String(decoding: collected, as: UTF8.self), true) }
            collected += buffer[0..<n]
        }
        return (String(decoding: collected, as: UTF8.self), false)
    }

    private func drainHere(within wait: Duration) -> Int? {
        var total = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        let deadline = ContinuousClock.now + wait
        while ContinuousClock.now < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 100) > 0 else { continue }
            let n = recv(fd, &buffer, buffer.count, 0)
            if n <= 0 { return total }
            total += n
        }
        return nil
    }
}
