import FuseKit
import ItemModel
import Logging
import ServiceLifecycle
import SyncEngine
import VFS

/// Delivers the engine's invalidations to the kernel from its own task: never inside a FUSE
/// request and never under a lock a request needs (a notification can wait for the very
/// request being served). Also fans mount events out to `ubiq monitor` listeners.
final class KernelInvalidator: MountObserver, Service {
    let invalidations: AsyncStream<[KernelInvalidation]>
    let sink: AsyncStream<[KernelInvalidation]>.Continuation
    let events: EventFanOut
    let notifier: @Sendable () -> KernelNotifier?
    let listings: FolderListings
    let metrics: MountMetrics
    let logger: Logger

    init(events: EventFanOut, listings: FolderListings, metrics: MountMetrics, logger: Logger, notifier: @escaping @Sendable () -> KernelNotifier?) {
        self.metrics = metrics
        (invalidations, sink) = AsyncStream.makeStream()
        self.events = events
        self.listings = listings
        self.notifier = notifier
        self.logger = logger
    }

    func invalidate(_ invalidations: [KernelInvalidation]) {
        // A name that changed changes its folder's listing: the folder's mtime moves with it.
        let folders = invalidations.compactMap { if case .entry(let parent, _) = $0 { parent } else { nil } }
        listings.entriesChanged(in: folders, at: WallClock.now())
        sink.yield(invalidations)
    }

    func event(_ event: MountEvent, keep: Bool) {
        metrics.event(event)
        // Checked first: the metadata is not built for a line the level leaves out.
        if let level = Self.logLevel(of: event.kind), logger.logLevel <= level {
            var metadata: Logger.Metadata = ["event": "\(event.kind.rawValue)"]
            if let path = event.path { metadata["path"] = "\(path)" }
            if let from = event.from { metadata["from"] = "\(from)" }
            if let detail = event.detail { metadata["detail"] = "\(detail)" }
            logger.log(level: level, "mount event", metadata: metadata)
        }
        events.publish(event, keep: keep)
    }

    /// What goes into the log: each failed transfer, conflict, settled clash, error, change of
    /// connection and of account is one line; the ordinary flow of changes only at debug.
    static func logLevel(of kind: MountEventKind) -> Logger.Level? {
        switch kind {
        case .uploadFailed, .downloadFailed, .error, .accountChange: .warning
        case .conflictAppeared, .conflictResolved, .reconciled, .online, .offline: .notice
        case .created, .changed, .renamed, .deleted, .uploadStarted, .uploaded, .downloadStarted, .downloaded, .evicted: .debug
        case .uploadProgress, .downloadProgress: nil
        }
    }

    func run() async throws {
        await cancelWhenGracefulShutdown {
            for await batch in self.invalidations {
                guard let notifier = self.notifier() else { continue }
                // A name that changed changes its folder's listing, which the kernel caches in
                // the folder's pages: those go too. `inval_entry` alone is not enough, since the
                // kernel counts a folder as changed only when it had a dentry for that name,
                // and a name another device just created has none.
                var inodes = Set<Int64>()
                var attributesOnly = Set<Int64>()
                for item in Set(batch) {
                    // -ENOENT means the kernel had nothing cached: harmless.
                    switch item {
                    case .entry(let parent, let name):
                        _ = notifier.invalidateEntry(parent: UInt64(parent), name: Array(name.utf8))
                        inodes.insert(parent)
                    case .inode(let ino): inodes.insert(ino)
                    case .attributes(let ino): attributesOnly.insert(ino)
                    }
                }
                for ino in inodes { _ = notifier.invalidateInode(UInt64(ino)) }
                for ino in attributesOnly.subtracting(inodes) { _ = notifier.invalidateAttributes(UInt64(ino)) }
            }
        }
    }
}

/// Mount events for any number of listeners (each `ubiq monitor`).
typealias EventFanOut = FanOut<MountEvent>
