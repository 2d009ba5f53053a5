import Foundation
import ItemModel
import LocalState
import Logging
import ServiceLifecycle

/// Why an eviction was refused.
public enum EvictRefusal: Error, Sendable {
    /// The item has changes the server does not have yet.
    case unsentChanges
    /// The file is open.
    case inUse
}

extension SyncEngine {
    /// Keeps the cache within its limit and downloads pinned items, whenever something changes.
    public var maintenance: some Service { MaintenanceService(engine: self) }

    /// Drops the local content of a clean file, keeping its placeholder (`evictUbiquitousItem`).
    public func evict(_ ino: Int64) throws {
        let item = try store.read { try $0.item(ino) }
        guard let item else { throw EngineError.notFound }
        if item.kind == .folder {
            for child in try store.read({ try $0.children(of: ino) }) { try evict(child.ino) }
            return
        }
        let pending = try store.read { try $0.pendingOps(for: ino) }
        if item.content == .dirty || pending > 0 { throw EvictRefusal.unsentChanges }
        downloads.cancel(ino)
        try store.write { w in
            guard var now = try w.reader.item(ino), now.content != .dirty else { return }
            now.content = .placeholder
            now.cachedBytes = 0
            now.downloadError = nil
            try w.update(now)
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
    public func startDownload(_ ino: Int64) throws {
        guard let item = try store.read({ try $0.item(ino) }) else { throw EngineError.notFound }
        if item.kind == .folder {
            for child in try store.read({ try $0.children(of: ino) }) { try startDownload(child.ino) }
            return
        }
        if item.content == .placeholder || item.content == .partial || item.content == .stale {
            downloads.start(item)
        }
    }

    /// Makes sure the first bytes of a file can be read, starting its download: opening a
    /// placeholder that cannot be downloaded fails at once instead of hanging a later read.
    public func prepareForReading(_ item: LocalItem) async throws {
        guard item.kind == .file, item.content == .placeholder || item.content == .partial || item.content == .stale else { return }
        try await waitForContent(item, range: 0..<min(item.size, 4096))
    }

    /// Waits until `range` of the file's current server version is readable from its cache file.
    public func waitForContent(_ item: LocalItem, range: Range<Int64>) async throws {
        var item = item
        // A few rounds: a remote change may replace the version being fetched (its download is
        // then cancelled and the new one started).
        for _ in 0..<5 {
            do {
                try await downloads.wait(for: range, of: item)
            } catch EngineError.cancelled {
                guard let now = try store.read({ try $0.item(item.ino) }) else { throw EngineError.notFound }
                item = now
                continue
            }
            guard let now = try store.read({ try $0.item(item.ino) }) else { throw EngineError.notFound }
            if now.content == .current || now.content == .dirty { return }
            if let progress = downloads.progress(item.ino), now.serverDigest == item.serverDigest {
                // Waited on the running download of the current version: the range is here.
                _ = progress
                return
            }
            if now.content == .stale, now.serverDigest != item.serverDigest || downloads.progress(item.ino) == nil {
                item = now
                continue
            }
            if downloads.progress(item.ino) == nil {
                throw EngineError.offline(now.downloadError ?? "the download stopped")
            }
            return
        }
        throw EngineError.offline("the content kept changing while it was being downloaded")
    }

    func runMaintenance() async {
        // Pinned items: download what is missing, a few at a time.
        if let pinned = try? store.read({ try $0.pinnedNeedingContent() }) {
            for item in pinned.prefix(4) where downloads.progress(item.ino) == nil { downloads.start(item) }
        }
        guard let limit = configuration.cacheLimit else { return }
        do {
            var used = try store.read { try $0.cachedBytesTotal() }
            guard used > limit else { return }
            for candidate in try store.read({ try $0.evictionCandidates(limit: 1000) }) {
                if used <= limit { break }
                if isOpen(candidate.ino) || downloads.progress(candidate.ino) != nil { continue }
                do {
                    try evict(candidate.ino)
                    used -= candidate.cachedBytes
                    observer.event(MountEvent(kind: "evicted", path: try store.read { try $0.path(of: candidate.ino) }))
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
    func run() async throws {
        await cancelWhenGracefulShutdown {
            for await _ in engine.maintenanceSignals {
                await engine.runMaintenance()
            }
        }
    }
}
