import CacheFiles
import Foundation

/// Writes a download's bytes into its cache file as the transport delivers them (on its
/// thread), and reports each range that landed.
///
/// `cancel` waits for a write in progress and stops every later one. That matters because the
/// next download of a placeholder or partial file truncates the same cache file in place (open
/// readers keep their descriptor): a late write of the old version must never land in the new one.
///
/// Unchecked Sendable: every stored var is read and written under `lock`.
final class CacheFileSink: @unchecked Sendable {
    var fd: Int32
    let lock = NSLock()
    var offset: Int64
    var cancelled = false
    let landed: @Sendable (Range<Int64>) -> Void

    init(fd: Int32, at offset: Int64, landed: @escaping @Sendable (Range<Int64>) -> Void) {
        self.fd = fd
        self.offset = offset
        self.landed = landed
    }

    /// A sink whose file is still being made: it holds its lock, so the transport's first
    /// `receive` waits (on the transport's thread, for the microseconds the file takes) until
    /// `attach` or `attachFailed`, which the creating thread must call.
    init(at offset: Int64, landed: @escaping @Sendable (Range<Int64>) -> Void) {
        self.fd = -1
        self.offset = offset
        self.landed = landed
        lock.lock()
    }

    func attach(_ fd: Int32) {
        self.fd = fd
        lock.unlock()
    }

    func attachFailed() {
        cancelled = true
        lock.unlock()
    }

    /// Called in order, one part after another, by the transport.
    @Sendable func receive(_ bytes: UnsafeRawBufferPointer) throws {
        lock.lock()
        defer { lock.unlock() }
        guard !cancelled else { throw ContentError.cancelled }
        try Self.write(bytes, fd: fd, at: offset)
        let range = offset..<(offset + Int64(bytes.count))
        offset = range.upperBound
        landed(range)
    }

    func cancel() {
        lock.lock()
        cancelled = true
        lock.unlock()
    }

    /// The offset after the last byte written.
    func finish() -> Int64 {
        lock.lock()
        defer { lock.unlock() }
        return offset
    }

    static func write(_ bytes: UnsafeRawBufferPointer, fd: Int32, at offset: Int64) throws {
        var done = 0
        while done < bytes.count {
            let n = pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(offset + Int64(done)))
            if n < 0 {
                if errno == EINTR { continue }
                throw ContentError.io("cannot write the cache file", errno)
            }
            done += n
        }
    }
}
