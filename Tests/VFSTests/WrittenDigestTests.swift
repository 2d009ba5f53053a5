import CacheFiles
import Foundation
import ItemModel
import Testing
import TestSupport
import VFS

/// The running hash of a file written from its start (`WrittenDigests`), alone and through the
/// file system's writes, truncates and uploads.
@Suite("Running hashes of written files")
struct WrittenDigestTests {
    /// A file of its own, and the digests; writes land in the file and are reported, as the
    /// file system's write does.
    struct Writer {
        let directory: TempDirectory
        let fd: Int32
        let digests = WrittenDigests()
        static let ino: Int64 = 7

        init() throws {
            directory = try TempDirectory("written-digest")
            fd = open(directory.path + "/file", O_RDWR | O_CREAT, 0o600)
            guard fd >= 0 else { throw TestSupportError("cannot create the file") }
        }

        func write(_ bytes: [UInt8], at offset: Int64) {
            let n = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(offset)) }
            precondition(n == bytes.count)
            digests.wrote(Self.ino, at: offset, bytes: bytes, fd: fd)
        }

        var identity: FileIdentity { FileIdentity(of: fd)! }
        var size: Int64 { Int64(lseek(fd, 0, SEEK_END)) }

        func digest() async -> ContentDigest? { await digests.digest(of: Self.ino, file: identity, size: size) }

        func close() {
            Glibc.close(fd)
            directory.remove()
        }
    }

    @Test("writes from offset 0 in one run, of any sizes, give the file's SHA-256, also asked for midway")
    func contiguousWritesGiveTheDigest() async throws {
        let w = try Writer()
        defer { w.close() }
        let content = pattern(5 * (1 << 20) + 12_345, seed: 5)
        var offset = 0
        var sizes = [1, 4096, 131_072, 3 << 20, 77]
        var asked = false
        while offset < content.count {
            let count = min(sizes.isEmpty ? 131_072 : sizes.removeFirst(), content.count - offset)
            w.write(Array(content[offset..<(offset + count)]), at: Int64(offset))
            offset += count
            if !asked && offset > 2 << 20 {
                asked = true
                #expect(await w.digest() == sha(Array(content[..<offset])), "the digest of what is written so far")
            }
        }
        #expect(await w.digest() == sha(content))
        // A write at 0 starts afresh: the file is rewritten from its start.
        let shorter = pattern(2 << 20, seed: 9)
        w.write(shorter, at: 0)
        _ = ftruncate(w.fd, off_t(shorter.count))
        #expect(await w.digest() == sha(shorter))
    }

    @Test("a write anywhere but the end, a forget, another file or another size leave no digest")
    func anyOtherChangeLeavesNone() async throws {
        let w = try Writer()
        defer { w.close() }
        let content = pattern(2 << 20, seed: 6)
        w.write(content, at: 0)
        #expect(await w.digest() == sha(content))
        // An overwrite inside what was hashed.
        w.write([1, 2, 3], at: 100)
        #expect(await w.digest() == nil)
        // It stays gone: a later append does not bring it back.
        w.write([4], at: w.size - 1)
        w.write([5], at: w.size)
        #expect(await w.digest() == nil)

        w.write(content, at: 0)
        _ = ftruncate(w.fd, off_t(content.count))
        #expect(await w.digest() == sha(content))
        // A gap past the end.
        w.write([1], at: w.size + 10)
        #expect(await w.digest() == nil)

        w.write(content, at: 0)
        _ = ftruncate(w.fd, off_t(content.count))
        #expect(await w.digest() == sha(content))
        #expect(await w.digests.digest(of: Writer.ino, file: w.identity, size: w.size + 1) == nil, "another size")
        let other = try Writer()
        defer { other.close() }
        #expect(await w.digests.digest(of: Writer.ino, file: other.identity, size: w.size) == nil, "another file")
        w.digests.forget(Writer.ino)
        #expect(await w.digest() == nil)
    }

    @Test("the last writer's close keeps the running hash of a large file only")
    func closeKeepsLargeFilesOnly() async throws {
        let w = try Writer()
        defer { w.close() }
        w.write(pattern(4096), at: 0)
        #expect(w.digests.count == 1)
        w.digests.writersClosed(Writer.ino)
        #expect(w.digests.count == 0)
        let large = pattern(Int(WrittenDigests.minimumSize), seed: 2)
        w.write(large, at: 0)
        w.digests.writersClosed(Writer.ino)
        #expect(await w.digest() == sha(large))
    }

    @Test("a large file written in one run goes up with the hash made behind its writer, which the upload then forgets")
    func aLargeUploadUsesTheRunningHash() async throws {
        let h = try await Harness()
        defer { h.close() }
        let content = pattern(3 << 20, seed: 4)
        let opened = try h.fs.createFile(parent: rootIno, name: n("big.bin"), mode: 0o644, flags: O_CREAT | O_WRONLY, uid: getuid(), gid: getgid())
        for start in stride(from: 0, to: content.count, by: 131_072) {
            _ = try h.fs.write(opened.handle, offset: Int64(start), data: Array(content[start..<min(start + 131_072, content.count)]))
        }
        h.fs.release(opened.handle)
        let cache = h.engine.cache
        #expect(cache.digests.count == 1, "the closed file's running hash is kept for its upload")
        let ino = opened.attributes.ino
        let file = try #require(cache.identity(ino))
        #expect(await cache.digests.digest(of: ino, file: file.file, size: file.size) == sha(content))
        try await h.running([.outbox]) {
            try await eventually("the outbox to drain") { try h.outbox().isEmpty }
        }
        #expect(try await h.remote.item(atPath: "/big.bin")?.digest == sha(content))
        #expect(try await h.remote.content(atPath: "/big.bin").map(sha) == sha(content))
        #expect(cache.digests.count == 0, "forgotten once the upload is recorded")
    }

    @Test("a file cut by its writer, then written at its old end, goes up as it is, not as it was hashed")
    func aTruncateForgetsTheRunningHash() async throws {
        let h = try await Harness()
        defer { h.close() }
        let first = pattern(2 << 20, seed: 7)
        let opened = try h.fs.createFile(parent: rootIno, name: n("cut.bin"), mode: 0o644, flags: O_CREAT | O_RDWR, uid: getuid(), gid: getgid())
        let ino = opened.attributes.ino
        _ = try h.fs.write(opened.handle, offset: 0, data: first)
        // ftruncate(fd, 1 MiB), then a write where the hashed bytes ended: it follows them,
        // but the megabyte before it is zeros now.
        let half = 1 << 20
        _ = try await h.fs.setAttributes(ino, FileSystem.AttributeChanges(size: Int64(half)), handle: opened.handle)
        let second = pattern(half, seed: 8)
        _ = try h.fs.write(opened.handle, offset: Int64(first.count), data: second)
        h.fs.release(opened.handle)
        #expect(h.engine.cache.digests.count == 0, "the cut forgot the running hash")
        let expected = Array(first[..<half]) + [UInt8](repeating: 0, count: half) + second
        try await h.running([.outbox]) {
            try await eventually("the outbox to drain") { try h.outbox().isEmpty }
        }
        #expect(try await h.remote.content(atPath: "/cut.bin").map(sha) == sha(expected))
    }
}
