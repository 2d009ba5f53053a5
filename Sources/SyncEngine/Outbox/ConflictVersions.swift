import Foundation
import ItemModel
import LocalState
import SyncAPI

/// An edit that lost: another device's edit of the same base reached the server first.
extension SyncEngine {
    /// Sends this device's edit (the snapshot `digest`, edited from `base`) as a conflict
    /// version of the file, and the file here takes the server's version: the cache file, which
    /// holds the edit, becomes a stale copy that the next open replaces. Changes queued behind
    /// the edit (a rename, a chmod, attributes) go on from the new revision. So nothing is lost
    /// and nothing waits: every device sees the conflict, and any device can resolve it.
    /// A file written again meanwhile is sent again (its newer content becomes a version too).
    /// A file that a writer still has open keeps its content and base here: a write through
    /// that descriptor edits this device's version, so it must go up from the old base (and be
    /// refused into a version of its own), not from the server's. The feed's change of the
    /// file, held for the writers, brings the server's content at the last close.
    func keepAsConflictVersion(
        _ item: LocalItem, base: Revision, digest: ContentDigest, size: Int64, content: Data?, generation: UInt64, seq: Int64?
    ) async throws -> Outcome {
        let version = ConflictVersion(
            id: Self.conflictVersionID(item.itemID, base: base, digest: digest), digest: digest, size: size,
            device: savingDevice, modified: item.modified, base: base)
        let result = try await remote.addConflictVersion(item.itemID, AddConflictVersionRequest(version: version, content: content))
        var underWriters = false
        let recorded = try store.write { w -> EffectsAfterCommit? in
            guard var row = try w.reader.item(item.ino), row.itemID == item.itemID,
                  openFiles.uploaded(item.ino, generation: generation, stillDirty: row.content == .dirty)
            else { return nil }
            var effects = EffectsAfterCommit()
            if let seq { try w.dequeue(seq) }
            try w.forgetSentContents(of: item.ino)
            row.uploadError = nil
            // The cache file holds the edit, which the server now keeps as a version.
            row.content = .current
            underWriters = openFiles.isOpenForWriting(item.ino)
            if underWriters {
                row.conflicts = result.conflicts
            } else {
                row.takeRevision(of: result)
                try takeServerContent(&row, from: result, keepModified: try w.reader.queuedOps(for: item.ino).contains(.attributes), &effects)
                try settleXattrChanges(row, heldByServer: result, w)
            }
            try w.update(row)
            effects.invalidations.append(.inode(item.ino))
            effects.events.append(MountEvent(
                .conflictAppeared, path: try w.reader.path(of: item.ino),
                detail: "another device's edit reached the server first; this device's edit is kept as a conflict version"))
            return effects
        }
        trace("upload: \(Self.short(digest)) kept as a conflict version, r\(result.revision)\(recorded == nil ? "; written meanwhile: again" : underWriters ? "; open for writing: the base stays" : "")", ino: item.ino)
        guard let recorded else { return .again }
        runAfterCommit(recorded)
        observer.invalidate(recorded.invalidations)
        if underWriters {
            setConnected(true, error: nil)
            return .done
        }
        // What else changed on the server while this edit waited (another device's rename,
        // move, chmod or attributes) came on the feed as older revisions, which the feed left
        // to this answer: it applies here too, as far as no local change of it is queued.
        try rebase(item.ino, on: result, keepContent: true)
        setConnected(true, error: nil)
        return .done
    }

    /// The same for every send of one edit: a retried send (its answer lost) adds nothing twice.
    static func conflictVersionID(_ item: ItemID, base: Revision, digest: ContentDigest) -> ItemID {
        ItemID(String(ContentDigest.of(Array("\(item)/\(base)/\(digest.hex)".utf8)).hex.prefix(32)))
    }

    /// This device's name as the server records it with what it saves.
    var savingDevice: String { Self.deviceLabel(configuration.deviceName) }

    /// The device name a version carries, within `ConflictVersion.maxDeviceBytes` (cut at a
    /// character, never inside one).
    static func deviceLabel(_ name: String) -> String {
        var label = ""
        for character in name {
            guard label.utf8.count + character.utf8.count <= ConflictVersion.maxDeviceBytes else { break }
            label.append(character)
        }
        return label.isEmpty ? "device" : label
    }
}

extension SyncEngine {
    /// Sends the resolution chosen here, as far as the server still has the versions it names:
    /// a version another device resolved meanwhile is that device's choice, and a `keep` gone
    /// that way leaves the current content. A refusal for a changed revision or a version gone
    /// takes the server's state and goes again; the answer clears the resolution with the
    /// revision it made.
    func sendResolution(_ item: LocalItem) async throws -> Outcome {
        guard let base = item.revision, let chosen = try store.read({ try $0.resolution(of: item.ino) }) else { return .done }
        let still = Set(item.conflicts.map(\.id))
        let settled = chosen.settled.intersection(still)
        let keep = chosen.keep.flatMap { still.contains($0) ? $0 : nil }
        let copies = chosen.copies.intersection(still)
        guard !settled.isEmpty else {
            try store.write { w in try w.setResolution(item.ino, nil) }
            return .done
        }
        do {
            let result = try await remote.resolveConflicts(item.itemID, ResolveConflictsRequest(
                baseRevision: base, settled: settled.sorted { $0.rawValue < $1.rawValue }, keep: keep, copies: copies.sorted { $0.rawValue < $1.rawValue }))
            trace("resolution from r\(base) (keep \(keep?.rawValue ?? "current")): answer r\(result.revision) \(Self.short(result.digest))", ino: item.ino)
            runAfterCommit(try store.write { w in
                var effects = EffectsAfterCommit()
                try adoptMetadata(item.ino, result, sentFrom: base, w, &effects)
                try w.setResolution(item.ino, nil)
                return effects
            })
            observer.invalidate([.inode(item.ino)])
            return .done
        } catch let RemoteError.refused(code, _, current) where code == .revisionConflict || code == .versionNotFound {
            let server: ItemMetadata
            if let current { server = current } else { server = try await remote.item(item.itemID) }
            trace("resolution from r\(base) (keep \(keep?.rawValue ?? "current")): \(code), rebased on r\(server.revision) \(Self.short(server.digest))", ino: item.ino)
            return try rebase(item.ino, on: server).outcome
        }
    }
}
