import Foundation
import ItemModel
import LocalState
import Logging
import SyncAPI

/// One outbox entry, from the outbox to the request its operation needs: retried while the
/// answer says to try again at once, guarded against loops of waits, marked started, and
/// sent as its operation asks (a folder's create, content, a move or attribute change, a
/// deletion).
extension SyncEngine {
    /// `sendGuardingLoops`, repeated at once while it answers `.again` (ten more times at
    /// most): what a first try had to do first (rebase, move a name's holder aside) is followed
    /// by the request itself now, not on a later pass.
    func sendRetryingAtOnce(_ entry: OutboxEntry) async -> Outcome {
        var outcome = await sendGuardingLoops(entry)
        var rounds = 0
        while case .again = outcome, rounds < 10 {
            rounds += 1
            outcome = await sendGuardingLoops(entry)
        }
        return outcome
    }

    /// How many entries are being sent, each waiting for the next, up this call chain: a
    /// request may first send what it waits for (its folder's create, the move that frees its
    /// name), and that in turn what it waits for.
    @TaskLocal static var nesting = 0

    /// Deeper than any chain of waits a tree can make (a folder's create waits for its parent's,
    /// at most one per level), so only a loop of waits gets there. A loop this code does not
    /// break ran on one thread without end, its memory growing, and never let the process go;
    /// now it is an error the entry reports, and the entry is tried again later.
    static let maxNesting = 512
    public static let loopOfWaits = "requests wait on one another in a loop"
    static let waitingForEarlierMove = "waiting for an earlier move of this device to reach the server"

    /// `sendMarkingStarted`, one level deeper in `nesting`, unless the entry is an upload that
    /// waits for a writer, or the chain of waits up this call is `maxNesting` deep (a loop of waits:
    /// reported, and the entry is tried again later).
    func sendGuardingLoops(_ entry: OutboxEntry) async -> Outcome {
        // Before it is marked started, so that the writer's close joins this entry instead of
        // queueing another (uploadSnapshot checks again, race-free).
        if entry.op == .content && openFiles.uploadableGeneration(entry.ino) == nil { return .waitsForWriter }
        guard Self.nesting < Self.maxNesting else {
            logger.error("\(Self.loopOfWaits)", metadata: ["item.ino": "\(entry.ino)", "op": "\(entry.op)"])
            observer.event(MountEvent(.uploadFailed, path: try? store.read { try $0.path(of: entry.ino) }, detail: Self.loopOfWaits))
            return .later(Self.loopOfWaits, after: .seconds(1), offline: false)
        }
        return await Self.$nesting.withValue(Self.nesting + 1) { await sendMarkingStarted(entry) }
    }

    /// `sendByOperation`, with the entry marked started and its item uploading meanwhile: the
    /// entry is dequeued once done, and an error becomes a try later (offline when the server
    /// cannot be reached).
    private func sendMarkingStarted(_ entry: OutboxEntry) async -> Outcome {
        openFiles.startedUploading([entry.ino])
        defer { openFiles.finishedUploading([entry.ino]) }
        do {
            try store.write { w in try w.markStarted(entry.seq) }
            let outcome = try await sendByOperation(entry)
            // An upload's entry goes in the transaction that records its result; others here.
            if case .done = outcome, try store.read({ try $0.outboxEntry(entry.seq) }) != nil {
                try store.write { w in try w.dequeue(entry.seq) }
            }
            return outcome
        } catch let error as RemoteError {
            return error.meansOffline
                ? .later(describe(error), after: .seconds(1), offline: true)
                : .later(describe(error), after: .seconds(5), offline: false)
        } catch {
            return .later("\(error)", after: .seconds(5), offline: false)
        }
    }

    /// The request the entry's operation needs: a deletion (`sendDelete`), or, once the item's
    /// folder is on the server (`parentOnServer`), a folder's or a link's create, the content
    /// (`uploadSnapshot`), a move, or a change of mode and times or of extended attributes. A
    /// refusal goes to its handling.
    func sendByOperation(_ entry: OutboxEntry) async throws -> Outcome {
        if entry.op == .delete { return try await sendDelete(entry) }
        guard let item = try store.read({ try $0.item(entry.ino) }) else { return .done }
        if try store.read({ try $0.isExcluded(item.ino) }) { return .done }
        // A child goes up after its folder: send the folder's own create first.
        guard let parentID = try await parentOnServer(item) else {
            return .later("waiting for its folder to reach the server", after: .seconds(1), offline: false)
        }
        switch entry.op {
        case .create:
            if item.revision != nil { return .done }
            let created: ItemMetadata
            do {
                try store.write { w in try w.noteCreateSent(item.ino, parentID: parentID, name: item.name) }
                created = try await remote.createItem(CreateItemRequest(
                    parentID: parentID, name: item.name, kind: item.kind, mode: item.mode, created: item.created,
                    modified: item.modified, xattrs: item.xattrs.isEmpty ? nil : item.xattrs, id: item.itemID, target: item.target))
            } catch let RemoteError.refused(code, _, current) where code == .nameExists {
                return try await nameTaken(by: current, for: item.ino)
            } catch let RemoteError.refused(code, _, _) where code == .itemIDTaken {
                return try await adoptLostCreate(item, parentID: parentID)
            }
            // The answer and what changed while it was in flight, in one transaction.
            let (followUps, effects) = try store.write { w in
                var effects = EffectsAfterCommit()
                try adoptMetadata(item.ino, created, w, &effects)
                try w.forgetSentContents(of: item.ino)
                return (try followUpCreate(item, created, w), effects)
            }
            runAfterCommit(effects)
            if followUps { outboxSignal.yield() }
            return .done
        case .content:
            return try await uploadSnapshot(item, parentID: parentID, seq: entry.seq)
        case .move, .attributes, .xattrs:
            guard let base = item.revision else { return .done }  // its create carries everything
            do {
                let result: ItemMetadata
                switch entry.op {
                case .move: result = try await remote.updateItem(item.itemID, UpdateItemRequest(baseRevision: base, name: item.name, parentID: parentID))
                case .attributes: result = try await remote.updateItem(item.itemID, UpdateItemRequest(baseRevision: base, mode: item.mode, modified: item.modified))
                default: result = try await remote.setXattrs(item.itemID, SetXattrsRequest(baseRevision: base, xattrs: item.xattrs))
                }
                return try adoptMetadata(item.ino, result, sentFrom: base)
            } catch let RemoteError.refused(code, _, current) where code == .revisionConflict && current != nil {
                let current = current!
                // A file whose own edit is not on the server yet, while the server's content
                // moved on from that edit's base: a conflict of content. Rebasing would make the
                // server's revision the edit's base too, and the edit would then go up over the
                // other device's version. The edit goes first, as a conflict version, and this
                // change then goes on from the revision that keeps it.
                let row = try store.read { try $0.item(item.ino) }
                trace("\(entry.op) from r\(base) refused, the server has r\(current.revision) \(Self.short(current.digest))", ino: item.ino)
                if let row, row.kind == .file, row.content == .dirty, current.digest != row.serverDigest {
                    let edit = try await uploadSnapshot(row, parentID: parentID, seq: nil)
                    if case .done = edit { return .again }
                    return edit
                }
                // Metadata changes apply on top of whatever changed meanwhile: rebase and resend.
                return try rebase(item.ino, on: current, onlyWithItsPlace: true).outcome
            } catch let RemoteError.refused(code, _, current) where code == .nameExists {
                return try await nameTaken(by: current, for: item.ino)
            } catch let RemoteError.refused(code, _, _) where code == .itemNotFound {
                // A move into a folder deleted on the server is "not found" too, for the
                // folder, while the item itself is still there: made anew, it would be there
                // twice. The folder's deletion, once the feed brings it, makes the folder anew
                // here (a change below it wins), and the move then goes into that. Only the
                // server's "not found" for the item itself makes it anew: a lookup that fails
                // (the link dropped meanwhile) says nothing, and the move is tried again.
                if entry.op == .move, try await stillOnServer(item.itemID) {
                    return .later("the folder it moves into was deleted on the server", after: .seconds(1), offline: false)
                }
                return try resurrectLocal(item.ino)
            } catch let RemoteError.refused(code, _, _) where code == .invalidMove && entry.op == .move {
                // A move of this device queued before this one, still waiting (a failed request
                // tried again later), may be what takes the folder it moves into out of it: then
                // the server's tree is this device's own order not yet sent, and this move waits
                // for it. Only another device's move is kept over this one.
                if try store.read({ try $0.hasQueued(.move, before: entry.seq, otherThan: entry.ino) }) {
                    return .later(Self.waitingForEarlierMove, after: .seconds(1), offline: false)
                }
                return try await keepServerFolder(item)
            }
        case .resolve:
            return try await sendResolution(item)
        case .delete:
            return .done
        }
    }

    func parentOnServer(_ item: LocalItem) async throws -> ItemID? {
        guard let parentIno = item.parent else { return .root }
        if parentIno == LocalItem.rootIno { return .root }
        guard let parent = try store.read({ try $0.item(parentIno) }) else { return nil }
        if parent.revision != nil { return parent.itemID }
        let pending = try store.read { r in try r.queuedEntry(.create, of: parentIno) }
        guard let pending, pending.notBefore <= Self.now() else { return nil }
        // Retried at once: a create that first had to move a name's holder aside goes at once.
        let outcome = await sendRetryingAtOnce(pending)
        guard case .done = outcome else { return nil }
        return try store.read { try $0.item(parentIno) }.flatMap { $0.revision != nil ? $0.itemID : nil }
    }

    func sendDelete(_ entry: OutboxEntry) async throws -> Outcome {
        guard let id = entry.itemID else { return .done }
        let base: Revision
        if let revision = entry.revision {
            base = revision
        } else {
            // Deleted before its create was answered: delete what that create made, unless
            // another device edited it since (its content is none this device sent): that edit
            // wins, as over any deletion.
            let current: ItemMetadata
            do {
                current = try await remote.item(id)
            } catch let RemoteError.refused(code, _, _) where code == .itemNotFound || code == .containerNotFound {
                try store.write { try $0.forgetAbandonedContents(of: id) }
                return .done
            }
            if current.kind == .file, try !store.read({ try $0.abandonedContentDigests(of: id) }).contains(current.digest ?? .empty) {
                return try restoreDeleted(entry, current)
            }
            base = current.revision
        }
        do {
            let tombstones = try await remote.deleteItem(id, base: base, recursive: false)
            try store.write { w in
                for t in tombstones {
                    try w.addTombstone(t.id, revision: t.revision)
                    try w.dropHeldChange(t.id)
                }
                try w.forgetAbandonedContents(of: id)
            }
            return .done
        } catch let RemoteError.refused(code, _, _) where code == .itemNotFound {
            try store.write { w in
                try w.dropHeldChange(id)
                try w.forgetAbandonedContents(of: id)
            }
            return .done
        } catch let RemoteError.refused(code, _, current) where code == .revisionConflict || code == .folderNotEmpty {
            if code == .folderNotEmpty, let outcome = try await sendChangesEmptying(id) { return outcome }
            // Edit (or a new child) versus delete: the edit wins and the item comes back.
            if let current { return try restoreDeleted(entry, current) }
            return try restoreDeleted(entry, try await remote.item(id))
        }
    }

    /// A deletion that lost to a change made elsewhere: dropped, and the server's item comes
    /// back here at its latest state.
    func restoreDeleted(_ entry: OutboxEntry, _ item: ItemMetadata) throws -> Outcome {
        let id = item.id
        var effects = try store.write { w -> EffectsAfterCommit in
            var effects = EffectsAfterCommit()
            // Gone from the queue first, or the feed's rule "a deletion is on its way" would
            // keep the item away.
            try w.dequeue(entry.seq)
            try w.forgetAbandonedContents(of: id)
            try applyLocked(ItemChange(cursor: .start, kind: .upsert, item: item), w, &effects)
            // A change the feed held while the refusal travelled is newer than its state.
            if let held = try w.reader.heldChange(of: id) {
                try w.dropHeldChange(id)
                if held.revision.isNewer(than: item.revision) {
                    try applyLocked(try JSONDecoder().decode(ItemChange.self, from: held.json), w, &effects)
                }
            }
            return effects
        }
        observer.invalidate(effects.invalidations)
        // The feed's own events of this restore are not told: the conflict below says it.
        effects.events = []
        runAfterCommit(effects)
        observer.event(MountEvent(.reconciled, path: item.name, detail: "changed on the server while deleted here; restored"))
        return .done
    }

    /// The server refused to delete the folder `folder` as not empty. What keeps it full may be
    /// this device's own changes, queued before the deletion and not sent yet: a move out of
    /// it whose request failed and waits to be tried again, while the deletion went on in
    /// turn, or was sent ahead of its turn to free its name for a new item. Those go first, and
    /// the deletion again. Nil when a child stays there that this device has nothing queued
    /// about: another device put it there, and that change wins (the caller brings the folder
    /// back).
    func sendChangesEmptying(_ folder: ItemID) async throws -> Outcome? {
        let children = try await remote.children(of: folder)
        let queued = try store.read { r in
            try children.map { child -> OutboxEntry? in
                if let delete = try r.queuedDelete(of: child.id) { return delete }
                guard let row = try r.item(id: child.id) else { return nil }
                return try r.queuedEntry(.move, of: row.ino)
            }
        }
        guard queued.allSatisfy({ $0 != nil }) else { return nil }
        for entry in queued.compactMap(\.self) {
            guard case .done = await sendRetryingAtOnce(entry) else {
                return .later(Self.waitingForMovesOut, after: .seconds(1), offline: false)
            }
        }
        return .again
    }
    static let waitingForMovesOut = "waiting for this device's changes of its children to reach the server"
}
