import Foundation
import ItemModel
import LocalState

/// The server's answers recorded in the local rows: the new revision, what changed here while
/// the request was in flight, and the server's state rebased under what is still queued.
extension SyncEngine {
    /// A create went up with the item's name and place at that moment. If the item was renamed,
    /// moved or deleted while the request was in flight, send that too: the local rename or
    /// delete found no server item to change then.
    /// Inside a transaction; true when something was queued.
    func followUpCreate(_ sent: LocalItem, _ created: ItemMetadata, _ w: LocalWriter) throws -> Bool {
        guard let row = try w.reader.item(sent.ino), row.itemID == created.id else {
            // Deleted meanwhile: its deletion is queued already (see FileSystem.deleteRow), and
            // now knows the revision it deletes, so that the server refuses it over a change
            // made elsewhere since.
            if try w.reader.hasPendingDelete(of: created.id) {
                try w.updatePendingDelete(of: created.id, revision: created.revision)
                return false
            }
            try w.enqueue(.delete, ino: sent.ino, itemID: created.id, revision: created.revision)
            return true
        }
        var queued = false
        if row.name != sent.name || row.parent != sent.parent { try w.enqueue(.move, ino: sent.ino); queued = true }
        // Against what the server holds, not only what was sent: a retried create is answered
        // with the first one's item, which a mode or attribute set here since is not in.
        if row.mode != created.mode || row.modified != created.modified { try w.enqueue(.attributes, ino: sent.ino); queued = true }
        if row.xattrs != created.xattrs { try w.enqueue(.xattrs, ino: sent.ino); queued = true }
        return queued
    }

    /// Records the server's answer: the new revision (and nothing that would undo local edits made since).
    @discardableResult
    func adoptMetadata(_ ino: Int64, _ result: ItemMetadata, sentFrom: Revision? = nil) throws -> Outcome {
        runAfterCommit(try store.write { w in
            var effects = EffectsAfterCommit()
            try adoptMetadata(ino, result, sentFrom: sentFrom, w, &effects)
            return effects
        })
        return .done
    }

    func adoptMetadata(_ ino: Int64, _ result: ItemMetadata, sentFrom: Revision? = nil, _ w: LocalWriter, _ effects: inout EffectsAfterCommit) throws {
        guard var row = try w.reader.item(ino) else {
            try w.updatePendingDelete(of: result.id, revision: result.revision)
            try passToSuccessor(result, sentFrom: sentFrom, w)
            return
        }
        guard row.itemID == result.id else { return }
        let hadConflicts = !row.conflicts.isEmpty
        row.takeRevision(of: result)
        try settleXattrChanges(row, heldByServer: result, w)
        try takeServerContent(&row, from: result, keepModified: try w.reader.queuedOps(for: ino).contains(.attributes), &effects)
        row.uploadError = nil
        try w.update(row)
        try noteConflicts(of: row, hadConflicts: hadConflicts, w.reader, &effects)
    }

    /// A safe save gave the item's identity to another row (see `FileSystem.rename`) while a
    /// request about the replaced file was in flight: that row took the revision the request
    /// was sent from, and takes the one it made now. Otherwise the save would go up from the
    /// older revision and the server would refuse it as a conflict with this device's own edit.
    func passToSuccessor(_ result: ItemMetadata, sentFrom base: Revision?, _ w: LocalWriter) throws {
        guard let base, var successor = try w.reader.item(id: result.id), successor.revision == base else { return }
        successor.takeRevision(of: result)
        successor.serverDigest = result.digest
        try w.update(successor)
    }

    /// Attributes the server now holds as this device does are no longer changes of ours.
    func settleXattrChanges(_ row: LocalItem, heldByServer result: ItemMetadata, _ w: LocalWriter) throws {
        let changed = try w.reader.xattrChanges(of: row.ino)
        if !changed.isEmpty { try w.settleXattrChanges(row.ino, changed.filter { row.xattrs[$0] == result.xattrs[$0] }) }
    }

    static func mergeXattrs(server: [String: Data], local: [String: Data], changedHere: Set<String>) -> [String: Data] {
        var merged = server
        for name in changedHere { merged[name] = local[name] }
        return merged
    }

    /// `takeServerFolder`: the server's folder wins even over a queued local move, whose name
    /// still goes up (`keepServerFolder`).
    /// `onlyWithItsPlace`: nothing is taken (`waitsForServerFolder`) when the server moved the
    /// item into a folder this device does not have yet (its create is still on the feed's
    /// way): taking the revision without the place would make the feed's change of it look
    /// old, and the move would never show here. The caller tries again once the feed has
    /// brought the folder.
    /// Nothing is taken either (`waitsForWriters`) when the server's content would replace a
    /// file that a writer has open: its next writes would edit the old copy with the new
    /// revision as their base, and go up over the other device's content. The feed's change
    /// of that content waits for the last close; the caller tries again then.
    @discardableResult
    func rebase(_ ino: Int64, on current: ItemMetadata, keepContent: Bool = false, takeServerFolder: Bool = false, onlyWithItsPlace: Bool = false) throws -> Rebased {
        let (taken, inval, effects) = try store.write { w -> (Rebased, [KernelInvalidation], EffectsAfterCommit) in
            var effects = EffectsAfterCommit()
            guard var item = try w.reader.item(ino) else { return (.taken, [], effects) }
            if !keepContent && replacesContentUnderWriters(item, with: current) { return (.waitsForWriters, [], effects) }
            var out: [KernelInvalidation] = [.inode(ino)]
            // What changed on the server applies here too, except what a local change still
            // queued will send (the feed skipped those changes while this one waited). The
            // server's name and place win unless a local move is queued; its mode unless a
            // local chmod or touch is; its attributes unless a local change of them is.
            let queued = try w.reader.queuedOps(for: ino)
            let localMove = queued.contains(.move)
            if onlyWithItsPlace, !localMove, let parentID = current.parentID, try w.reader.item(id: parentID) == nil {
                return (.waitsForServerFolder, [], effects)
            }
            if !queued.contains(.attributes) { item.mode = current.mode }
            if !queued.contains(.xattrs) {
                item.xattrs = current.xattrs
            } else {
                // Name by name: ours for the names changed here and not yet on the server, the
                // server's for every other, so that another device's change of another
                // attribute is kept (a queued send with no such name left sends the server's).
                item.xattrs = Self.mergeXattrs(server: current.xattrs, local: item.xattrs, changedHere: try w.reader.xattrChanges(of: ino))
            }
            // Never below itself here (a local move of a folder above it still queued): that
            // would put both out of the tree.
            if !localMove || takeServerFolder, let parentID = current.parentID, let parent = try w.reader.item(id: parentID),
               try !w.reader.isWithin(parent.ino, ino) {
                let name = localMove ? item.name : current.name
                var clash = try w.reader.child(of: parent.ino, named: name).flatMap { $0.ino == ino ? nil : $0 }
                // The server's own name for the item: what holds it here has left it on the
                // server, and its change is on the feed's way. Room is made as the feed makes
                // it. Taking the revision without the name would make the feed's change of the
                // name look old, and the item would keep its old name here for good.
                if let held = clash, !localMove {
                    try makeRoom(for: held, w, &effects)
                    clash = nil
                }
                if clash == nil {
                    if let old = item.parent { out.append(.entry(parent: old, name: item.name)) }
                    item.parent = parent.ino
                    item.name = name
                    out.append(.entry(parent: parent.ino, name: name))
                }
            }
            let hadConflicts = !item.conflicts.isEmpty
            item.takeRevision(of: current)
            // The server's content, unless this row's own is what goes up next: the digest,
            // and the size that a download of it fetches (an older size failed its check).
            if !keepContent { takeServerContent(&item, from: current, keepModified: queued.contains(.attributes), &effects) }
            try w.update(item)
            try noteConflicts(of: item, hadConflicts: hadConflicts, w.reader, &effects)
            return (.taken, out, effects)
        }
        runAfterCommit(effects)
        observer.invalidate(inval)
        return taken
    }

    enum Rebased {
        case taken, waitsForServerFolder, waitsForWriters

        /// What a request that needed the rebase does now.
        var outcome: Outcome {
            switch self {
            case .taken: .again
            case .waitsForServerFolder: .later(SyncEngine.waitingForServerFolder, after: .seconds(1), offline: false)
            case .waitsForWriters: .later(SyncEngine.waitingForWriters, after: .seconds(1), offline: false)
            }
        }
    }

    /// True when the server's content would replace this file's while a writer has it open:
    /// nothing that answers a request may do that (the feed holds such a change for the
    /// writers), or the writer's next writes would edit the old copy under the new revision.
    func replacesContentUnderWriters(_ item: LocalItem, with current: ItemMetadata) -> Bool {
        item.kind == .file && item.content == .current && current.digest != item.serverDigest && openFiles.isOpenForWriting(item.ino)
    }

    static let waitingForServerFolder = "waiting for the folder another device moved it into"
    static let waitingForWriters = "waiting for the programs that have it open for writing to close it"
}
