import Crypto
import Dispatch
import Glibc
import ItemModel
import Synchronization

/// The SHA-256 of files written from their first byte on, computed behind the writer, so
/// that a large file's upload can start at its close without first reading it all again to
/// hash it (1 GiB: 0.6 s of one core here, between the close and the first byte sent).
///
/// Only a file written in one contiguous run from offset 0 has a digest: each write must
/// start where the previous one ended; a write at 0 starts afresh; any other write, a
/// truncate, or a change to the cache file by anything but a write (a download, a removal)
/// forgets it. So the bytes hashed are the bytes in `[0, end)` of the file, and when the file
/// is `end` bytes long they are its content. Bytes are hashed a megabyte at a time on one
/// queue of its own, never on the writing thread. A digest is only ever a shortcut: an upload
/// checks the file's identity and size against it, the server hashes what it receives against
/// it, and a refusal makes the upload hash the file itself.
public final class WrittenDigests: Sendable {
    /// Smaller files are hashed at their upload: that costs less than keeping a running hash.
    public static let minimumSize: Int64 = 1 << 20
    static let batchBytes = 1 << 20
    /// Bytes handed to the hashing queue and not yet hashed, per file: a writer that outruns
    /// the hashing by this much leaves the file to be hashed at its upload instead.
    static let backlogLimit = 64 << 20

    /// Touched only on `hashing`.
    final class Hash: @unchecked Sendable {
        var state = SHA256()
    }

    struct Running {
        /// Taken by the write that brings the run to `minimumSize`: a smaller file's hash is
        /// never asked for, and its writes make no system call for it.
        var file: FileIdentity?
        var end: Int64
        var batch: [[UInt8]] = []
        var batchBytes = 0
        let hash = Hash()
        /// Bytes dispatched to the queue and not yet hashed.
        var backlog = 0
    }

    let running = Mutex<[Int64: Running]>([:])
    let hashing = DispatchQueue(label: "ubiq.written-digests", qos: .utility)

    public init() {}

    /// A write of `bytes` at `offset` landed in the cache file open as `fd`.
    public func wrote(_ ino: Int64, at offset: Int64, bytes: [UInt8], fd: Int32) {
        let reachesMinimum = offset < Self.minimumSize && offset + Int64(bytes.count) >= Self.minimumSize
        let file = reachesMinimum ? FileIdentity(of: fd) : nil
        running.withLock { table in
            var entry: Running
            if offset == 0 {
                entry = Running(file: nil, end: 0)
            } else if let current = table[ino], current.end == offset {
                entry = current
            } else {
                table[ino] = nil
                return
            }
            if let file { entry.file = file }
            entry.end += Int64(bytes.count)
            entry.batch.append(bytes)
            entry.batchBytes += bytes.count
            if entry.batchBytes >= Self.batchBytes {
                guard entry.backlog + entry.batchBytes <= Self.backlogLimit else {
                    table[ino] = nil
                    return
                }
                // Queued under the lock: batches reach the queue in the order of their bytes.
                let (hash, batch, count) = (entry.hash, entry.batch, entry.batchBytes)
                hashing.async { [self] in
                    Self.update(hash, with: batch)
                    running.withLock { table in
                        if table[ino]?.hash === hash { table[ino]?.backlog -= count }
                    }
                }
                entry.backlog += count
                entry.batch = []
                entry.batchBytes = 0
            }
            table[ino] = entry
        }
    }

    static func update(_ hash: Hash, with batch: [[UInt8]]) {
        for bytes in batch { bytes.withUnsafeBytes { hash.state.update(bufferPointer: $0) } }
    }

    /// The cache file changed other than by a write (truncated, refilled, removed).
    public func forget(_ ino: Int64) {
        running.withLock { $0[ino] = nil }
    }

    /// The last writer closed the file: a small file's running hash is not kept.
    public func writersClosed(_ ino: Int64) {
        running.withLock { table in
            if let entry = table[ino], entry.end < Self.minimumSize { table[ino] = nil }
        }
    }

    /// The digest of the file `ino` when its running hash covers all of it: the cache file is
    /// still `file` and `size` bytes long. Waits for the queue to hash what is left.
    public func digest(of ino: Int64, file: FileIdentity, size: Int64) async -> ContentDigest? {
        await withCheckedContinuation { continuation in
            running.withLock { table in
                guard var entry = table[ino], entry.file == file, entry.end == size else {
                    continuation.resume(returning: nil)
                    return
                }
                let (hash, batch) = (entry.hash, entry.batch)
                hashing.async {
                    Self.update(hash, with: batch)
                    // A copy: the file may still grow, and its hash with it.
                    let copy = hash.state
                    continuation.resume(returning: ContentDigest(copy.finalize()))
                }
                entry.batch = []
                entry.batchBytes = 0
                table[ino] = entry
            }
        }
    }

    /// How many files have a running hash.
    public var count: Int { running.withLock { $0.count } }
}

/// Which file a descriptor is open on (device and inode): a cache file that was unlinked and
/// made again under the same name is another file.
public struct FileIdentity: Sendable, Equatable {
    let device: UInt64
    let inode: UInt64

    public init?(of fd: Int32) {
        var st = stat()
        guard fstat(fd, &st) == 0 else { return nil }
        self.init(st)
    }

    init(_ st: stat) {
        device = UInt64(st.st_dev)
        inode = UInt64(st.st_ino)
    }
}
