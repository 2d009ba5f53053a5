import ItemModel
import Synchronization

/// When the daemon last changed each folder's entries (a remote change, a conflicted copy),
/// so that the folder shows an mtime no older than that change.
///
/// The kernel keeps a folder's listing and checks it at the start of each listing against the
/// folder's mtime, which it asks for again once its attributes were invalidated (libfuse's
/// default `auto_inval_data`). Dropping the listing's pages is not enough on its own: an empty
/// listing has no page, and a listing answered from a snapshot older than a change can be
/// completed after that change's invalidation. A folder whose entries the daemon changed
/// shows, from then on, an mtime no older than that change (as a local folder would), and the
/// kernel starts that folder's listing afresh. Kept in memory: a new mount starts with no
/// cached listing.
public final class FolderListings: Sendable {
    let changes = Mutex<[Int64: Timestamp]>([:])

    public init() {}

    /// Each time strictly later than the last, so that two changes within one clock tick both
    /// move the time.
    public func entriesChanged(in folders: [Int64], at now: Timestamp) {
        guard !folders.isEmpty else { return }
        changes.withLock { changed in
            for folder in folders { changed[folder] = max(now, (changed[folder] ?? 0) + 1) }
        }
    }

    /// The mtime to show for a folder whose stored mtime is `stored`.
    func modified(_ ino: Int64, stored: Timestamp) -> Timestamp {
        max(stored, changes.withLock { $0[ino] } ?? stored)
    }
}
