import CacheFiles
import Foundation
import ItemModel
import LocalState
import Logging
import OpenFiles
import SyncAPI
import Synchronization

extension Downloads {
    /// The rest of a download `start` began: its head (asked for already), then everything after it.
    func runSequential(
        ino: Int64, digest: ContentDigest, size: Int64, generation: UInt64, fd: Int32, sink: CacheFileSink,
        head: @Sendable () async throws -> Void
    ) async {
        do {
            try await head()
            let headEnd = min(size, Self.headLength)
            if headEnd < size { try await remote.download(digest, range: headEnd..<size, receive: sink.receive) }
            guard sink.finish() == size else { throw ContentError.io("the download ended early", EIO) }
            // Checked once everything landed, from the page cache, on a thread of its own: the
            // hash costs as much CPU as the rest of the transfer, and hashing on the connection's
            // thread halved the rate at which readers get their bytes. The file becomes
            // `current` only after this check, as before.
            guard try await Self.digest(ofFile: fd, size: size) == digest else { throw ContentError.digestMismatch }
            finish(ino, digest: digest, generation: generation, error: nil, file: FileIdentity(of: fd))
        } catch ContentError.digestMismatch {
            finish(ino, digest: digest, generation: generation, error: ContentError.digestMismatch)
            await refreshAfterMismatch(ino)
        } catch {
            finish(ino, digest: digest, generation: generation, error: error)
        }
    }

    /// A download failed its digest check. The row may hold a size or digest that is not the
    /// server's (an update of it lost along the way): ask the server, and unless local changes
    /// wait to go up, take its content's size, digest and time, so that the next open fetches
    /// the right bytes. The row's revision stays: later changes arrive on the feed as usual.
    func refreshAfterMismatch(_ ino: Int64) async {
        guard let item = try? store.read({ try $0.item(ino) }), item.revision != nil,
              let current = try? await remote.item(item.itemID) else { return }
        let repaired = (try? store.write { w -> Bool in
            guard var row = try w.reader.item(ino), row.itemID == current.id, row.kind == .file, row.content != .dirty,
                  try w.reader.pendingOps(for: ino) == 0, row.size != current.size || row.serverDigest != current.digest
            else { return false }
            row.size = current.size
            row.serverDigest = current.digest
            row.modified = current.modified
            row.downloadError = nil
            try w.update(row)
            return true
        }) ?? false
        if repaired {
            logger.notice("a download failed its check; the item's size and digest were refreshed from the server", metadata: ["item.ino": "\(ino)"])
            observer.invalidate([.inode(ino)])
        }
    }

    func runPriority(ino: Int64, digest: ContentDigest, range: Range<Int64>, generation: UInt64) async {
        do {
            let fd = try cache.open(ino)
            defer { close(fd) }
            let sink = CacheFileSink(fd: fd, at: range.lowerBound) { [self] landedRange in landed(ino, landedRange) }
            try register(sink, ino: ino, generation: generation)
            try await remote.download(digest, range: range, receive: sink.receive)
        } catch {
            // The sequential stream still covers this range; its outcome decides.
            logger.debug("priority fetch failed", metadata: ["item.ino": "\(ino)", "error": "\(error)"])
        }
    }

    /// SHA-256 of the first `size` bytes of `fd`, computed on a dispatch thread so that no
    /// thread of the cooperative pool is held for the second a large file takes.
    static func digest(ofFile fd: Int32, size: Int64) async throws -> ContentDigest {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global(qos: .utility).async {
                continuation.resume(with: Result {
                    let (digest, length) = try ContentCache.sha256(of: fd, limit: size, dropBehind: true)
                    guard length == size else { throw ContentError.io("cannot read back a download", EIO) }
                    return digest
                })
            }
        }
    }

    /// `file`: the cache file a download that passed its check wrote.
    func finish(_ ino: Int64, digest: ContentDigest, generation: UInt64, error: Error?, file: FileIdentity? = nil) {
        // A cancelled download's outcome is nobody's business (a later download of the file may
        // be running under the same inode number), except to the descriptors that followed it:
        // cancelled while its check ran, it is whole in the file they hold.
        guard let ended = state.withLock({ s in s.active[ino].flatMap { $0.generation == generation ? $0 : nil } }) else {
            if error == nil, let file { openFiles.downloadCompleted(ino, digest: digest, file: file) }
            return
        }
        let size = ended.size
        // Record the outcome before waking readers, so that they see the final state.
        let message = error.map { ($0 as? ContentError)?.description ?? ($0 as? RemoteError).map(describe) ?? "\($0)" }
        do {
            try store.write { w in
                // A requested download ends here, unless the server could not be reached or
                // refused the token: then it goes on once the connection is back (also after a
                // restart).
                if (error as? RemoteError)?.meansOffline != true { try w.dropDownloadRequest(ino) }
                guard var item = try w.reader.item(ino), item.content != .dirty else { return }
                if let message {
                    item.downloadError = message
                    if item.content != .current && item.content != .stale { item.content = .placeholder; item.cachedBytes = 0 }
                } else {
                    item.downloadError = nil
                    item.content = item.serverDigest == digest ? .current : .stale
                    item.cachedBytes = size
                    item.lastAccess = SyncEngine.now()
                }
                try w.update(item)
            }
        } catch {
            logger.error("cannot record a download", metadata: ["item.ino": "\(ino)", "error": "\(error)"])
        }
        if error == nil {
            // A stat made while it downloaded left the kernel with the placeholder's blocks
            // (none), kept for the attribute timeout: they count now.
            observer.invalidate([.attributes(ino)])
            if let file { openFiles.downloadCompleted(ino, digest: digest, file: file) }
            state.withLock { $0.retries.succeeded(ino) }
        } else {
            // The pass that comes when the pause ends may start it again.
            let due = state.withLock { $0.retries.failed(ino, digest: digest, at: .now) }
            let onFinished = onFinished
            Task {
                try? await Task.sleep(until: due)
                onFinished(ino)
            }
        }
        // On failure the sparse file stays (as a placeholder's): an open reader's descriptor
        // keeps pointing at the file a retry will fill.
        let failure: Error? = error.map { e in
            if let r = e as? RemoteError { return ContentError.offline(describe(r)) }
            return e
        }
        end(ino, generation: generation, telling: failure)
        observer.event(MountEvent(message == nil ? .downloaded : .downloadFailed, path: ended.path, detail: message, bytes: message == nil ? size : nil))
        onFinished(ino)
    }
}
