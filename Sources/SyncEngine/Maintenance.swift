import CacheFiles
import Foundation
import ItemModel
import LocalState
import Logging
import ServiceLifecycle

extension SyncEngine {
    /// Keeps the cache within its limit and downloads pinned items, whenever something changes.
    public var maintenance: some Service { MaintenanceService(engine: self) }

    /// Drops the local content of a clean file, keeping its placeholder (`evictUbiquitousItem`).
    public func evict(_ ino: Int64) throws {
        let item = try store.read { try $0.item(ino) }
        guard let item else { throw ContentError.notFound }
        if item.kind == .folder {
            // Every file below that can go goes; one that cannot (open, or with unsent
            // changes) stays, and the refusal is reported once the rest is done.
            var refused: Error?
            for child in try store.read({ try $0.children(of: ino) }) {
                do { try evict(child.ino) } catch let e as EvictRefusal { refused = refused ?? e }
            }
            if let refused { throw refused }
            return
        }
        // A link's target is metadata, a FIFO or a socket has no content: nothing to drop.
        guard item.kind == .file else { return }
        // An open file's descriptors read and write its cache file: removing it under a writer
        // lost both the old content and what the writer wrote next.
        if openFiles.isOpen(ino) { throw EvictRefusal.inUse }
        let pending = try store.read { try $0.pendingOps(for: ino) }
        if item.content == .dirty || pending > 0 { throw EvictRefusal.unsentChanges }
        // Asked for and now evicted: no longer wanted (dropped before the cancel, so that the
        // background does not start it again in between).
        try store.write { try $0.dropDownloadRequest(ino) }
        downloads.cancel(ino)
        try store.write { w in
            guard var row = try w.reader.item(ino), row.content != .dirty else { return }
            row.content = .placeholder
            row.cachedBytes = 0
            row.downloadError = nil
            try w.update(row)
        }
        cache.remove(ino)
        observer.invalidate([.inode(ino)])
    }

    /// Pins or unpins an item and everything below it; pinning starts the downloads.
    public func setPinned(_ ino: Int64, _ pinned: Bool) throws {
        try store.write { w in
            var all = try w.reader.descendants(of: ino)
            if let item = try w.reader.item(ino) { all.append(item) }
            for var item in all where item.pinned != pinned {
                item.pinned = pinned
                try w.update(item)
            }
        }
        if pinned { maintenanceSignal.yield() }
    }

    /// Starts downloading (`startDownloadingUbiquitousItem`): a file, or every file below a folder.
    /// The request is recorded (`download_requests`), so that what has not arrived when the
    /// daemon stops is fetched after the next start, as iCloud Drive keeps a requested
    /// download going. A file's starts at once. A folder's files go a few at a time
    /// (`startWantedDownloads`): each download holds a cache file open, and starting thousands
    /// at once ran the daemon out of file descriptors, which then failed unrelated opens.
    public func startDownload(_ ino: Int64) throws {
        guard let item = try store.read({ try $0.item(ino) }) else { throw ContentError.notFound }
        let files = item.kind == .folder
            ? try store.read { try $0.descendants(of: ino) }.filter { $0.kind == .file && $0.content.needsDownload }
            : item.content.needsDownload ? [item] : []
        guard !files.isEmpty else { return }
        try store.write { try $0.requestDownload(files.map(\.ino)) }
        if item.kind == .file { downloads.start(item) } else { maintenanceSignal.yield() }
    }

    /// Removes cache files that hold nothing this device shows: the partial content of a
    /// placeholder whose download the last run did not finish (received ranges are known in
    /// memory only, so it would be fetched again from the start anyway), and files of items
    /// that are gone. They were invisible to the cache size and its limit. Call it before the
    /// mount serves: nothing may be open or downloading.
    public func dropLeftoverContent() {
        let inos = cache.cachedInodes()
        // One read for them all: a mount that keeps tens of thousands of files starts this way.
        let unused: [Int64]
        do {
            unused = try store.read { r in
                try inos.filter { ino in try r.item(ino).map { $0.kind == .file && $0.content == .placeholder } ?? true }
            }
        } catch {
            return  // unsure: keep them all
        }
        for ino in unused where !openFiles.isOpen(ino) && downloads.progress(ino) == nil { cache.remove(ino) }
    }

    /// How many downloads the background (pinned files, folders asked for) keeps running at once.
    static let backgroundDownloads = 4

    /// Starts requested and pinned downloads while fewer than `backgroundDownloads` run; each
    /// one that ends signals the maintenance pass, which calls this again. Not while offline:
    /// a download then fails at once, and its end would ask for the next try ten times a
    /// second; the connection's return asks for a pass.
    func startWantedDownloads() {
        guard isConnected else { return }
        var free = Self.backgroundDownloads - downloads.activeCount
        func startSome(_ items: [LocalItem]) {
            // A stale copy open for writing is not replaced under its writer: its start would
            // end at once and ask for the next pass, again and again, until the writer closes.
            for item in items where free > 0 && downloads.progress(item.ino) == nil && !openFiles.isOpenForWriting(item.ino) && downloads.retryIsDue(item) {
                downloads.start(item)
                free -= 1
            }
        }
        guard free > 0 else { return }
        // Running ones (and files open for writing, and those pausing after a failure) are
        // still in the answer: ask for more than the free slots.
        startSome((try? store.read { try $0.requestedNeedingContent(limit: 64 + downloads.pausedRetries) }) ?? [])
        guard free > 0, let pinned = try? store.read({ try $0.pinnedNeedingContent() }) else { return }
        startSome(pinned)
    }

    /// Drops a file's local content (a write that failed for lack of space) and shows the
    /// server's last version again, as a placeholder. Only for items the server has.
    public func revertToServerVersion(_ ino: Int64) {
        guard let item = try? store.read({ try $0.item(ino) }), item.revision != nil, !openFiles.isOpen(ino) else { return }
        downloads.cancel(ino)
        cache.remove(ino)
        try? store.write { w in
            guard var row = try w.reader.item(ino) else { return }
            row.content = .placeholder
            row.cachedBytes = 0
            // The failed version is gone: nothing of it waits to go up any more.
            row.uploadError = nil
            try w.dropOps(for: ino)
            try w.update(row)
        }
        // The space is back: the reserve too, before the next writer fills the volume again.
        cache.ensureReserve()
        let remote = self.remote
        Task {
            // The size and time the server has for the version shown again.
            guard let current = try? await remote.item(item.itemID) else { return }
            try? self.store.write { w in
                guard var row = try w.reader.item(ino), row.content == .placeholder else { return }
                row.size = current.size
                row.modified = current.modified
                row.serverDigest = current.digest
                row.takeRevision(of: current)
                try w.update(row)
            }
            self.observer.invalidate([.inode(ino)])
        }
        observer.invalidate([.inode(ino)])
        observer.event(MountEvent(.error, path: try? store.read { try $0.path(of: ino) }, detail: "the disk is full; the last version on the server is shown again"))
    }

    func runMaintenance() async {
        cache.ensureReserve()
        saveAccessTimes()
        // Folders asked for and pinned items: download what is missing, a few at a time.
        startWantedDownloads()
        guard let limit = configuration.cacheLimit else { return }
        do {
            var used = try store.read { try $0.cachedBytesTotal() }
            guard used > limit else { return }
            for candidate in try store.read({ try $0.evictionCandidates(limit: 1000) }) {
                if used <= limit { break }
                if downloads.progress(candidate.ino) != nil { continue }
                do {
                    try evict(candidate.ino)
                    used -= candidate.cachedBytes
                    observer.event(MountEvent(.evicted, path: try store.read { try $0.path(of: candidate.ino) }))
                } catch {
                    continue
                }
            }
        } catch {
            logger.error("cache limit check failed", metadata: ["error": "\(error)"])
        }
    }
}

struct MaintenanceService: Service {
    let engine: SyncEngine
    static let pause: Duration = .milliseconds(100)
    func run() async throws {
        await cancelWhenGracefulShutdown {
            for await _ in engine.maintenanceSignals {
                await engine.runMaintenance()
                // At most ten passes a second: every close asks for one, and a `cp -r` of small
                // files closes hundreds a second. What they ask for meanwhile is one more pass.
                try? await Task.sleep(for: Self.pause)
            }
        }
        engine.saveAccessTimes()
    }
}
