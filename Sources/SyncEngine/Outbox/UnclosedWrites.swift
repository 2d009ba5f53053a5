import LocalState
import Logging

/// Files that were open for writing when the daemon stopped: kept here, never uploaded halfway.
extension SyncEngine {
    /// A file that was open for writing when the daemon died has local changes and no queued
    /// upload. Its content may be half-written, so it is never uploaded on its own: it is kept
    /// here, reported in uploadingError, and goes up when it is saved (closed) again.
    ///
    /// So does a file whose queued upload an earlier close made (every close queues one) while
    /// a descriptor stayed open and went on writing: its cache file no longer has the size
    /// that close recorded. (Writes after it that kept the size cannot be told apart; the
    /// content as it is then goes up.)
    ///
    /// Once per engine: the daemon runs it before the mount serves (a file opened meanwhile is
    /// spared it), and the outbox service at its start, for whoever runs the engine without.
    public func recoverUnclosedWrites() {
        guard state.withLock({ s in
            defer { s.recoveredUnclosedWrites = true }
            return !s.recoveredUnclosedWrites
        }) else { return }
        do {
            try store.write { w in
                let grown = try w.reader.dirtyWithUploads().filter { item in cache.size(item.ino).map { $0 != item.size } ?? false }
                // A file open now was opened by this run (the mount may serve before this runs).
                for var item in try w.reader.dirtyWithoutOps().filter({ $0.uploadError == nil }) + grown where !openFiles.isOpen(item.ino) {
                    if let size = cache.size(item.ino) {
                        item.size = size
                        item.cachedBytes = size
                    }
                    item.uploadError = "the mount stopped while this file was open for writing; it is kept on this device and uploaded when it is saved again"
                    try w.dropUploads(of: item.ino)
                    try w.update(item)
                }
            }
        } catch {
            logger.error("cannot check unclosed writes", metadata: ["error": "\(error)"])
        }
    }
}
