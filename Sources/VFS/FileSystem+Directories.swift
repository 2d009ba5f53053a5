import ItemModel
import LocalState

extension FileSystem {
    public func openDirectory(_ ino: Int64) throws(FSError) -> UInt64 {
        guard try item(ino).kind == .folder else { throw .notADirectory }
        return directories.withLock { d in
            let id = d.next
            d.next += 1
            d.open[id] = OpenDirectory(ino: ino)
            return id
        }
    }

    /// Entries from `offset` (an index into the snapshot; 0 is the first). A read at offset 0
    /// takes a new snapshot (the start of a listing, or a `rewinddir`); later offsets index into
    /// it, so they stay stable across the kernel's readdir calls.
    public func readDirectory(_ handle: UInt64, from offset: Int) throws(FSError) -> LazyMapSequence<ArraySlice<DirectoryEntry>, DirectoryEntry> {
        guard let dir = directories.withLock({ $0.open[handle] }) else { throw .badHandle }
        var entries = dir.entries ?? []
        if dir.entries == nil || offset == 0 {
            if dir.ino == versionsFolder { try refreshVersionsFolder() }
            do {
                entries = try store.read { try $0.children(of: dir.ino) }
                    // The versions folder is looked up, never listed; an item given its name
                    // elsewhere is hidden behind it.
                    .filter { dir.ino != LocalItem.rootIno || ($0.name != LocalItem.versionsFolderName && $0.name != LocalItem.versionsFolderShownName) }
                    .map { DirectoryEntry(name: $0.name, attributes: attributes(of: $0)) }
            } catch { throw .io }
            directories.withLock { $0.open[handle]?.entries = entries }
        }
        // A change after the snapshot moves its folders' times (see `FolderListings`), as the
        // kernel reads each entry; lazily, since it reads only as many as fit its buffer.
        return entries[min(offset, entries.count)...].lazy.map { [listings] e in
            guard e.attributes.kind == .folder else { return e }
            var shown = e
            shown.attributes.mtime = listings.modified(e.attributes.ino, stored: e.attributes.mtime)
            return shown
        }
    }

    public func closeDirectory(_ handle: UInt64) {
        _ = directories.withLock { $0.open.removeValue(forKey: handle) }
    }

    public func makeDirectory(parent: Int64, name: [UInt8], mode: UInt32, uid: UInt32, gid: UInt32) throws(FSError) -> NodeAttributes {
        try makeItemWithoutContent(.folder, parent: parent, name: name, mode: mode, uid: uid, gid: gid)
    }

    /// A folder, a link, a FIFO or a socket: an item whose row is all of it. The synced kinds'
    /// creates are queued (unless the place is local-only).
    func makeItemWithoutContent(
        _ kind: ItemKind, parent: Int64, name: [UInt8], mode: UInt32, target: String? = nil, uid: UInt32, gid: UInt32
    ) throws(FSError) -> NodeAttributes {
        try refuseChange(in: parent, name: name)
        let n = try Self.name(name)
        let now = Self.now()
        let made = try commit(Rerunnable { [self] w in
            guard let p = try w.reader.item(parent) else { throw FSError.notFound }
            guard p.kind == .folder else { throw FSError.notADirectory }
            if try w.reader.child(of: parent, named: n.rawValue) != nil { throw FSError.exists }
            let item = try w.insert(LocalItem(
                itemID: .random(), parent: parent, name: n.rawValue, kind: kind, size: Int64(target?.utf8.count ?? 0), mode: mode & 0o7777,
                uid: uid, gid: gid, created: now, modified: now, changed: now, content: .current, pinned: p.pinned, target: target))
            if try kind.isSynced && !w.reader.isExcluded(item.ino) { try w.enqueue(.create, ino: item.ino) }
            try touchFolder(parent, w, now)
            return item
        })
        content.outboxChanged()
        return attributes(of: made)
    }
}
