import FuseKit
import Logging
import ServiceLifecycle
import SyncEngine

/// Delivers the engine's invalidations to the kernel from its own task: never inside a FUSE
/// request and never under a lock a request needs (a notification can wait for the very
/// request being served). Also fans mount events out to `ubiq monitor` listeners.
final class KernelInvalidator: MountObserver, Service {
    let invalidations: AsyncStream<[KernelInvalidation]>
    let sink: AsyncStream<[KernelInvalidation]>.Continuation
    let events: EventFanOut
    let notifier: @Sendable () -> KernelNotifier?
    let logger: Logger

    init(events: EventFanOut, logger: Logger, notifier: @escaping @Sendable () -> KernelNotifier?) {
        (invalidations, sink) = AsyncStream.makeStream()
        self.events = events
        self.notifier = notifier
        self.logger = logger
    }

    func invalidate(_ invalidations: [KernelInvalidation]) {
        listings.withLock { l in
            l.sequence += 1
            for case .entry(let parent, _) in invalidations { l.changed[parent] = l.sequence }
            for case .inode(let ino) in invalidations { l.changed[ino] = l.sequence }
        }
        sink.yield(invalidations)
    }

    // MARK: Cached listings
    //
    // The kernel keeps a folder's listing once a reader has gone through it to the end. The
    // daemon answers that reader from a snapshot taken at its first read; a change made between
    // the snapshot and the end of the listing would be invalidated before the kernel has the
    // (old) listing cached, and the old listing would then stay. So each listing remembers when
    // its snapshot was taken, and a listing that reaches its end after a change to its folder
    // drops the kernel's copy once more, after the end has been answered.

    struct Listings {
        var sequence: UInt64 = 0
        /// The sequence number of the last change to each folder.
        var changed: [Int64: UInt64] = [:]
        /// Listings under way: their folder and the sequence number before their snapshot.
        var open: [UInt64: (folder: Int64, since: UInt64)] = [:]
    }

    let listings = Mutex(Listings())

    /// Called just before a listing's snapshot is taken.
    func listingStarted(_ handle: UInt64, folder: Int64) {
        listings.withLock { $0.open[handle] = (folder, $0.sequence) }
    }

    /// After the end of a listing was answered: drops the kernel's copy if it may be old.
    func listingEnded(_ handle: UInt64) {
        let stale = listings.withLock { l -> Int64? in
            guard let (folder, since) = l.open[handle], l.changed[folder, default: 0] > since else { return nil }
            return folder
        }
        // Not through `invalidate`: this is no new change, and must not mark other listings.
        if let stale { sink.yield([.inode(stale)]) }
    }

    func listingClosed(_ handle: UInt64) {
        _ = listings.withLock { $0.open.removeValue(forKey: handle) }
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
                for item in Set(batch) {
                    // -ENOENT means the kernel had nothing cached: harmless.
                    switch item {
                    case .entry(let parent, let name):
                        _ = notifier.invalidateEntry(parent: UInt64(parent), name: Array(name.utf8))
                        inodes.insert(parent)
                    case .inode(let ino): inodes.insert(ino)
                    }
                }
                for ino in inodes { _ = notifier.invalidateInode(UInt64(ino)) }
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

    func publish(_ event: MountEvent) {
        for c in listeners.withLock({ Array($0.values) }) { c.yield(event) }
    }
}

import Synchronization
