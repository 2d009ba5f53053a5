import ItemModel

/// What applying server state asks of the world outside the database, collected while the
/// transaction runs and done by `runAfterCommit` once it has committed: a rollback cannot take
/// back an unlinked cache file or a cancelled download, and a service woken inside the
/// transaction reads the index as it was before it.
struct EffectsAfterCommit {
    var invalidations: [KernelInvalidation] = []
    var events: [MountEvent] = []
    /// Items gone from the index: their cache files go, and their downloads stop.
    var dropContent: [Int64] = []
    /// Downloads of versions the server has replaced, with the version it has now: a download
    /// of that one, started between the commit and these effects, goes on.
    var cancelDownloads: [(ino: Int64, keeping: ContentDigest?)] = []
    /// A pinned file needs its (new) content: the maintenance service fetches it.
    var fetchPinned = false
    /// Something was queued: the outbox sends it.
    var sendQueued = false
}

extension SyncEngine {
    /// The collected effects, in the order the transaction asked for them. Invalidations are
    /// the caller's: some hand them on, some deliver them with others.
    func runAfterCommit(_ effects: EffectsAfterCommit) {
        for ino in effects.dropContent {
            cache.remove(ino)
            downloads.cancel(ino)
        }
        for (ino, kept) in effects.cancelDownloads { downloads.cancel(ino, unlessItFetches: kept) }
        for e in effects.events { observer.event(e) }
        if effects.fetchPinned { maintenanceSignal.yield() }
        if effects.sendQueued { outboxSignal.yield() }
    }
}
