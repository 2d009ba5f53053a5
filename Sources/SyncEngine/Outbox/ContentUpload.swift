import CacheFiles
import Foundation
import ItemModel
import LocalState
import SyncAPI

/// A file's content going up alone: a snapshot of it, its blob if it is large, the create or
/// update that carries it, and the recording of the answer.
extension SyncEngine {
    static let dedupThreshold: Int64 = 1 << 20

    /// Uploads a snapshot of the file's content, never the live cache file, in the create of a
    /// new file or the update of an existing one, and records the answer (`finishUpload`).
    /// `seq`: the outbox entry the answer dequeues; nil when the upload goes ahead of another
    /// entry of the file, whose own entry then finds nothing left to send.
    func uploadSnapshot(_ item: LocalItem, parentID: ItemID, seq: Int64?) async throws -> Outcome {
        if item.content != .dirty && item.revision != nil { return .done }
        if item.revision == nil && item.contentOnlyOnServer { return try await createFromServerContent(item, parentID: parentID, seq: seq) }
        // A write after this (a writer that opens and truncates) changes the generation, and
        // the snapshot is then not sent.
        guard let generation = openFiles.uploadableGeneration(item.ino) else { return .waitsForWriter }
        let path = try store.read { try $0.path(of: item.ino) }
        observer.event(MountEvent(.uploadStarted, path: path))
        // What goes up must be one whole version, and a writer (truncate, another open) may
        // change the cache file at any moment. A small file is read into memory once and sent
        // inline with its create or update (one request). A larger one is hashed, then sent as
        // a blob, from the cache file itself: a copy first would be one more pass over the whole
        // file (0.9 s a GiB here) for nothing, since the server stores nothing whose bytes do
        // not hash to the declared digest, and the write generation is compared after the send.
        // A writer meanwhile makes the upload start again; a mix is never stored or recorded.
        let digest: ContentDigest
        let size: Int64
        var inline: Data?
        if let bytes = try cache.readWhole(item.ino, limit: SyncProtocol.maxInlineContent) {
            digest = ContentDigest.of(bytes)
            size = Int64(bytes.count)
            inline = Data(bytes)
        } else {
            let file = cache.path(item.ino)
            // Hashed behind its writer when it was written from its start in one run; else
            // read again now.
            if let written = cache.identity(item.ino), let known = await cache.digests.digest(of: item.ino, file: written.file, size: written.size) {
                (digest, size) = (known, written.size)
            } else {
                (digest, size) = try Self.hashFile(file)
            }
            openFiles.uploadProgress(item.ino, sent: 0, of: size)
            // Asking first saves sending content the server has; below 1 MiB sending it costs
            // about what the question does, so smaller files skip the round trip.
            let needed = size < Self.dedupThreshold ? true : try await !remote.hasBlob(digest)
            if needed {
                let progress = UploadProgress(ino: item.ino, path: path, size: size, openFiles: openFiles, observer: observer)
                do {
                    try await remote.uploadBlob(digest, size: size, fromFile: file, progress: progress.sent)
                } catch let RemoteError.refused(code, _, _) where code == .digestMismatch {
                    // Changed while it was being sent; the next attempt hashes the file itself.
                    cache.digests.forget(item.ino)
                    return .again
                } catch where openFiles.writeGeneration(item.ino) != generation {
                    return .again  // cut short by a writer (a truncate): its version goes up next
                }
            }
        }
        openFiles.uploadProgress(item.ino, sent: size, of: size)
        guard openFiles.writeGeneration(item.ino) == generation else { return .again }
        trace("upload: generation \(generation), \(Self.short(digest)) from r\(item.revision?.rawValue ?? "-") (\(Self.short(item.serverDigest)))", ino: item.ino)
        var result: ItemMetadata
        do {
            try store.write { w in
                try w.noteContentSent(item.ino, itemID: item.itemID, digest: digest)
                if item.revision == nil { try w.noteCreateSent(item.ino, parentID: parentID, name: item.name) }
            }
            if let base = item.revision {
                result = try await remote.updateContent(item.itemID, UpdateContentRequest(
                    baseRevision: base, digest: digest, size: size, modified: item.modified, content: inline, device: savingDevice))
            } else {
                result = try await remote.createItem(Self.createRequest(item, parentID: parentID, digest: digest, size: size, content: inline, device: savingDevice))
            }
        } catch let RemoteError.refused(code, _, current) where code == .revisionConflict && current != nil {
            let current = current!
            trace("upload: \(Self.short(digest)) refused, the server has r\(current.revision) \(Self.short(current.digest))", ino: item.ino)
            if current.digest == digest {
                // Our own upload, whose answer was lost: it is on the server already.
                if try store.read({ try self.holdsServerMetadata(item.ino, current, $0) }) {
                    return try finishUpload(item, result: current, digest: digest, size: size, generation: generation, seq: seq)
                }
                // Or this content with metadata this device does not hold: another device changed
                // the item (a move, a chmod) after this upload landed, or before it, when this
                // "edit" left the content as it was (a truncate to the same size). Its state is
                // taken as any change of metadata is, below. Taking the revision as this
                // upload's answer would leave that change out, and the feed would then find it
                // not newer: the item would stay in its old place here for good.
                return try rebase(item.ino, on: current, keepContent: true, onlyWithItsPlace: true).outcome
            }
            // Read again: the answer to a replaced row's upload may have passed its revision
            // to this one meanwhile (`passToSuccessor`), and then the server holds what the
            // row now has as its base.
            let heldNow = try store.read { try $0.item(item.ino) }?.serverDigest
            if current.digest == item.serverDigest || current.digest == heldNow {
                // Only metadata changed on the server (a rename, a chmod): both apply.
                return try rebase(item.ino, on: current, keepContent: true, onlyWithItsPlace: true).outcome
            }
            if let theirs = current.digest, try store.read({ try $0.sentContentDigests(of: item.itemID) }).contains(theirs) {
                // An earlier version from here: its answer was lost (the daemon died after the
                // server stored it), or is still on its way (the upload of a file a safe save
                // replaced). Not another device's edit: go up from it.
                try rebase(item.ino, on: current, keepContent: true)
                try store.write { w in
                    guard var row = try w.reader.item(item.ino) else { return }
                    row.serverDigest = theirs
                    try w.update(row)
                }
                return .again
            }
            // The content changed on the server too: never overwrite it.
            guard let base = item.revision else { return try await takeContentEditedSinceCreate(item, current) ?? Self.contentConflict(current) }
            return try await keepAsConflictVersion(item, base: base, digest: digest, size: size, content: inline, generation: generation, seq: seq)
        } catch let RemoteError.refused(code, _, current) where code == .nameExists {
            return try await nameTaken(by: current, for: item.ino)
        } catch let RemoteError.refused(code, _, _) where code == .itemIDTaken {
            return try await adoptLostCreate(item, parentID: parentID)
        } catch let RemoteError.refused(code, _, _) where code == .itemNotFound {
            return try resurrectLocal(item.ino)
        }
        return try finishUpload(item, result: result, digest: digest, size: size, generation: generation, seq: seq)
    }

    /// True when the row of `ino` holds the server's name, folder, mode and attributes of
    /// `current`, or will send its own (a change of them queued).
    func holdsServerMetadata(_ ino: Int64, _ current: ItemMetadata, _ r: LocalReader) throws -> Bool {
        guard let row = try r.item(ino) else { return true }
        let queued = try r.queuedOps(for: ino)
        let parentID = try row.parent.flatMap { $0 == LocalItem.rootIno ? ItemID.root : try r.item($0)?.itemID }
        return (queued.contains(.move) || (row.name == current.name && parentID == current.parentID))
            && (queued.contains(.attributes) || row.mode & 0o7777 == current.mode & 0o7777)
            && (queued.contains(.xattrs) || row.xattrs == current.xattrs)
    }

    /// A file made anew here (a change of this device met its deletion elsewhere: `resurrect`)
    /// whose content never came down: the server still holds that content, and the create
    /// names it by its digest instead of sending bytes this device does not have. When the
    /// server no longer has it, the deletion wins: nothing this device wrote is lost with it.
    func createFromServerContent(_ item: LocalItem, parentID: ItemID, seq: Int64?) async throws -> Outcome {
        // An empty file's content is no blob: it goes inline.
        let empty = item.size == 0
        guard let digest = item.serverDigest ?? (empty ? ContentDigest.empty : nil) else {
            return .later("the server's content of this file is not known here", after: .seconds(30), offline: false)
        }
        let result: ItemMetadata
        do {
            result = try await remote.createItem(Self.createRequest(item, parentID: parentID, digest: digest, size: item.size, content: empty ? Data() : nil, device: nil))
        } catch let RemoteError.refused(code, _, current) where code == .nameExists {
            return try await nameTaken(by: current, for: item.ino)
        } catch let RemoteError.refused(code, _, _) where code == .itemIDTaken {
            return try await adoptLostCreate(item, parentID: parentID)
        } catch let RemoteError.refused(code, _, _) where code == .blobNotFound {
            let effects = try store.write { w in
                var effects = EffectsAfterCommit()
                guard let row = try w.reader.item(item.ino), row.revision == nil, row.contentOnlyOnServer else { return effects }
                let path = try deleteHere(row, w, &effects)
                effects.events.append(MountEvent(.reconciled, path: path, detail: "deleted elsewhere, and its content is gone from the server; the deletion stands"))
                return effects
            }
            runAfterCommit(effects)
            observer.invalidate(effects.invalidations)
            return .done
        }
        let followUps = try store.write { w -> Bool in
            if let seq { try w.dequeue(seq) }
            guard var row = try w.reader.item(item.ino), row.itemID == result.id else { return false }
            row.takeRevision(of: result)
            row.uploadError = nil
            try settleXattrChanges(row, heldByServer: result, w)
            try w.update(row)
            return try followUpCreate(item, result, w)
        }
        if followUps { outboxSignal.yield() }
        setConnected(true, error: nil)
        return .done
    }

    /// Records a successful upload, in one transaction with what changed while it was in
    /// flight and the removal of its entry `seq`: one commit per uploaded file, not three.
    func finishUpload(_ item: LocalItem, result: ItemMetadata, digest: ContentDigest, size: Int64, generation: UInt64, seq: Int64?) throws -> Outcome {
        trace("upload: \(Self.short(digest)) is r\(result.revision)", ino: item.ino)
        let followUps = try store.write { w in
            try recordUpload(item, result: result, digest: digest, size: size, generation: generation, seq: seq, w)
        }
        if followUps { outboxSignal.yield() }
        setConnected(true, error: nil)
        observer.event(MountEvent(.uploaded, path: try store.read { try $0.path(of: item.ino) }, bytes: size))
        return .done
    }

    /// An upload's result, inside the caller's transaction, unless the item changed identity
    /// meanwhile (a safe save gave it another item's id): then what went up belongs to nobody
    /// and is removed, and the content goes up again under the new identity. True when
    /// something more was queued.
    func recordUpload(_ item: LocalItem, result: ItemMetadata, digest: ContentDigest, size: Int64, generation: UInt64, seq: Int64?, _ w: LocalWriter) throws -> Bool {
        if let seq { try w.dequeue(seq) }
        try w.forgetSentContents(of: item.ino)
        guard var row = try w.reader.item(item.ino) else {
            try w.updatePendingDelete(of: result.id, revision: result.revision)
            try passToSuccessor(result, sentFrom: item.revision, w)
            return item.revision == nil ? try followUpCreate(item, result, w) : false
        }
        guard row.itemID == result.id else {
            if try w.reader.hasPendingDelete(of: result.id) {
                try w.updatePendingDelete(of: result.id, revision: result.revision)
            } else {
                try w.enqueue(.delete, ino: item.ino, itemID: result.id, revision: result.revision)
            }
            try w.enqueue(.content, ino: item.ino)
            return true
        }
        row.takeRevision(of: result)
        row.serverDigest = digest
        row.uploadError = nil
        try settleXattrChanges(row, heldByServer: result, w)
        let clean = openFiles.uploaded(item.ino, generation: generation, stillDirty: row.content == .dirty)
        if clean {
            row.content = .current
            cache.digests.forget(item.ino)
        }
        row.cachedBytes = max(row.cachedBytes, size)
        try w.update(row)
        // Changed (or its generations forgotten by a close) during the upload: what is in the
        // cache now goes up too. A write's release queues that itself; this covers the rest,
        // so a dirty file is never left with nothing queued (a waiting entry is not doubled).
        var again = false
        if try !clean && row.content == .dirty && !w.reader.isExcluded(item.ino) {
            try w.enqueue(.content, ino: item.ino)
            again = true
        }
        let followUps = item.revision == nil ? try followUpCreate(item, result, w) : false
        return followUps || again
    }

    /// SHA-256 and size of a cache file, read in 1 MiB blocks.
    static func hashFile(_ path: String) throws -> (ContentDigest, Int64) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw ContentError.io("cannot read \(path)", errno) }
        defer { close(fd) }
        return try ContentCache.sha256(of: fd)
    }
}
