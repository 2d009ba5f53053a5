import Crypto
import Foundation
import ItemModel
import PageCache

/// The cache files: one per item that has content on this device, `CACHE/content/<ino>`,
/// sparse while a download fills it. Plain POSIX calls: these run on FUSE threads at disk speed.
public struct ContentCache: Sendable {
    public let directory: String
    /// The folder, held open: a cache file is then found by its name alone. By its full path
    /// every folder above it was looked up again, and with the page cache dropped each lookup
    /// read the disk, on the way of a placeholder's open.
    let folder: Folder
    /// The running hashes of files being written: every change to a cache file other than a
    /// write through the mount forgets its file's.
    public let digests = WrittenDigests()

    final class Folder: Sendable {
        let fd: Int32
        init(_ path: String) throws {
            fd = Glibc.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard fd >= 0 else { throw ContentError.io("cannot open the cache folder \(path)", errno) }
        }
        deinit { close(fd) }
    }

    public init(directory: String) throws {
        self.directory = directory
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw ContentError.io("cannot create the cache folder \(directory)", errno)
        }
        folder = try Folder(directory)
    }

    public func path(_ ino: Int64) -> String { "\(directory)/\(ino)" }

    /// Opens (creating when missing) the cache file for reading and writing.
    public func open(_ ino: Int64, truncate: Bool = false) throws -> Int32 {
        let fd = openat(folder.fd, String(ino), O_RDWR | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0o600)
        guard fd >= 0 else { throw ContentError.io("cannot open the cache file of \(ino)", errno) }
        // After the cut (see WrittenDigests).
        if truncate { digests.forget(ino) }
        return fd
    }

    /// Empties the cache file and makes it `size` bytes long without writing them (a sparse
    /// placeholder a download fills), and returns it open for reading and writing.
    public func openSparse(_ ino: Int64, size: Int64) throws -> Int32 {
        let fd = try open(ino, truncate: true)
        guard ftruncate(fd, off_t(size)) == 0 else {
            let code = errno
            close(fd)
            throw ContentError.io("cannot size the cache file", code)
        }
        return fd
    }

    /// 4 MiB kept free on the cache volume: when a writer fills the disk, dropping it leaves
    /// room to record that the write failed (and that this version must not be uploaded).
    static let reserveBytes = 4 << 20
    var reservePath: String { directory + "/.reserve" }

    /// Makes sure the reserve exists, once the volume has room for it and 1 MiB more: taken
    /// back as soon as it barely fitted, it would take the last free space from the download
    /// or the write that comes next.
    public func ensureReserve() {
        guard access(reservePath, F_OK) != 0 else { return }
        var fs = statvfs()
        guard statvfs(directory, &fs) == 0, UInt64(fs.f_bavail) * UInt64(fs.f_frsize) >= UInt64(Self.reserveBytes + (1 << 20)) else { return }
        let fd = Glibc.open(reservePath + ".new", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let zeros = [UInt8](repeating: 0, count: 1 << 20)
        for _ in 0..<(Self.reserveBytes >> 20) {
            guard zeros.withUnsafeBytes({ Glibc.write(fd, $0.baseAddress, $0.count) }) == zeros.count else {
                unlink(reservePath + ".new")
                return
            }
        }
        rename(reservePath + ".new", reservePath)
    }

    /// Frees the reserve: the volume is full and the failure must still be recorded.
    public func dropReserve() {
        unlink(reservePath)
    }

    public func remove(_ ino: Int64) {
        unlinkat(folder.fd, String(ino), 0)
        digests.forget(ino)
    }

    /// Bytes the file really occupies on disk.
    public func allocatedBytes(_ ino: Int64) -> Int64 {
        guard let st = status(ino) else { return 0 }
        return Int64(st.st_blocks) * 512
    }

    /// The inodes that have a cache file.
    public func cachedInodes() -> [Int64] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).compactMap { Int64($0) }
    }

    public func exists(_ ino: Int64) -> Bool { faccessat(folder.fd, String(ino), F_OK, 0) == 0 }

    func status(_ ino: Int64) -> stat? {
        var st = stat()
        return fstatat(folder.fd, String(ino), &st, 0) == 0 ? st : nil
    }

    /// SHA-256 and length of what `fd` holds from offset 0: up to its end, or up to `limit`
    /// bytes. The one hashing loop for uploads (a snapshot) and downloads (the check).
    /// `dropBehind`: the pass releases the page cache behind it (see `DropBehind`); for a
    /// download's check, whose bytes a reader already has in the mount's own page cache.
    public static func sha256(of fd: Int32, limit: Int64 = .max, dropBehind: Bool = false) throws -> (ContentDigest, Int64) {
        var hasher = SHA256()
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var total: Int64 = 0
        while total < limit {
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress!, Int(min(Int64($0.count), limit - total)), off_t(total)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw ContentError.io("cannot read content to hash it", errno)
            }
            if n == 0 { break }
            buffer.withUnsafeBytes { hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[..<n])) }
            if dropBehind { DropBehind.afterRead(fd: fd, range: total..<(total + Int64(n))) }
            total += Int64(n)
        }
        return (ContentDigest(hasher.finalize()), total)
    }

    /// The whole content when it is at most `limit` bytes, read in one go; nil when larger.
    /// Such a copy in memory is a snapshot as good as `snapshot`'s file, without the file.
    public func readWhole(_ ino: Int64, limit: Int) throws -> [UInt8]? {
        let fd = openat(folder.fd, String(ino), O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw ContentError.io("cannot read the cache file of \(ino)", errno) }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw ContentError.io("cannot read the cache file of \(ino)", errno) }
        guard st.st_size <= limit else { return nil }
        // One byte more than fstat said: a file that grew since is noticed, not cut short.
        var bytes = [UInt8](repeating: 0, count: Int(st.st_size) + 1)
        var got = 0
        while got < bytes.count {
            let n = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + got, $0.count - got, off_t(got)) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw ContentError.io("cannot read the cache file of \(ino)", errno) }
            if n == 0 { break }
            got += n
        }
        guard got <= st.st_size else { return nil }
        bytes.removeSubrange(got...)
        return bytes
    }

    public func size(_ ino: Int64) -> Int64? {
        status(ino).map { Int64($0.st_size) }
    }

    /// Which file the cache file of `ino` is, and its size.
    public func identity(_ ino: Int64) -> (file: FileIdentity, size: Int64)? {
        status(ino).map { (FileIdentity($0), Int64($0.st_size)) }
    }
}

/// Why content could not be had: the cache files' I/O, and downloads.
public enum ContentError: Error, Sendable, CustomStringConvertible {
    case io(String, Int32)
    case notFound
    case offline(String)
    case digestMismatch
    case cancelled

    public var description: String {
        switch self {
        case .io(let what, let code): "\(what): \(String(cString: strerror(code)))"
        case .notFound: "the item no longer exists"
        case .offline(let why): "the server cannot be reached (\(why))"
        case .digestMismatch: "the downloaded content does not match its digest"
        case .cancelled: "cancelled"
        }
    }
}
