import CacheFiles
import Foundation
import ItemModel
import LocalState

extension FileSystem {
    public func getXattr(_ ino: Int64, name: String) throws(FSError) -> [UInt8] {
        // `ls -l` asks for ACLs (system.posix_acl_*) on every file. EOPNOTSUPP says "no ACLs on
        // this file system", which ls remembers for the whole device; ENODATA would make it ask
        // again for every file, each a round trip. Answered without touching the database.
        if name.hasPrefix("system.") { throw .notSupported }
        guard name.hasPrefix("user.") else { throw .noAttribute }
        let item = try item(ino)
        if name.hasPrefix(ItemStatus.prefix) {
            if name == "user.ubiq.identityToken" {
                guard ino == LocalItem.rootIno, let identity = try? store.read({ try $0.accountIdentity() }) else { throw .noAttribute }
                return Array(identity.utf8)
            }
            guard let value = status(of: item).attributes.first(where: { $0.0 == name })?.1 else { throw .noAttribute }
            return Array(value.utf8)
        }
        guard let value = item.xattrs[name] else { throw .noAttribute }
        return Array(value)
    }

    /// The status attributes of the item at `path` (from the container's root), found as the
    /// kernel would look it up, without following a link at the end.
    public func statusAttributes(atPath path: String) throws(FSError) -> [String: String] {
        Dictionary(status(of: try item(atPath: path)).attributes, uniquingKeysWith: { first, _ in first })
    }

    /// The item at `path` (from the container's root), looked up name by name as the kernel
    /// does, without following a link at the end.
    public func item(atPath path: String) throws(FSError) -> LocalItem {
        var ino = LocalItem.rootIno
        for component in path.split(separator: "/") {
            guard let found = try lookup(parent: ino, name: Array(component.utf8)) else { throw .notFound }
            ino = found.ino
        }
        return try item(ino)
    }

    /// Names only, from the item's row alone: listing must stay one query (tools list the
    /// attributes of every file they copy or show).
    public func listXattrs(_ ino: Int64) throws(FSError) -> [String] {
        let item = try item(ino)
        // Linux keeps `user.*` attributes to files and folders: for a link, a FIFO or a socket
        // the kernel answers every read ENODATA before asking, so none is listed
        // (`ubiq status` shows their state).
        guard item.kind == .file || item.kind == .folder else { return [] }
        var names = ItemStatus.names(downloadingError: item.downloadError != nil, uploadingError: item.uploadError != nil, revision: item.revision != nil,
                                       conflictVersions: hasUnsettledConflicts(item), shares: !shares(of: item).isEmpty)
        // Known once the server was first reached.
        if ino == LocalItem.rootIno, (try? store.read({ try $0.accountIdentity() })) != nil { names.append("user.ubiq.identityToken") }
        names += item.xattrs.keys.sorted()
        return names
    }

    /// The conflict versions a resolution chosen here drops, before the server has it.
    func settledHere(_ item: LocalItem) -> Set<ItemID> {
        // Nearly every file has no versions: no query for those.
        guard !item.conflicts.isEmpty else { return [] }
        return (try? store.read { try $0.resolution(of: item.ino) })??.settled ?? []
    }

    func hasUnsettledConflicts(_ item: LocalItem) -> Bool {
        let settled = settledHere(item)
        return item.conflicts.contains { !settled.contains($0.id) }
    }

    /// How far the file's running download is, in percent; nil when none runs.
    public func downloadPercent(_ ino: Int64) -> Int? { content.downloadPercent(ino) }

    public func status(of item: LocalItem) -> ItemStatus {
        let excluded = (try? store.read { try $0.isExcluded(item.ino) }) ?? false
        let pending = (try? store.read { try $0.pendingOps(for: item.ino) }) ?? 0
        let upload = openFiles.upload(item.ino)
        var item = item
        if let l = openFiles.beingWritten(item.ino) { item.size = l.size }
        return ItemStatus(item: item, excluded: excluded, pendingOps: pending, downloadPercent: content.downloadPercent(item.ino),
                          uploading: upload.uploading, uploadPercent: upload.percent, settledHere: settledHere(item), shares: shares(of: item))
    }

    /// The item's links as this mount knows them (`ubiq share`); only shared items have any.
    func shares(of item: LocalItem) -> [KnownShare] {
        (try? store.read { try $0.knownShares(of: item.itemID, at: Self.now()) }) ?? []
    }

    public func setXattr(_ ino: Int64, name: String, value: [UInt8], create: Bool, replace: Bool) throws(FSError) {
        if name.hasPrefix(ItemStatus.prefix) {
            guard ItemStatus.writable.contains(name) else { throw .readOnlyAttribute }
            let text = String(decoding: value, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            do {
                switch (name, text) {
                // The pin itself asks for the downloads (the background starts pinned files
                // that need content); no download request is recorded, so after an unpin none
                // of them starts any more.
                case ("user.ubiq.pinned", "1"): try content.setPinned(ino, true)
                case ("user.ubiq.pinned", "0"): try content.setPinned(ino, false)
                case ("user.ubiq.downloadingStatus", "current"): try content.startDownload(ino)
                case ("user.ubiq.downloadingStatus", "notDownloaded"): try content.evict(ino)
                case ("user.ubiq.resolve", "keep-current"): try resolveConflicts(ino, keep: nil)
                case ("user.ubiq.resolve", "keep-both"): try resolveConflicts(ino, keep: nil, asCopies: true)
                case ("user.ubiq.resolve", let choice) where choice.hasPrefix("keep:"): try resolveConflicts(ino, keep: ItemID(String(choice.dropFirst(5))))
                default: throw FSError.invalidArgument
                }
            } catch let e as FSError {
                throw e
            } catch is EvictRefusal {
                throw .busyWithUnsentChanges
            } catch {
                throw Self.fsError(error)
            }
            return
        }
        guard name.hasPrefix("user."), name.utf8.count > 5 else { throw .notSupported }
        try commit(Rerunnable { [self] w in
            guard var item = try w.reader.item(ino) else { throw FSError.notFound }
            try refuseChange(of: item)
            guard name.utf8.count <= SyncedXattr.maxNameBytes else { throw FSError.nameTooLong }
            let exists = item.xattrs[name] != nil
            if create && exists { throw FSError.exists }
            if replace && !exists { throw FSError.noAttribute }
            item.xattrs[name] = Data(value)
            do { try SyncedXattr.validate(item.xattrs) } catch { throw FSError.attributeTooLarge }
            item.changed = Self.now()
            try w.update(item)
            try queueXattrChange(item, name: name, w)
        })
        content.outboxChanged()
    }

    public func removeXattr(_ ino: Int64, name: String) throws(FSError) {
        if name.hasPrefix(ItemStatus.prefix) { throw .readOnlyAttribute }
        guard name.hasPrefix("user.") else { throw .noAttribute }
        try commit(Rerunnable { [self] w in
            guard var item = try w.reader.item(ino) else { throw FSError.notFound }
            try refuseChange(of: item)
            guard item.xattrs.removeValue(forKey: name) != nil else { throw FSError.noAttribute }
            item.changed = Self.now()
            try w.update(item)
            try queueXattrChange(item, name: name, w)
        })
        content.outboxChanged()
    }

    /// Resolves the file's conflicts as this device sees them: every version it lists goes, and
    /// `keep` (one of them) becomes current; nil keeps the current content. `asCopies`: each
    /// version becomes a sibling file instead (the server makes them: they appear with its
    /// answer). Queued for the server, and shown at once. A file without conflict versions,
    /// or a `keep` it does not have, is `EINVAL`.
    func resolveConflicts(_ ino: Int64, keep: ItemID?, asCopies: Bool = false) throws(FSError) {
        try commit(Rerunnable { w in
            guard let item = try w.reader.item(ino) else { throw FSError.notFound }
            let earlier = try w.reader.resolution(of: ino)
            let settled = earlier?.settled ?? []
            let open = item.conflicts.filter { !settled.contains($0.id) }
            guard item.kind == .file, !open.isEmpty else { throw FSError.invalidArgument }
            if let keep, !open.contains(where: { $0.id == keep }) { throw FSError.invalidArgument }
            let copies = (earlier?.copies ?? []).union(asCopies ? open.map(\.id) : [])
            try w.setResolution(ino, ConflictResolution(settled: settled.union(open.map(\.id)), keep: keep, copies: copies))
            try w.enqueue(.resolve, ino: ino)
        })
        content.outboxChanged()
    }

    /// Records which attribute changed, for a merge with changes made elsewhere meanwhile,
    /// and queues the send of an uploaded item's attributes (a new item's create carries
    /// them; a change made while the create is in flight is sent after it, see
    /// `followUpCreate`).
    func queueXattrChange(_ item: LocalItem, name: String, _ w: LocalWriter) throws {
        guard try !w.reader.isExcluded(item.ino) else { return }
        try w.noteXattrChange(item.ino, name: name)
        if item.revision != nil { try w.enqueue(.xattrs, ino: item.ino) }
    }
}
