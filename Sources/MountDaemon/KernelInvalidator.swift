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
    let logger: Logger

    init(events: EventFanOut, listings: FolderListings, logger: Logger, notifier: @escaping @Sendable () -> KernelNotifier?) {
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

    func event(_ event: MountEvent) { events.publish(event) }

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
final class EventFanOut: Sendable {
    let listeners = Mutex<[Int: AsyncStream<MountEvent>.Continuation]>([:])
    let counter = Mutex(0)

    func subscribe() -> (AsyncStream<MountEvent>, @Sendable () -> Void) {
        let (stream, continuation) = AsyncStream<MountEvent>.makeStream(bufferingPolicy: .bufferingNewest(1000))
        let id = counter.withLock { c in c += 1; return c }
        listeners.withLock { $0[id] = continuation }
        return (stream, { [weak self] in
            self?.listeners.withLock { _ = $0.removeValue(forKey: id) }
            continuation.finish()
        })
    }

    /// Never waits: a listener that reads too slowly loses the oldest of its unread events.
    func publish(_ event: MountEvent) {
        for c in listeners.withLock({ Array($0.values) }) { c.yield(event) }
    }

    /// Ends every listener's stream: the mount is gone, and so a `ubiq monitor` learns it (and
    /// the control server has no open response left to wait for as it stops).
    func finishAll() {
        for c in listeners.withLock({ l in defer { l.removeAll() }; return Array(l.values) }) { c.finish() }
    }
}

import Synchronization
