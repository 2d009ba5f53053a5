#if canImport(Glibc)
import Glibc
#endif
import Crypto
import Foundation
import ItemModel
import NIOCore
import PageCache

public enum BlobStoreError: Error, Sendable, Equatable {
    /// The disk is full (ENOSPC) or over quota (EDQUOT).
    case noSpace
    case io(operation: String, errno: Int32)
    case digestMismatch(declared: ContentDigest, actual: ContentDigest)
    case notFound(ContentDigest)
    /// A store across a network (S3) failed or refused: what it was doing, and its answer (an
    /// S3 error code and HTTP status) or why there was none.
    case remote(operation: String, detail: String)
}

/// The embedded default for content: one file per SHA-256 under `DIR/blobs/ab/abcdef…`.
///
/// A blob is written to `DIR/blobs/tmp/`, hashed as it arrives, then fsynced, renamed into
/// place and its folder fsynced, all before `commit` returns: an acknowledged upload survives
/// `kill -9` and power loss. A half-written temp file is never visible under a digest.
///
/// Synchronous inside: its async functions do their file I/O on the calling thread, as before
/// the seam became async, except the commit's fsyncs (see `commit`).
public final class FileBlobStore: BlobStore, Sendable {
    public let root: String
    /// The root folder, held open: blobs are opened relative to it, so a read does not walk
    /// (and, with cold caches, read from disk) every folder above the store.
    let rootFD: Int32

    public init(root: String) throws {
        self.root = root
        for dir in [root, root + "/tmp"] {
            if mkdir(dir, 0o700) != 0 && errno != EEXIST { throw BlobStoreError.io(operation: "mkdir \(dir)", errno: errno) }
        }
        rootFD = open(root, Self.pathOnly | O_DIRECTORY | O_CLOEXEC)
        guard rootFD >= 0 else { throw BlobStoreError.io(operation: "open \(root)", errno: errno) }
        // Leftovers of uploads cut off by a crash: never acknowledged, safe to drop.
        if let dir = opendir(root + "/tmp") {
            while let entry = readdir(dir) {
                let name = Self.name(of: entry)
                if name != "." && name != ".." { unlink(root + "/tmp/" + name) }
            }
            closedir(dir)
        }
    }

    deinit { close(rootFD) }

    /// O_PATH, which Swift's Glibc module does not export: a handle on the folder itself.
    static let pathOnly: Int32 = 0o10000000

    func path(of digest: ContentDigest) -> String {
        "\(root)/\(relativePath(of: digest))"
    }

    func relativePath(of digest: ContentDigest) -> String {
        "\(digest.hex.prefix(2))/\(digest.hex)"
    }

    public func makeWriter() async throws -> any BlobWriter {
        let path = "\(root)/tmp/\(ItemID.random().rawValue)"
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ioError("create", errno) }  // out of space or of inodes: 507
        return FileBlobWriter(store: self, fd: fd, tempPath: path)
    }

    public func size(of digest: ContentDigest) async throws -> Int64? {
        if digest == .empty { return 0 }
        var st = stat()
        guard fstatat(rootFD, relativePath(of: digest), &st, 0) == 0 else {
            if errno == ENOENT { return nil }
            throw BlobStoreError.io(operation: "stat", errno: errno)
        }
        return Int64(st.st_size)
    }

    public func openReader(_ digest: ContentDigest) async throws -> any BlobReader {
        if digest == .empty { return EmptyBlobReader() }
        let fd = openat(rootFD, relativePath(of: digest), O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { throw BlobStoreError.notFound(digest) }
            throw BlobStoreError.io(operation: "open", errno: errno)
        }
        var st = stat()
        fstat(fd, &st)
        return FileBlobReader(fd: fd, size: Int64(st.st_size))
    }

    public func digests(writtenBefore cutoff: Timestamp) async throws -> [ContentDigest] {
        var out: [ContentDigest] = []
        guard let top = opendir(root) else { throw BlobStoreError.io(operation: "opendir", errno: errno) }
        defer { closedir(top) }
        while let shard = readdir(top) {
            let shardName = Self.name(of: shard)
            // The shards are the two-hex-digit folders; `tmp` and anything else are not blobs.
            guard shardName.utf8.count == 2, let dir = opendir(root + "/" + shardName) else { continue }
            defer { closedir(dir) }
            while let entry = readdir(dir) {
                let name = Self.name(of: entry)
                guard name.hasPrefix(shardName), let digest = try? ContentDigest(hex: name) else { continue }
                var st = stat()
                guard fstatat(rootFD, relativePath(of: digest), &st, 0) == 0 else { continue }
                let written = Timestamp(st.st_mtim.tv_sec) * 1_000_000_000 + Timestamp(st.st_mtim.tv_nsec)
                if written < cutoff { out.append(digest) }
            }
        }
        return out
    }

    public func remove(_ digest: ContentDigest) async throws {
        guard digest != .empty else { return }
        if unlinkat(rootFD, relativePath(of: digest), 0) != 0 && errno != ENOENT {
            throw BlobStoreError.io(operation: "unlink", errno: errno)
        }
    }

    static func name(of entry: UnsafeMutablePointer<dirent>) -> String {
        withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
    }

    static func fsyncDirectory(_ path: String) throws {
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw ioError("open dir", errno) }
        defer { close(fd) }
        guard fsync(fd) == 0 else { throw ioError("fsync dir", errno) }
    }
}

func ioError(_ operation: String, _ code: Int32) -> BlobStoreError {
    code == ENOSPC || code == EDQUOT ? .noSpace : .io(operation: operation, errno: code)
}

/// Owned by one upload at a time; not shared between tasks (unchecked: it moves to a dispatch
/// thread for the commit while its request waits for it).
///
/// The bytes are hashed on the caller's thread while a thread of the writer's own writes them
/// to the file (`FileWrites`): on this machine hashing a GiB takes 1.2 s of one core and
/// writing it 0.8 s of another, one after the other 2.4 s a GiB, side by side about half that.
final class FileBlobWriter: BlobWriter, @unchecked Sendable {
    let store: FileBlobStore
    let tempPath: String
    var hasher = SHA256()
    let writes: FileWrites
    private(set) var bytesWritten: Int64 = 0
    var finished = false

    init(store: FileBlobStore, fd: Int32, tempPath: String) {
        self.store = store
        self.writes = FileWrites(fd: fd)
        self.tempPath = tempPath
    }

    func write(_ buffer: ByteBuffer) async throws {
        try await writes.enqueue(buffer, at: bytesWritten)
        buffer.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
        bytesWritten += Int64(buffer.readableBytes)
    }

    /// Commits on a dispatch thread. The commit waits for two fsyncs (about a millisecond each
    /// here), and the caller's task may run on a server's event loop: waiting there would stall
    /// every other request of that loop; on other threads the syncs overlap.
    func commit(expecting expected: ContentDigest?) async throws -> (digest: ContentDigest, size: Int64) {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(with: Result { try self.commitHere(expecting: expected) }) }
        }
    }

    func commitHere(expecting expected: ContentDigest?) throws -> (digest: ContentDigest, size: Int64) {
        let digest = ContentDigest(hasher.finalize())
        if let expected, expected != digest {
            abortHere()
            throw BlobStoreError.digestMismatch(declared: expected, actual: digest)
        }
        do { try writes.finish(sync: true) } catch {
            abortHere()
            throw error
        }
        let shard = "\(store.root)/\(digest.hex.prefix(2))"
        if mkdir(shard, 0o700) != 0 && errno != EEXIST {
            let code = errno
            abortHere()
            throw ioError("mkdir", code)
        }
        // Same digest, same bytes: renaming over an existing blob is harmless.
        guard rename(tempPath, store.path(of: digest)) == 0 else {
            let code = errno
            abortHere()
            throw ioError("rename", code)
        }
        finished = true
        try FileBlobStore.fsyncDirectory(shard)
        return (digest, bytesWritten)
    }

    func abort() async { abortHere() }

    func abortHere() {
        guard !finished else { return }
        finished = true
        try? writes.finish(sync: false)
        unlink(tempPath)
    }

    deinit { abortHere() }
}

// Unchecked: `closed` and `passStart` are touched only by the one stream that owns the reader.
final class FileBlobReader: BlobReader, @unchecked Sendable {
    let fd: Int32
    let size: Int64
    var closed = false
    /// The first offset read: the start of this request's sequential pass.
    var passStart: Int64?

    init(fd: Int32, size: Int64) {
        self.fd = fd
        self.size = size
    }

    func read(_ range: Range<Int64>, firstChunkSize: Int, chunkSize: Int, into sink: (ByteBuffer) async throws -> Void) async throws {
        guard range.lowerBound >= 0, range.upperBound <= size else { throw BlobStoreError.io(operation: "read past the end", errno: EINVAL) }
        let allocator = ByteBufferAllocator()
        var offset = range.lowerBound
        var chunk = firstChunkSize
        while offset < range.upperBound {
            let want = Int(min(Int64(chunk), range.upperBound - offset))
            var buffer = allocator.buffer(capacity: want)
            let got = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: want) { ptr in
                try read(at: offset, into: UnsafeMutableRawBufferPointer(rebasing: ptr[0..<want]))
            }
            // The file is shorter than its size said: it changed under the store.
            if got == 0 { throw BlobStoreError.io(operation: "read: the content ended early", errno: EIO) }
            offset += Int64(got)
            try await sink(buffer)
            chunk = chunkSize
        }
    }

    func read(at offset: Int64, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
        while true {
            let n = pread(fd, buffer.baseAddress, buffer.count, off_t(offset))
            if n >= 0 {
                // A blob is streamed to a device once and kept there; see DropBehind. A reader
                // serves one request, so its first offset is where its pass began.
                let start = passStart ?? offset
                passStart = start
                DropBehind.afterRead(fd: fd, range: offset..<(offset + Int64(n)), passStart: start)
                return n
            }
            if errno != EINTR { throw BlobStoreError.io(operation: "read", errno: errno) }
        }
    }

    func close() {
        guard !closed else { return }
        closed = true
        Glibc.close(fd)
    }

    deinit { close() }
}

/// A content held in memory (one kept inline by the metadata store).
public final class DataBlobReader: BlobReader, Sendable {
    let data: Data
    public init(_ data: Data) { self.data = data }
    public var size: Int64 { Int64(data.count) }
    public func read(_ range: Range<Int64>, firstChunkSize: Int, chunkSize: Int, into sink: (ByteBuffer) async throws -> Void) async throws {
        guard range.lowerBound >= 0, range.upperBound <= size else { throw BlobStoreError.io(operation: "read past the end", errno: EINVAL) }
        var offset = Int(range.lowerBound)
        var chunk = firstChunkSize
        while offset < Int(range.upperBound) {
            let n = min(chunk, Int(range.upperBound) - offset)
            try await sink(ByteBuffer(bytes: data[(data.startIndex + offset)..<(data.startIndex + offset + n)]))
            offset += n
            chunk = chunkSize
        }
    }
    public func close() {}
}

public final class EmptyBlobReader: BlobReader, Sendable {
    public init() {}
    public var size: Int64 { 0 }
    public func read(_ range: Range<Int64>, firstChunkSize: Int, chunkSize: Int, into sink: (ByteBuffer) async throws -> Void) async throws {
        guard range.isEmpty, range.lowerBound == 0 else { throw BlobStoreError.io(operation: "read past the end", errno: EINVAL) }
    }
    public func close() {}
}

/// Writes chunks to a file, in order, on a thread of its own, with at most `limit` bytes
/// waiting: the caller hands a chunk over and goes on (to hash it) while the last ones are
/// written, and waits (suspended, never blocking its thread: it may be an event loop's) while
/// the queue is full. A failed write is reported by the next `enqueue` or by `finish`.
final class FileWrites: @unchecked Sendable {
    // Guarded by `condition`: queue, queuedBytes, failure, closing, done, roomWaiter; `fd` is
    // the thread's alone until `finish` has seen it end.
    private let condition = NSCondition()
    private var queue: [(bytes: ByteBuffer, offset: Int64)] = []
    private var queuedBytes = 0
    private var failure: BlobStoreError?
    private var closing = false
    private var done = false
    /// The one enqueuer waiting for room (a writer has one caller at a time).
    private var roomWaiter: CheckedContinuation<Bool, any Error>?
    private var fd: Int32
    static let limit = 16 << 20

    init(fd: Int32) {
        self.fd = fd
        let thread = Thread { [unowned self] in self.run() }
        thread.name = "blob-writes"
        thread.start()
    }

    func enqueue(_ bytes: ByteBuffer, at offset: Int64) async throws {
        while try await withCheckedThrowingContinuation({ offer(bytes, at: offset, answering: $0) }) == false {}
    }

    /// Queues the chunk and answers true; or, the queue being full, keeps the continuation and
    /// answers false once a write made room (the caller offers again); or throws the failure.
    private func offer(_ bytes: ByteBuffer, at offset: Int64, answering continuation: CheckedContinuation<Bool, any Error>) {
        condition.lock()
        defer { condition.unlock() }
        if let failure {
            continuation.resume(throwing: failure)
        } else if queuedBytes == 0 || queuedBytes + bytes.readableBytes <= Self.limit {
            queue.append((bytes, offset))
            queuedBytes += bytes.readableBytes
            condition.broadcast()
            continuation.resume(returning: true)
        } else {
            roomWaiter = continuation
        }
    }

    /// Waits for every chunk to be written, then (with `sync`) makes the file durable, and
    /// closes it. Throws the first failed write or the failed fsync.
    func finish(sync: Bool) throws {
        condition.lock()
        closing = true
        condition.broadcast()
        while !done { condition.wait() }
        let failure = self.failure
        condition.unlock()
        defer {
            if fd >= 0 { close(fd) }
            fd = -1
        }
        if let failure { throw failure }
        if sync && fd >= 0 && fsync(fd) != 0 { throw ioError("fsync", errno) }
    }

    private func run() {
        while true {
            condition.lock()
            while queue.isEmpty && !closing { condition.wait() }
            if queue.isEmpty {
                done = true
                condition.broadcast()
                condition.unlock()
                return
            }
            let (bytes, offset) = queue.removeFirst()
            let failed = failure != nil
            condition.unlock()
            let error = failed ? nil : Self.write(bytes, at: offset, to: fd)
            condition.lock()
            queuedBytes -= bytes.readableBytes
            if let error, failure == nil { failure = error }
            let waiter = roomWaiter
            roomWaiter = nil
            condition.broadcast()
            condition.unlock()
            waiter?.resume(returning: false)
        }
    }

    static func write(_ bytes: ByteBuffer, at offset: Int64, to fd: Int32) -> BlobStoreError? {
        let count = bytes.readableBytes
        var written = 0
        while written < count {
            let n = bytes.withUnsafeReadableBytes { Glibc.pwrite(fd, $0.baseAddress! + written, count - written, off_t(offset) + off_t(written)) }
            if n < 0 {
                if errno == EINTR { continue }
                return ioError("write", errno)
            }
            written += n
        }
        // Writeback starts as the blob arrives, not at the commit's fsync, which then waits for
        // the last blocks only (a 1 GiB upload's fsync took 0.5 to 0.9 s); and the pages,
        // written, are released (see DropBehind): the blob goes to the device, not to memory.
        DropBehind.afterRead(fd: fd, range: offset..<(offset + Int64(count)))
        return nil
    }
}
