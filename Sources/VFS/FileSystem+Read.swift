import CacheFiles
import Glibc
import LocalState
import Logging

extension FileSystem {
    public enum ReadResult: Sendable {
        /// Send `count` bytes from the cache file at `offset` (zero-copy through the kernel).
        case file(fd: Int32, offset: Int64, count: Int)
        case bytes([UInt8])
    }

    /// A read that can be answered at once from the cache file (the content is here), or nil
    /// when it must wait for a download (then the caller uses `read`).
    public func readIfLocal(_ handle: UInt64, offset: Int64, size: Int) throws(FSError) -> ReadResult? {
        guard let h = openFiles.handle(handle) else { throw .badHandle }
        // The common cases touch no database: content known to be here (the cache file's own
        // size is the content's), or bytes behind the front of this version's download.
        if h.knownLocal {
            var st = stat()
            guard fstat(h.fd, &st) == 0 else { throw .io }
            return Self.slice(fd: h.fd, offset: offset, size: size, fileSize: Int64(st.st_size))
        }
        if let digest = h.digest {
            switch content.readPosition(h.ino, digest: digest, from: offset, count: size) {
            case .landed(let fileSize): return Self.slice(fd: h.fd, offset: offset, size: size, fileSize: fileSize)
            // Ahead of this version's running download: the caller waits for it.
            case .ahead: return nil
            case .notRunning: break
            }
        }
        let item = try rowForHandleVersion(h)
        let fileSize = openFiles.beingWritten(h.ino)?.size ?? item.size
        guard offset < fileSize else { return .bytes([]) }
        let count = Int(min(Int64(size), fileSize - offset))
        let local = item.content.isWhole
        // Behind the front of a running download of the current version: the bytes are here.
        let landed = !local && item.serverDigest.flatMap {
            content.readPosition(h.ino, digest: $0, from: offset, count: count).landedSize
        } != nil
        guard local || landed else { return nil }
        if local { openFiles.markKnownLocal(handle) }
        return .file(fd: h.fd, offset: offset, count: count)
    }

    /// For a read `readIfLocal` could not answer (callers try that first, on their thread).
    public func read(_ handle: UInt64, offset: Int64, size: Int) async throws(FSError) -> ReadResult {
        guard let h = openFiles.handle(handle) else { throw .badHandle }
        // Ahead of the running download of this handle's version: wait for just this range,
        // without the database (a sequential reader waits here on every request).
        // A failed or cancelled wait falls through to the full path, which knows why.
        if let digest = h.digest, (try? await content.waitIfDownloading(h.ino, digest: digest, from: offset, count: size)) == true,
           let ready = try readIfLocal(handle, offset: offset, size: size) {
            return ready
        }
        let item = try rowForHandleVersion(h)
        let fileSize = openFiles.beingWritten(h.ino)?.size ?? item.size
        guard offset < fileSize else { return .bytes([]) }
        let count = Int(min(Int64(size), fileSize - offset))
        if item.content == .placeholder {
            do { try await content.waitForContent(item, range: offset..<(offset + Int64(count))) } catch { throw Self.fsError(error) }
        }
        return .file(fd: h.fd, offset: offset, count: count)
    }

    /// The row a handle that follows a download reads against. Its version replaced before it
    /// was whole here fails the read (EIO): the bytes of another version are not its, and a
    /// reader must never see a mix of two versions.
    func rowForHandleVersion(_ h: Handle) throws(FSError) -> LocalItem {
        let item = try item(h.ino)
        if item.serverDigest != h.digest {
            logger.notice("a read of a version replaced during its download fails", metadata: ["item.ino": "\(h.ino)"])
            throw .io
        }
        return item
    }

    /// A read ahead of the running download of the handle's version, answered without a
    /// task: `answer` gets it once its bytes have landed, on the thread that landed them (at
    /// once, on this thread, when they have). A sequential reader of a placeholder waits here
    /// on nearly every request, and the hop through a task was a wake-up more each time.
    /// False when no such download runs: the caller uses `read`. `answer(nil)` when the
    /// download failed or was cancelled first: the caller uses `read`, which says why.
    public func readWhenLanded(_ handle: UInt64, offset: Int64, size: Int, answer: @escaping @Sendable (ReadResult?) -> Void) throws(FSError) -> Bool {
        guard let h = openFiles.handle(handle) else { throw .badHandle }
        guard let digest = h.digest else { return false }
        let fd = h.fd
        return content.whenLanded(h.ino, digest: digest, from: offset, count: size) { fileSize in
            answer(fileSize.map { Self.slice(fd: fd, offset: offset, size: size, fileSize: $0) })
        }
    }

    static func slice(fd: Int32, offset: Int64, size: Int, fileSize: Int64) -> ReadResult {
        guard offset < fileSize else { return .bytes([]) }
        return .file(fd: fd, offset: offset, count: Int(min(Int64(size), fileSize - offset)))
    }
}
