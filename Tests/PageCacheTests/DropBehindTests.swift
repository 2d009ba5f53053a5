import Foundation
import Glibc
import PageCache
import Testing

@Suite struct DropBehindTests {
    static let mib: Int64 = 1 << 20

    @Test func aBoundaryIsCrossedByTheReadThatReachesIt() {
        let m = Self.mib
        #expect(DropBehind.crossedBoundary(0..<(128 << 10)) == nil)
        #expect(DropBehind.crossedBoundary((2 * m - (128 << 10))..<(2 * m)) == 2 * m)
        #expect(DropBehind.crossedBoundary((2 * m)..<(2 * m + 4096)) == nil)
        #expect(DropBehind.crossedBoundary((3 * m)..<(5 * m)) == 4 * m)
        #expect(DropBehind.crossedBoundary((3 * m)..<(3 * m)) == nil)
    }

    /// A real file on the test machine's disk, read in 128 KiB steps as the kernel's readahead
    /// asks for it: what is left in the page cache is the head block and the last block (each
    /// block is dropped when the read reaches the end of the block after it).
    @Test func aSequentialReadLeavesTheHeadAndTheLastBlocks() async throws {
        // On a thread of its own: the fsync below can take seconds while a full test run
        // writes to the same disk, and a test that holds one of the cooperative pool's two
        // threads that long starves every other suite's tasks (a 5 s deadline elsewhere
        // failed that way).
        let resident = try await onOwnThread { try Self.writeThenReadSequentially(from: 0) }
        #expect(resident == [true, false, false, false, false, true])
    }

    /// A pass that starts in the middle (a ranged request) drops nothing before its start.
    @Test func aPassDropsNothingBeforeItsStart() async throws {
        let resident = try await onOwnThread { try Self.writeThenReadSequentially(from: 6 * Self.mib) }
        #expect(resident == [true, true, true, false, false, true])
    }

    /// Writes a 12 MiB file, makes it clean, reads it from `start` to the end as the kernel's
    /// readahead would while dropping behind, and returns which blocks are left in the page
    /// cache.
    static func writeThenReadSequentially(from start: Int64) throws -> [Bool] {
        // Next to the build, on the disk: on a tmpfs (some systems' /tmp) nothing is ever
        // dropped and this would fail for the wrong reason.
        let folder = FileManager.default.fileExists(atPath: ".build") ? ".build" : NSTemporaryDirectory()
        // One file per call: the tests of this suite run at the same time.
        let path = "\(folder)/ubiq-dropbehind-\(getpid())-\(UUID().uuidString)"
        let fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        try #require(fd >= 0)
        defer { close(fd); unlink(path) }
        let size = 12 * Self.mib
        let chunk = [UInt8](repeating: 7, count: 128 << 10)
        var offset: Int64 = 0
        while offset < size {
            let n = chunk.withUnsafeBytes { pwrite(fd, $0.baseAddress!, $0.count, off_t(offset)) }
            try #require(n == chunk.count)
            offset += Int64(n)
        }
        // Clean everything, so that only the drops below decide what stays.
        try #require(fsync(fd) == 0)
        var buffer = [UInt8](repeating: 0, count: chunk.count)
        offset = start
        while offset < size {
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress!, $0.count, off_t(offset)) }
            try #require(n == buffer.count)
            DropBehind.afterRead(fd: fd, range: offset..<(offset + Int64(n)), passStart: start)
            offset += Int64(n)
        }
        return try residentBlocks(fd: fd, size: size)
    }

    /// For each 2 MiB block of the file, whether all its pages are in the page cache (mincore).
    static func residentBlocks(fd: Int32, size: Int64) throws -> [Bool] {
        let map = mmap(nil, Int(size), PROT_READ, MAP_SHARED, fd, 0)
        try #require(map != MAP_FAILED)
        defer { munmap(map, Int(size)) }
        let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))
        var pages = [UInt8](repeating: 0, count: Int(size) / pageSize)
        try #require(mincore(map, Int(size), &pages) == 0)
        let perBlock = Int(DropBehind.block) / pageSize
        return stride(from: 0, to: pages.count, by: perBlock).map { start in
            pages[start..<(start + perBlock)].allSatisfy { $0 & 1 == 1 }
        }
    }
}

/// Runs `body` on a new thread and returns its result.
func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}
