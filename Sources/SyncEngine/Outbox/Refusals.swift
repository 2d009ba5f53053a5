import Foundation
import ItemModel
import LocalState
import SyncAPI

/// What the server refused and what then happens: a name taken, a lost create's ID taken, a
/// conflict of revisions, a move below itself, an item gone.
extension SyncEngine {
    /// A create refused because its item ID is taken: this device's earlier create of the item
    /// landed, its answer was lost (a crash, a dropped connection), and the item changed here
    /// since (renamed, or written), so the retry is not the same create and the server does
    /// not answer it with the item. IDs are random and only their creator sends them: the
    /// server's item is that create. The row takes its revision, and what differs goes up as
    /// the changes of an existing item. (Giving the row a new identity instead made it a
    /// conflicted copy of itself, and the server's item never showed here.)
    ///
    /// A file whose server content is none that this device sent in a create was changed by
    /// another device meanwhile: a conflict of content, which never overwrites it.
    func adoptLostCreate(_ item: LocalItem, parentID: ItemID) async throws -> Outcome {
        let current: ItemMetadata
        do {
            current = try await remote.item(item.itemID)
        } catch let RemoteError.refused(code, _, _) where code == .itemNotFound {
            return try resurrectLocal(item.ino)  // created and deleted since: the ID stays taken
        }
        // The revision this device's content goes up from: the server's, unless another device
        // edited the file since the create (then the create's own, below).
        var base = (revision: current.revision, digest: current.digest)
        if item.kind == .file, try !store.read({ try $0.sentContentDigests(of: item.itemID) }).contains(current.digest ?? .empty) {
            if let taken = try await takeContentEditedSinceCreate(item, current) { return taken }
            // Edited here too: both edits descend from the create. The file goes up from the
            // create's revision, so that the server refuses it as from a stale base and it
            // becomes a conflict version, as any edit that lost does (`keepAsConflictVersion`).
            guard let created = try await createdVersion(of: item) else { return Self.contentConflict(current) }
            base = (created.revision, created.digest)
        }
        let moved = try store.write { w -> [KernelInvalidation] in
            guard var row = try w.reader.item(item.ino), row.itemID == current.id, row.revision == nil else { return [] }
            row.takeRevision(of: current)
            row.revision = base.revision
            row.serverDigest = base.digest
            return try settleAdoptedCreate(&row, current, contentIsCurrent: base.revision == current.revision, w)
        }
        if !moved.isEmpty { observer.invalidate(moved) }
        outboxSignal.yield()
        return .again
    }

    /// The rest of a lost create, once the row has taken a revision of the server's item:
    /// the server's place when another device moved the item since (`serverPlaceToTake`),
    /// else this device's place goes up; this device's mode, and its modification time when
    /// its content is the server's (`contentIsCurrent`: one that lost to another device's stays
    /// with its conflict version), and its attributes, where they differ. Writes the row;
    /// returns what the kernel must forget of a move here.
    func settleAdoptedCreate(_ row: inout LocalItem, _ current: ItemMetadata, contentIsCurrent: Bool, _ w: LocalWriter) throws -> [KernelInvalidation] {
        // The create is on the server: the error its lost answers left is no longer true.
        row.uploadError = nil
        var localParentID = try row.parent.flatMap { try w.reader.item($0)?.itemID }
        var invalidations: [KernelInvalidation] = []
        if let oldParent = row.parent, let oldParentID = localParentID,
           let place = try serverPlaceToTake(row, parentID: oldParentID, current, w) {
            // Moved by another device after the create landed, and not here since: its
            // place stands (sending this device's back would undo that move).
            invalidations = [.entry(parent: oldParent, name: row.name), .inode(oldParent), .inode(place.parent),
                             .entry(parent: place.parent, name: place.name), .inode(row.ino)]
            row.parent = place.parent
            row.name = place.name
            localParentID = current.parentID
        }
        try w.update(row)
        try w.forgetSentContents(of: row.ino)
        if row.name != current.name || localParentID != current.parentID { try w.enqueue(.move, ino: row.ino) }
        if row.mode != current.mode || (contentIsCurrent && row.modified != current.modified) {
            try w.enqueue(.attributes, ino: row.ino)
        }
        if row.xattrs != current.xattrs { try w.enqueue(.xattrs, ino: row.ino) }
        return invalidations
    }

    /// The server's place (local folder, name) for an item whose lost create is being adopted,
    /// when it should be taken: the server's place is not where the first create put it
    /// (another device moved the item since), while the row still is (nothing moved it here).
    /// A rename here since goes up instead, as a rename here does against any other device's.
    /// Nil also when the folder is not here or the name is taken in it.
    /// `parentID`: the server id of the row's folder.
    func serverPlaceToTake(_ row: LocalItem, parentID: ItemID, _ current: ItemMetadata, _ w: LocalWriter) throws -> (parent: Int64, name: String)? {
        guard let first = try w.reader.firstCreatePlace(of: row.ino), let serverParentID = current.parentID,
              SentPlace(parentID: serverParentID, name: current.name) != first,
              SentPlace(parentID: parentID, name: row.name) == first,
              let parent = try w.reader.item(id: serverParentID), parent.kind == .folder
        else { return nil }
        if let clash = try w.reader.child(of: parent.ino, named: current.name), clash.ino != row.ino { return nil }
        // Never into itself or below itself here (a local move waiting on this create): that
        // would cut both out of the tree. Its own rename goes up then, as before.
        if try w.reader.isWithin(parent.ino, row.ino) { return nil }
        return (parent.ino, current.name)
    }

    /// A create of this device landed (its answer was lost) and another device edited the
    /// content since. When what this file holds is one of the item's earlier contents on the
    /// server (the create's), the server's content descends from it: the row takes the
    /// server's revision, and its content becomes stale (the newer one is read on the next
    /// open). Nil when it is not (this device edited the file again meanwhile: that edit and
    /// the other device's are a conflict). The contents this device sent do not tell: a
    /// digest is noted before each attempt, whether or not the attempt landed.
    func takeContentEditedSinceCreate(_ item: LocalItem, _ current: ItemMetadata) async throws -> Outcome? {
        // Not while a writer has it open: its next write would go into the stale copy, and the
        // close would count the file clean. It goes the conflict's way, tried again later.
        guard item.kind == .file, item.content == .dirty, !openFiles.isOpenForWriting(item.ino),
              let generation = openFiles.uploadableGeneration(item.ino)
        else { return nil }
        // Hashed in place: the generation is compared again before anything is taken.
        let (digest, _) = try Self.hashFile(cache.path(item.ino))
        guard try await remote.earlierVersions(of: current.id).contains(where: { $0.digest == digest }) else { return nil }
        let (taken, effects) = try store.write { w -> (Bool, EffectsAfterCommit) in
            var effects = EffectsAfterCommit()
            // A writer counts itself in a transaction too (`FileSystem.finishOpen`).
            guard openFiles.writeGeneration(item.ino) == generation, !openFiles.isOpenForWriting(item.ino), var row = try w.reader.item(item.ino),
                  row.itemID == current.id, row.revision == nil, row.content == .dirty
            else { return (false, effects) }
            row.takeRevision(of: current)
            row.serverDigest = current.digest
            row.size = current.size
            row.modified = current.modified
            row.content = .stale
            // With the revision taken the create counts as answered: the rest of it (its place,
            // mode, attributes) is settled now, as for any lost create, or never.
            effects.invalidations += try settleAdoptedCreate(&row, current, contentIsCurrent: true, w)
            _ = openFiles.uploaded(item.ino, generation: generation, stillDirty: true)
            effects.invalidations.append(.inode(row.ino))
            effects.events.append(MountEvent(.changed, path: try w.reader.path(of: row.ino)))
            return (true, effects)
        }
        guard taken else { return .again }
        runAfterCommit(effects)
        observer.invalidate(effects.invalidations)
        outboxSignal.yield()
        return .again
    }

    /// The server's earlier version of the item that this device's lost create made: the
    /// oldest one whose content this device sent. Nil when the server no longer keeps it
    /// (older than `--keep-versions`).
    func createdVersion(of item: LocalItem) async throws -> EarlierVersion? {
        let sent = try store.read { try $0.sentContentDigests(of: item.itemID) }
        return try await remote.earlierVersions(of: item.itemID).last { sent.contains($0.digest) }
    }

    /// Two devices edited the same base and the server has the other one's: this device's
    /// change waits, retried every 30 s, with the reason in uploadingError.
    static func contentConflict(_ current: ItemMetadata) -> Outcome {
        .later("conflict: the server has a newer version (revision \(current.revision)); this device's edit is kept and not uploaded", after: .seconds(30), offline: false)
    }

    /// The server refused this folder's move as a move below itself: another device moved the
    /// folder it was moving into below it first. That move stands (the server's order decides),
    /// so the item goes back to its server folder here, keeping a new name of its own, which
    /// goes up as a rename. The change that the feed held for the other folder (it would have
    /// put both out of the tree) applies then.
    func keepServerFolder(_ item: LocalItem) async throws -> Outcome {
        let current = try await remote.item(item.itemID)
        try rebase(item.ino, on: current, takeServerFolder: true)
        observer.event(MountEvent(
            .reconciled, path: try store.read { try $0.path(of: item.ino) },
            detail: "another device moved the folder it was moving into below it first; kept in its folder"))
        applyHeldChanges()
        return .again
    }

    /// The server still has an item under the name because our own deletion of it is queued
    /// behind this request (a safe save replaced it): send that deletion first.
    /// Likewise when the item in the way is one of ours with a queued move away from the name.
    func sendPendingDelete(of id: ItemID?, for ino: Int64) async throws -> Bool {
        guard let id else { return false }
        if let entry = try store.read({ try $0.queuedDelete(of: id) }) {
            if case .done = await sendGuardingLoops(entry) { return true }
            return false
        }
        guard let blocker = try store.read({ try $0.item(id: id) }),
              let move = try store.read({ try $0.queuedEntry(.move, of: blocker.ino, dueBy: Self.now()) })
        else { return false }
        // Retried at once: a move that first had to break a cycle (see `waitingMoves`) is sent
        // again at once, and the name it frees serves the waiting request now, not a second later.
        let sent = await Self.$waitingMoves.withValue(Self.waitingMoves.union([ino])) { await sendRetryingAtOnce(move) }
        if case .done = sent { return true }
        return false
    }

    /// Items whose moves wait, up the call chain, for the move being sent now to free a name.
    /// A move whose name is held by one of them closes a cycle (names swapped locally, as in
    /// `mv a t; mv b a; mv t b`): each item's queued move carries only its final name, so
    /// sending one to free the other's would never end. It was a livelock: two moves sent each
    /// other thousands of times a second and the outbox behind them never drained.
    @TaskLocal static var waitingMoves: Set<Int64> = []

    /// Breaks a cycle of moves: the holder of the name, one of ours whose move waits up the
    /// chain, goes to a temporary name in its folder on the server. That frees the name at once;
    /// the holder's own move stays queued and takes its final name when its turn comes back.
    /// The holder, not the item asking: the holder is on the server for certain (it holds the
    /// name), while the asker may be a new folder whose create is what the cycle waits for.
    func moveAsideOnServer(_ holder: LocalItem, _ current: ItemMetadata) async throws -> Outcome {
        guard let parentID = current.parentID else {
            return .later("waiting for a swapped name to be freed", after: .milliseconds(100), offline: false)
        }
        let result = try await remote.updateItem(
            holder.itemID, UpdateItemRequest(baseRevision: current.revision, name: ConflictNaming.movingName(holder.itemID), parentID: parentID))
        try adoptMetadata(holder.ino, result)
        return .again
    }

    /// The server refused a name because another item holds it there. If that item is one of
    /// ours, our own queued change will free the name: send it (or wait for it). Only an item
    /// this device does not know (another device's) makes this one a conflicted copy.
    func nameTaken(by holder: ItemMetadata?, for ino: Int64) async throws -> Outcome {
        let mine = try holder.flatMap { h in try store.read { try $0.item(id: h.id) } }
        // A cycle: the holder's move waits up the chain for this one, or this request already
        // waits up the chain for the holder's move (the holder moves into this new folder, so
        // its move waits for this folder's create, which waits for its move).
        if let holder, let mine, Self.waitingMoves.contains(mine.ino) || Self.waitingMoves.contains(ino) {
            return try await moveAsideOnServer(mine, holder)
        }
        if try await sendPendingDelete(of: holder?.id, for: ino) { return .again }
        if let id = holder?.id {
            if let mine {
                let queued = try store.read { try $0.queuedOps(for: mine.ino) }.contains(.move)
                // The server holds a newer state of it than this device: another device moved
                // it there, and the feed has not brought that here yet. Sending this device's
                // older name would undo that move; the feed brings it, and makes room for this
                // item (a conflicted copy) if it still wants the name.
                let behind = mine.revision.map { holder?.revision.isNewer(than: $0) ?? false } ?? true
                if !queued && !behind {
                    try store.write { w in try w.enqueue(.move, ino: mine.ino) }
                    outboxSignal.yield()
                }
                return .later(behind ? "waiting for another device's change of the item that holds the name"
                                     : "waiting for a local rename to free the name", after: .milliseconds(100), offline: false)
            }
            if try store.read({ try $0.hasPendingDelete(of: id) || $0.tombstone(of: id) != nil }) {
                return .later("waiting for a local deletion to free the name", after: .milliseconds(100), offline: false)
            }
        }
        try renameAside(ino, from: holder?.name)
        return .again
    }

    /// Gives the item a conflicted-copy name, unless it has already left `refused`, the name
    /// the server refused: another device's item that arrived meanwhile (`makeRoom`) may have
    /// renamed it, and a second suffix would follow the first.
    func renameAside(_ ino: Int64, from refused: String?) throws {
        let inval = try store.write { w -> [KernelInvalidation] in
            guard var item = try w.reader.item(ino), let parent = item.parent else { return [] }
            if let refused, item.name != refused { return [] }
            let old = item.name
            item.name = ConflictNaming.conflictedCopyName(old, device: configuration.deviceName, at: Self.now())
            try w.update(item)
            if item.revision != nil { try w.enqueue(.move, ino: ino) }
            return [.entry(parent: parent, name: old), .entry(parent: parent, name: item.name)]
        }
        guard !inval.isEmpty else { return }
        observer.invalidate(inval)
        observer.event(MountEvent(.reconciled, path: nil, detail: "a name was taken on the server; kept as a conflicted copy"))
    }

    /// Whether the server still has the item: false only when it answers "not found"; any
    /// other failure is thrown, since it tells nothing of the item.
    func stillOnServer(_ id: ItemID) async throws -> Bool {
        do {
            _ = try await remote.item(id)
            return true
        } catch let RemoteError.refused(code, _, _) where code == .itemNotFound {
            return false
        }
    }

    func resurrectLocal(_ ino: Int64) throws -> Outcome {
        runAfterCommit(try store.write { w in
            var effects = EffectsAfterCommit()
            if let item = try w.reader.item(ino) { try resurrect(item, w, &effects) }
            return effects
        })
        return .again
    }
}
