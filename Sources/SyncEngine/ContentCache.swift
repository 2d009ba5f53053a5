import Foundation
import ItemModel

/// The cache files: one per item that has content on this device, `CACHE/content/<ino>`,
/// sparse while a download fills it. Plain POSIX calls: these run on FUSE threads at disk speed.
public struct ContentCache: Sendable {
    public let directory: String

    public init(directory: String) throws {
        self.directory = directory
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw EngineError.io("cannot create the cache folder \(directory)", errno)
        }
    }

    public func path(_ ino: Int64) -> String { "\(directory)/\(ino)" }

    /// Opens (creating when missing) the cache file for reading and writing.
    public func open(_ ino: Int64, truncate: Bool = false) throws -> Int32 {
        let fd = Glibc.open(path(ino), O_RDWR | O_CREAT | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0o600)
        guard fd >= 0 else { throw EngineError.io("cannot open the cache file of \(ino)", errno) }
        return fd
    }

    /// Makes the cache file `size` bytes long without writing them (a sparse placeholder).
    public func prepareSparse(_ ino: Int64, size: Int64) throws {
        let fd = try open(ino, truncate: true)
        defer { close(fd) }
        guard ftruncate(fd, off_t(size)) == 0 else { throw EngineError.io("cannot size the cache file", errno) }
    }

    public func remove(_ ino: Int64) {
        unlink(path(ino))
    }

    /// Bytes the file really occupies on disk.
    public func allocatedBytes(_ ino: Int64) -> Int64 {
        var st = stat()
        guard stat(path(ino), &st) == 0 else { return 0 }
        return Int64(st.st_blocks) * 512
    }

    public func exists(_ ino: Int64) -> Bool { access(path(ino), F_OK) == 0 }

    public func size(_ ino: Int64) -> Int64? {
        var st = stat()
        guard stat(path(ino), &st) == 0 else { return nil }
        return Int64(st.st_size)
    }
}

/// Errors of the engine's own I/O.
public enum EngineError: Error, Sendable, CustomStringConvertible {
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

    /// The errno a filesystem caller should see.
    public var errno: Int32 {
        switch self {
        case .io(_, let code): code == ENOSPC || code == EDQUOT ? ENOSPC : EIO
        case .notFound: ENOENT
        case .offline, .digestMismatch: EIO
        case .cancelled: EINTR
        }
    }
}
