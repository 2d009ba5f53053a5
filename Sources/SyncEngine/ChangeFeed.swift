import Foundation
import ItemModel
import LocalState
import Logging
import ServiceLifecycle
import SyncAPI

extension SyncEngine {
    /// Follows the server's push stream for as long as the mount runs, reconnecting with its
    /// last cursor when the stream ends (server restarted, network gone).
    public var changeFeed: some Service { ChangeFeedService(engine: self) }

    /// Applies one remote change in one transaction with the cursor that follows it, and
    /// returns what the kernel must forget.
    func apply(_ change: ItemChange) throws -> [KernelInvalidation] {
        // Most live changes are the echoes of this device's own uploads, already applied from
        // the answers: skip the write transaction (one per uploaded file). The cursor is then
        // not saved until the next real change; after a restart the few echoes since come
        // again, and are skipped again.
        if try store.read({ try isEcho(change, $0) }) {
            state.withLock { $0.cursor = change.cursor }
            return []
        }
        return try apply([change], cursor: change.cursor)
    }

    /// The server's state of an item this device holds at that revision or a newer one.
    func isEcho(_ change: ItemChange, _ r: LocalReader) throws -> Bool {
        let remote = change.item
        guard change.kind == .upsert, !remote.deleted, remote.id != .root,
              let local = try r.item(id: remote.id), let held = local.revision
        else { return false }
        return !remote.revision.isNewer(than: held)
    }

    /// Applies a page of changes in one transaction (one fsync for a thousand items on the
    /// first sync of a large container, instead of one each), and records `cursor` as reached
    /// (nil: a change held back earlier, behind the cursor already).
    /// `releasing`: the item whose held change (`held_changes`) this is; its row goes in the
    /// same transaction (and comes back if the item still waits for an answer).
    func apply(_ changes: [ItemChange], cursor: ChangeCursor?, releasing held: ItemID? = nil) throws -> [KernelInvalidation] {
        let effects = try store.write { w -> EffectsAfterCommit in
            var effects = EffectsAfterCommit()
            if let held { try w.dropHeldChange(held) }
            var batch = FeedBatch()
            try w.countingInserts {
                for change in changes { try applyLocked(change, w, &effects, &batch) }
                try batch.insertWaiting(w)
            }
            if let cursor { try w.setMeta("cursor", cursor.rawValue) }
            return effects
        }
        if let cursor { state.withLock { $0.cursor = cursor } }
        runAfterCommit(effects)
        // A change held because it would have looped the folders may fit now. Not from a held
        // change's own application (`held`): that is such a retry already.
        if held == nil, state.withLock({ s in defer { s.heldForLoops = false }; return s.heldForLoops }) {
            applyHeldChanges()
        }
        return effects.invalidations
    }

    /// Applies the server change held for the item at `ino` (`held_changes`): once an answer
    /// to its own change is recorded, or at the last close of a file that was open for writing
    /// when the change arrived. Unless the item is as new by then, or another change of it
    /// still waits for its answer (then it stays held). Without the close's, a writer that
    /// closed without writing left the device on the old version for good: the feed had moved
    /// past the change. (After a write, the upload goes up with its base revision and its
    /// answer settles the item.)
    ///
    /// `afterTheFeed`: looked up in a write transaction, which waits for a feed transaction
    /// under way. The close of a writer needs it: the feed decides to hold a change for the
    /// writers in memory, inside its transaction, and a close that read the index before that
    /// transaction committed found nothing held, and the change stayed held for good (the
    /// random run saw a move of another device never show). The outbox's answers need not:
    /// the feed decides those by the queue, in the database, where transactions take turns.
    func applyHeldChange(of ino: Int64, afterTheFeed: Bool = false) {
        func lookUp(_ r: LocalReader) throws -> (ItemID, Data)? {
            guard let item = try r.item(ino), let held = try r.heldChange(of: item.itemID) else { return nil }
            return (item.itemID, held.json)
        }
        do {
            guard let (id, json) = try afterTheFeed ? store.write({ try lookUp($0.reader) }) : store.read(lookUp) else { return }
            let change = try JSONDecoder().decode(ItemChange.self, from: json)
            let invalidations = try apply([change], cursor: nil, releasing: id)
            if !invalidations.isEmpty { observer.invalidate(invalidations) }
        } catch {
            logger.error("cannot apply a change held for an answer", metadata: ["item.ino": "\(ino)", "error": "\(error)"])
        }
    }

    /// At start: the held changes of items whose answers were recorded before a stop.
    /// `onlySettled`: only the items that nothing holds any more (no change of theirs queued,
    /// no writer): a safety net after each pass of the outbox, for a release that a path
    /// without its own call missed (an entry sent on behalf of another, as a folder's create
    /// for its child's upload), so that no change stays held for good.
    func applyHeldChanges(onlySettled: Bool = false) {
        do {
            let inos = try store.read { r in try r.itemsWithHeldChanges().compactMap { id -> Int64? in
                // Gone here: nothing to apply it to (its deletion's echo would drop it).
                guard let item = try r.item(id: id) else { return nil }
                if onlySettled, try r.pendingOps(for: item.ino) > 0 || item.content == .dirty || openFiles.isOpenForWriting(item.ino) { return nil }
                return item.ino
            } }
            for ino in inos { applyHeldChange(of: ino) }
        } catch {
            logger.error("cannot read the changes held for answers", metadata: ["error": "\(error)"])
        }
    }

    /// The cursor of the last change applied or skipped (the stored one may be older: skipped
    /// echoes do not write it).
    public var appliedCursor: ChangeCursor? { (try? lastCursor()) ?? nil }

    /// The last cursor seen, else the stored one; nil before the first sync.
    func lastCursor() throws -> ChangeCursor? {
        if let c = state.withLock({ $0.cursor }) { return c }
        return try store.read { try $0.meta("cursor") }.map(ChangeCursor.init(_:))
    }

    /// Catches up with pages of the change log, then returns the cursor to stream from. The
    /// next page is on its way while this one goes into the index: the server's part and the
    /// mount's overlap, on a first sync of a large container most of all.
    func catchUp(from start: ChangeCursor) async throws -> ChangeCursor {
        var cursor = start
        var prefetched: Task<ChangePage, any Error>?
        defer { prefetched?.cancel() }
        while true {
            let page: ChangePage
            do {
                if let next = prefetched {
                    prefetched = nil
                    page = try await next.value
                } else {
                    page = try await remote.changes(since: cursor, limit: Self.catchUpPage)
                }
            } catch RemoteError.refused(let code, _, _) where code == .invalidCursor && cursor != .start {
                // The server does not know our cursor (restored, or another server): start over
                // from a full snapshot.
                logger.notice("the server does not know our cursor; resyncing", metadata: ["cursor": "\(cursor)"])
                cursor = .start
                continue
            }
            if page.hasMore {
                prefetched = Task { [remote] in try await remote.changes(since: page.cursor, limit: Self.catchUpPage) }
            }
            if !page.changes.isEmpty {
                let inval = try apply(page.changes, cursor: page.cursor)
                if !inval.isEmpty { observer.invalidate(inval) }
            }
            cursor = page.cursor
            if page.changes.isEmpty { state.withLock { $0.cursor = cursor } }
            if !page.hasMore {
                if try store.read({ try $0.meta(Self.wholeTreeMeta) }) == nil {
                    try store.write { w in try w.setMeta(Self.wholeTreeMeta, "1") }
                }
                return cursor
            }
        }
    }

    /// Changes per page of a catch-up: a page is one transaction here.
    static let catchUpPage = 2000

    /// One change, inside the caller's transaction; what it asks of the world outside the
    /// database goes into `effects`, done once the transaction has committed.
    func applyLocked(_ change: ItemChange, _ w: LocalWriter, _ effects: inout EffectsAfterCommit) throws {
        var batch = FeedBatch()
        try applyLocked(change, w, &effects, &batch)
        try batch.insertWaiting(w)
    }

    /// `batch`: what this transaction has learned of the index so far (see `FeedBatch`).
    func applyLocked(_ change: ItemChange, _ w: LocalWriter, _ effects: inout EffectsAfterCommit, _ batch: inout FeedBatch) throws {
        let remote = change.item
        let r = w.reader
        if remote.id == .root {
            guard var root = try r.item(LocalItem.rootIno) else { return }
            root.takeRevision(of: remote)
            root.xattrs = remote.xattrs
            try w.update(root)
            effects.invalidations.append(.inode(LocalItem.rootIno))
            return
        }
        // A new file of this batch not inserted yet is inserted before anything reads or
        // changes the index beyond the lookups of new items (see `FeedBatch.wait`).
        if batch.isWaiting(id: remote.id) { try batch.insertWaiting(w) }
        let local = try r.item(id: remote.id)
        // What changes an item already here may change paths (a rename, a move, a deletion).
        if local != nil {
            try batch.insertWaiting(w)
            batch.forgetTree()
        }
        if change.kind == .delete || remote.deleted {
            if try batch.mayHold(.orphans, r) { try w.removeOrphan(remote.id) }
            try w.dropHeldChange(remote.id)
            if try batch.mayHold(.tombstones, r) { try w.removeTombstone(remote.id) }
            guard let local else { return }
            if try hasLocalChanges(local, r) {
                // Edit versus delete: the edit wins. The server's id is gone for good, so the
                // item gets a new one and goes up again as new.
                trace("feed: deleted on the server, changed here: kept as new", ino: local.ino, r)
                try resurrect(local, w, &effects)
                effects.events.append(MountEvent(.reconciled, path: try r.path(of: local.ino), detail: "deleted on the server while changed here; kept"))
                return
            }
            // Open for writing: what the writer writes before its close is an edit, and an edit
            // wins over a deletion. Deleted now, the writes would go to an item the index no
            // longer holds, and be lost once the writer closed. Held until the last writer
            // closes, then applied: kept if written, else deleted.
            if openFiles.holdForWriters(local.ino) {
                trace("feed: deleted on the server: held for the writers", ino: local.ino, r)
                try w.holdChange(remote.id, revision: remote.revision, json: try JSONEncoder().encode(change))
                return
            }
            trace("feed: deleted on the server: deleted here", ino: local.ino, r)
            let path = try deleteHere(local, w, &effects)
            effects.events.append(MountEvent(.deleted, path: path))
            return
        }
        // Deleted here, and the deletion is still on its way: the server's state must not bring
        // it back (nor push a new local item of the same name aside). It is held: should the
        // deletion be refused, the item comes back from the refusal's state, which may be older
        // than this (`OutboxDispatch.sendDelete`).
        if local == nil, try batch.mayHold(.queuedDeletes, r), try r.hasPendingDelete(of: remote.id) {
            if try r.heldChange(of: remote.id).map({ remote.revision.isNewer(than: $0.revision) }) ?? true {
                try w.holdChange(remote.id, revision: remote.revision, json: try JSONEncoder().encode(change))
            }
            return
        }
        if local == nil, try batch.mayHold(.tombstones, r), let gone = try r.tombstone(of: remote.id), !remote.revision.isNewer(than: gone) { return }
        guard let parentID = remote.parentID, let parent = try batch.folderPlace(id: parentID, r) else {
            // The parent has not arrived yet; it will (the log holds its latest state).
            try w.addOrphan(remote.id, parent: remote.parentID ?? .root, json: try JSONEncoder().encode(change))
            batch.added(.orphans)
            return
        }
        if try batch.mayHold(.orphans, r) { try w.removeOrphan(remote.id) }
        if var local {
            // Our own requests' answers can overtake their echoes on the push stream: a state
            // older than what we hold must not undo what we did since.
            if let held = local.revision, !remote.revision.isNewer(than: held) {
                trace("feed: r\(remote.revision) not newer than r\(held): skipped", ino: local.ino, r)
                return
            }
            // Local changes not yet sent: they carry their base revision, and the server's
            // answer (success, or a conflict holding its state) settles the item then. But an
            // answer made before this change does not hold it: kept until the answer is
            // recorded, then applied if newer (`applyHeldChange`).
            func hold() throws {
                if try r.heldChange(of: remote.id).map({ remote.revision.isNewer(than: $0.revision) }) ?? true {
                    try w.holdChange(remote.id, revision: remote.revision, json: try JSONEncoder().encode(change))
                }
            }
            if try r.pendingOps(for: local.ino) > 0 || local.content == .dirty {
                trace("feed: r\(remote.revision) \(Self.short(remote.digest)): held for the answers (\(local.content))", ino: local.ino, r)
                return try hold()
            }
            // Open for writing: a write may come, and its upload (on this base) would then meet
            // this change as a conflict. Held until the last writer closes; in the index, so
            // that a daemon that dies with the file open applies it at its next start
            // (`applyHeldChanges`) instead of forgetting it.
            if openFiles.holdForWriters(local.ino) {
                trace("feed: r\(remote.revision) \(Self.short(remote.digest)): held for the writers", ino: local.ino, r)
                return try hold()
            }
            // Into a folder that a move here, not yet on the server, put below this item (this
            // device moved `y` into `x` while another moved `x` into `y`): applied, both would
            // leave the tree, and every walk up from them would never end. Held: the server
            // refuses that move as a cycle, the outbox then gives the moved item back its
            // server folder, and applies what is held (`keepServerFolder`). Or the feed brings
            // the other folder's own move out later (a catch-up lists each item once, at its
            // latest change): held changes are tried again after each later batch (`apply`).
            if try r.isWithin(parent.ino, local.ino) {
                state.withLock { $0.heldForLoops = true }
                return try hold()
            }
            // Anything held of it is older than this.
            try w.dropHeldChange(remote.id)
            let oldParent = local.parent, oldName = local.name
            let oldPath = try r.path(of: local.ino), hadConflicts = !local.conflicts.isEmpty
            let attributesChanged = remote.size != local.size || remote.mode != local.mode
                || remote.modified != local.modified || remote.xattrs != local.xattrs
            if (oldParent != parent.ino || oldName != remote.name), let clash = try r.child(of: parent.ino, named: remote.name), clash.ino != local.ino {
                try makeRoom(for: clash, w, &effects)
                effects.invalidations.append(.entry(parent: parent.ino, name: remote.name))
            }
            let contentChanged = remote.digest != local.serverDigest
            local.parent = parent.ino
            local.name = remote.name
            local.size = remote.size
            local.mode = remote.mode
            local.created = remote.created
            local.modified = remote.modified
            local.changed = Self.now()
            local.xattrs = remote.xattrs
            local.takeRevision(of: remote)
            local.serverDigest = remote.digest
            if contentChanged && local.kind == .file { contentReplaced(&local, by: remote.digest, &effects) }
            try w.update(local)
            trace("feed: r\(remote.revision) \(Self.short(remote.digest)) applied (\(local.content))", ino: local.ino, r)
            if oldParent != local.parent || oldName != local.name, let oldParent {
                effects.invalidations.append(.entry(parent: oldParent, name: oldName))
                effects.invalidations.append(.inode(oldParent))
                effects.invalidations.append(.inode(parent.ino))
            }
            effects.invalidations.append(.entry(parent: parent.ino, name: remote.name))
            effects.invalidations.append(.inode(local.ino))
            let path = try r.path(of: local.ino)
            if path != oldPath { effects.events.append(MountEvent(.renamed, path: path, from: oldPath)) }
            if contentChanged || attributesChanged { effects.events.append(MountEvent(.changed, path: path)) }
            try noteConflicts(of: local, hadConflicts: hadConflicts, r, &effects)
            if local.pinned && contentChanged { effects.fetchPinned = true }
        } else {
            if batch.isWaiting(parent: parent.ino, name: remote.name) { try batch.insertWaiting(w) }
            if let clash = try r.child(of: parent.ino, named: remote.name) {
                try makeRoom(for: clash, w, &effects)
                batch.forgetTree()
            }
            let new = LocalItem(
                itemID: remote.id, parent: parent.ino, name: remote.name, kind: remote.kind, size: remote.size,
                mode: remote.mode, uid: getuid(), gid: getgid(), created: remote.created, modified: remote.modified,
                changed: Self.now(), xattrs: remote.xattrs, revision: remote.revision, serverDigest: remote.digest,
                content: remote.kind == .file ? .placeholder : .current, pinned: parent.pinned, conflicts: remote.conflicts,
                target: remote.target)
            effects.invalidations.append(.entry(parent: parent.ino, name: remote.name))
            effects.invalidations.append(.inode(parent.ino))
            let path = try batch.path(of: parent.ino, r).map { $0 == "/" ? "/" + remote.name : $0 + "/" + remote.name }
            effects.events.append(MountEvent(.created, path: path))
            if new.pinned { effects.fetchPinned = true }
            // A file, nobody's folder, without conflicts (whose events name its row): inserted
            // with others of the batch, many rows a statement.
            guard new.kind != .file || !new.conflicts.isEmpty else { return batch.wait(new) }
            let item = try w.insert(new)
            if item.kind == .folder {
                batch.know((ino: item.ino, pinned: item.pinned), of: item.itemID)
                if let path { batch.know(path, of: item.ino) }
            }
            try noteConflicts(of: item, hadConflicts: false, r, &effects)
            // Children that arrived before this folder.
            for json in try batch.mayHold(.orphans, r) ? r.orphans(of: remote.id) : [] {
                let orphan = try JSONDecoder().decode(ItemChange.self, from: json)
                try applyLocked(orphan, w, &effects, &batch)
            }
        }
    }

    /// True when the item (or, for a folder, anything below it) has changes not on the server.
    func hasLocalChanges(_ item: LocalItem, _ r: LocalReader) throws -> Bool {
        if try r.pendingOps(for: item.ino) > 0 || item.content == .dirty { return true }
        guard item.kind == .folder else { return false }
        return try r.descendants(of: item.ino).contains { try r.pendingOps(for: $0.ino) > 0 || $0.content == .dirty }
    }

    func resurrect(_ item: LocalItem, _ w: LocalWriter, _ effects: inout EffectsAfterCommit) throws {
        var item = item
        item.itemID = .random()
        item.revision = nil
        try w.update(item)
        // The new identity has sent nothing yet: what the old one's creates sent is not its.
        try w.forgetSentContents(of: item.ino)
        try w.enqueue(item.kind == .file ? .content : .create, ino: item.ino)
        effects.sendQueued = true
    }

    /// Removes an item and what is below it from the index, inside the caller's transaction,
    /// with their cache files and the kernel's names and pages of them after the commit;
    /// returns the path it had.
    func deleteHere(_ local: LocalItem, _ w: LocalWriter, _ effects: inout EffectsAfterCommit) throws -> String? {
        effects.dropContent += try w.reader.descendants(of: local.ino).map(\.ino) + [local.ino]
        let path = try w.reader.path(of: local.ino)
        try deleteSubtree(local.ino, w)
        if let parent = local.parent { effects.invalidations += [.entry(parent: parent, name: local.name), .inode(parent)] }
        effects.invalidations.append(.inode(local.ino))
        return path
    }

    func deleteSubtree(_ ino: Int64, _ w: LocalWriter) throws {
        for child in try w.reader.children(of: ino) { try deleteSubtree(child.ino, w) }
        try w.dropOps(for: ino)
        try w.delete(ino)
    }

    /// A remote item takes a name that a local item holds.
    ///
    /// A local item with changes the server has not seen keeps them under a conflicted-copy
    /// name. So does one open for writing: its own change (a rename away, a delete) waits for
    /// the writer's close, and if the writer writes, the item stays (an edit wins over a
    /// deletion) under a name a person can read. A clean one is only in the way because its own
    /// later change is still ahead in this catch-up: the compacted log lists every item changed
    /// after our cursor by its latest change, so that change is guaranteed to come and settle
    /// its name.
    func makeRoom(for clash: LocalItem, _ w: LocalWriter, _ effects: inout EffectsAfterCommit) throws {
        var moved = clash
        let unsent = try clash.revision == nil || w.reader.pendingOps(for: clash.ino) > 0
        if unsent || openFiles.isOpenForWriting(clash.ino) {
            moved.name = ConflictNaming.conflictedCopyName(clash.name, device: configuration.deviceName, at: Self.now())
            if unsent {
                if clash.revision != nil { try w.enqueue(.move, ino: clash.ino) }
                effects.sendQueued = true
            }
        } else {
            moved.name = ConflictNaming.movingName(clash.itemID)
        }
        try w.update(moved)
    }
}

struct ChangeFeedService: Service {
    let engine: SyncEngine

    func run() async throws {
        var backoff: Duration = .milliseconds(200)
        while !Task.isCancelledOrShuttingDown {
            do {
                // Another container's changes mean nothing here: wait (the status says why),
                // and look again, in case the right server comes back.
                guard try await engine.checkContainer() else {
                    try? await Task.sleep(for: .seconds(5))
                    continue
                }
                // The last cursor seen (skipped echoes do not store theirs), else the stored one.
                let stored = try engine.lastCursor() ?? .start
                let cursor = try await engine.catchUp(from: stored)
                engine.setConnected(true, error: nil)
                let stream = engine.remote.changeStream(since: cursor)
                let engine = self.engine
                let connected = try await cancelWhenGracefulShutdown { () async throws -> Bool in
                    var connected = false
                    for try await event in stream {
                        // Found to be another container (by the outbox): stop applying.
                        if engine.state.withLock({ $0.foreignContainer != nil }) { break }
                        switch event {
                        case .change(let change):
                            let inval = try engine.apply(change)
                            if !inval.isEmpty { engine.observer.invalidate(inval) }
                        case .ready:
                            engine.setConnected(true, error: nil)
                            connected = true
                        case .keyValues(let version):
                            try await engine.followKeyValues(to: version)
                        }
                    }
                    return connected
                }
                if connected { backoff = .milliseconds(200) }
                engine.setConnected(false, error: "the push stream ended")
            } catch is CancellationError {
                return
            } catch let error as RemoteError {
                engine.setConnected(false, error: describe(error))
            } catch {
                engine.logger.error("change feed failed", metadata: ["error": "\(error)"])
                engine.setConnected(false, error: "\(error)")
            }
            guard !Task.isCancelledOrShuttingDown else { return }
            try? await Task.sleep(for: backoff)
            backoff = min(backoff * 2, .seconds(2))
        }
    }
}

extension Task where Success == Never, Failure == Never {
    static var isCancelledOrShuttingDown: Bool { Task.isCancelled || Task.isShuttingDownGracefully }
}

extension SyncEngine {
    /// The server has other content for a row whose own is not newer: a cached copy becomes
    /// stale (read afresh on the next open), and a download of the old version stops. The
    /// caller sets the row's size and digest to the server's.
    func contentReplaced(_ local: inout LocalItem, by digest: ContentDigest?, _ effects: inout EffectsAfterCommit) {
        switch local.content {
        case .current: local.content = .stale
        case .placeholder, .stale:
            // A download of the old version may be running: it is of no use now.
            effects.cancelDownloads.append((local.ino, keeping: digest))
        case .dirty: break
        }
    }

    /// A row takes the server's content (`current`, an answer to one of its own requests):
    /// digest and size, and the modification time unless a local one is on its way
    /// (`keepModified`, asked only when the content changed: most answers leave it as it was).
    /// Not for a row with local content (dirty): that content is newer.
    func takeServerContent(
        _ item: inout LocalItem, from current: ItemMetadata, keepModified: @autoclosure () throws -> Bool, _ effects: inout EffectsAfterCommit
    ) rethrows {
        guard item.content != .dirty else { return }
        if item.kind == .file && current.digest != item.serverDigest {
            contentReplaced(&item, by: current.digest, &effects)
            item.size = current.size
            if try !keepModified() { item.modified = current.modified }
        }
        item.serverDigest = current.digest
    }
}

/// What one transaction applying server changes has learned of the index, so that each change
/// need not ask again: a first sync applies thousands in one, and per change the lookups below
/// were a third of its time.
///
/// - The paths of folders read or made, for the events of the items that come into them, and
///   the places of folders by server ID, for the items that come into them (a hundred files
///   of one folder ask once). Forgotten at any change of an item already in the index (it may
///   rename, move, delete or give a new identity to a folder) and at any name made room for.
/// - Whether a side table the feed consults holds any row: an empty one (the usual case) needs
///   no lookup per change. Asked once each; only the orphans grow inside a feed transaction
///   (tombstones and queued deletions come from the outbox's and the file system's own).
struct FeedBatch {
    enum SideTable {
        case tombstones, queuedDeletes, orphans
    }

    private var known: [Int64: String] = [:]
    private var places: [ItemID: (ino: Int64, pinned: Bool)] = [:]
    private var waiting: [LocalItem] = []
    private var waitingIDs: Set<ItemID> = []
    private var waitingNames: Set<NameInFolder> = []

    struct NameInFolder: Hashable {
        let parent: Int64
        let name: String
    }
    private var nonEmpty: [SideTable: Bool] = [:]

    mutating func path(of folder: Int64, _ r: LocalReader) throws -> String? {
        if let path = known[folder] { return path }
        let path = try r.path(of: folder)
        if let path { known[folder] = path }
        return path
    }

    mutating func know(_ path: String, of folder: Int64) { known[folder] = path }

    /// Where the folder `id` is here; nil when it is not (its children wait as orphans). Only
    /// found places are kept: a folder missing now may arrive later in the same batch.
    mutating func folderPlace(id: ItemID, _ r: LocalReader) throws -> (ino: Int64, pinned: Bool)? {
        if let place = places[id] { return place }
        let place = try r.folderPlace(id: id)
        if let place { places[id] = place }
        return place
    }

    mutating func know(_ place: (ino: Int64, pinned: Bool), of folder: ItemID) { places[folder] = place }

    /// A new file, inserted later with the others waiting (`insertWaiting`): SQLite's work per
    /// insert statement (starting it, opening a cursor on every index, the triggers' programs)
    /// is shared by many rows. Until then the index does not hold it: a change of the same
    /// item, a new item of the same name in the same folder, and any change of an item already
    /// here insert the waiting files first; so does the batch's end.
    mutating func wait(_ file: LocalItem) {
        waiting.append(file)
        waitingIDs.insert(file.itemID)
        if let parent = file.parent { waitingNames.insert(NameInFolder(parent: parent, name: file.name)) }
    }

    func isWaiting(id: ItemID) -> Bool { waitingIDs.contains(id) }

    func isWaiting(parent: Int64, name: String) -> Bool { waitingNames.contains(NameInFolder(parent: parent, name: name)) }

    mutating func insertWaiting(_ w: LocalWriter) throws {
        guard !waiting.isEmpty else { return }
        try w.insert(waiting)
        waiting.removeAll(keepingCapacity: true)
        waitingIDs.removeAll(keepingCapacity: true)
        waitingNames.removeAll(keepingCapacity: true)
    }

    mutating func forgetTree() {
        known.removeAll()
        places.removeAll()
    }

    /// False only when the table is known to be empty.
    mutating func mayHold(_ table: SideTable, _ r: LocalReader) throws -> Bool {
        if let known = nonEmpty[table] { return known }
        let any = switch table {
        case .tombstones: try r.hasTombstones()
        case .queuedDeletes: try r.hasQueuedDeletes()
        case .orphans: try r.hasOrphans()
        }
        nonEmpty[table] = any
        return any
    }

    mutating func added(_ table: SideTable) { nonEmpty[table] = true }
}
