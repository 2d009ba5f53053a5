import ItemModel
import LocalState
import OpenFiles

extension FileSystem {
    public func unlink(parent: Int64, name: [UInt8]) throws(FSError) {
        try remove(parent: parent, name: name, folder: false)
    }

    public func removeDirectory(parent: Int64, name: [UInt8]) throws(FSError) {
        try remove(parent: parent, name: name, folder: true)
    }

    func remove(parent: Int64, name: [UInt8], folder: Bool) throws(FSError) {
        try refuseChange(in: parent, name: name)
        let n = try Self.name(name)
        let now = Self.now()
        let removed = try commit(Rerunnable { [self] w -> LocalItem in
            guard let item = try w.reader.child(of: parent, named: n.rawValue) else { throw FSError.notFound }
            if folder {
                guard item.kind == .folder else { throw FSError.notADirectory }
                if try w.reader.childCount(of: item.ino) > 0 { throw FSError.notEmpty }
            } else if item.kind == .folder {
                throw FSError.isADirectory
            }
            try deleteRow(item, w)
            try touchFolder(parent, w, now)
            return item
        })
        if !openFiles.detachIfOpen(removed) {
            cache.remove(removed.ino)
            // Space came back: the maintenance pass makes the disk-full reserve again, if a full
            // disk used it up (a later fill must find it there to record its failure).
            content.contentChangedLocally()
        }
        content.cancelDownload(removed.ino)
        content.outboxChanged()
    }

    /// Removes an item's row and queues its deletion on the server, in one transaction.
    ///
    /// Also for an item that has no server revision yet: its create may be in flight, and the
    /// queued deletion both removes what that create makes and keeps the create's echo on the
    /// change feed from bringing the item back. (The outbox asks the server first; an item
    /// that never went up costs one lookup.)
    func deleteRow(_ item: LocalItem, _ w: LocalWriter) throws {
        let excluded = try w.reader.isExcluded(item.ino)
        try w.dropOps(for: item.ino)
        if !excluded && item.revision == nil { try w.abandonSentContents(of: item.ino, itemID: item.itemID) }
        try w.forgetSentContents(of: item.ino)
        try w.delete(item.ino)
        if !excluded {
            try w.enqueue(.delete, ino: item.ino, itemID: item.itemID, revision: item.revision)
        }
    }

    /// `whiteout` (RENAME_WHITEOUT, for overlay file systems) leaves a device node behind, which
    /// the mount does not keep: refused.
    public func rename(parent: Int64, name: [UInt8], newParent: Int64, newName: [UInt8], noReplace: Bool, exchange: Bool, whiteout: Bool = false) throws(FSError) {
        if whiteout { throw .invalidArgument }
        if exchange { throw .invalidArgument }
        try refuseChange(in: parent, name: name)
        try refuseChange(in: newParent, name: newName)
        let from = try Self.name(name)
        let to = try Self.name(newName)
        let now = Self.now()
        var replaced: LocalItem?
        try commit(Rerunnable { [self] w in
            replaced = nil  // `commit` may run this body a second time (a full disk)
            let r = w.reader
            guard var source = try r.child(of: parent, named: from.rawValue) else { throw FSError.notFound }
            guard let destination = try r.item(newParent) else { throw FSError.notFound }
            guard destination.kind == .folder else { throw FSError.notADirectory }
            if parent == newParent && from == to { return }
            // A folder cannot move below itself.
            if try r.isWithin(newParent, source.ino) { throw FSError.invalidArgument }
            let wasExcluded = try r.isExcluded(source.ino)
            var tookOver: LocalItem?
            if let target = try r.child(of: newParent, named: to.rawValue) {
                if noReplace { throw FSError.exists }
                if target.kind == .folder {
                    guard source.kind == .folder else { throw FSError.isADirectory }
                    if try r.childCount(of: target.ino) > 0 { throw FSError.notEmpty }
                } else if source.kind == .folder {
                    throw FSError.notADirectory
                }
                if try source.kind == .file && source.revision == nil && target.revision != nil && !r.isExcluded(target.ino) {
                    // An editor's safe save (write a temp file, rename it over): the new content
                    // becomes the next version of the same item, with the target's base
                    // revision, so the server checks it like any edit.
                    if try r.hasStartedCreate(source.ino) {
                        // The temp file's own create may be on its way: the item it makes is
                        // nobody's from now on. Its deletion is queued at once, so that until it
                        // is gone the change feed keeps it away from this device, and a later
                        // save refused because it still holds the temp name sends it first.
                        try w.enqueue(.delete, ino: source.ino, itemID: source.itemID, revision: nil)
                        try w.abandonSentContents(of: source.ino, itemID: source.itemID)
                    }
                    try w.dropOps(for: target.ino)
                    try w.passSentContents(from: target.ino, to: source.ino)
                    try w.delete(target.ino)
                    source.itemID = target.itemID
                    source.revision = target.revision
                    source.serverDigest = target.serverDigest
                    tookOver = target
                } else {
                    try deleteRow(target, w)
                }
                replaced = target
            }
            source.parent = newParent
            source.name = to.rawValue
            source.changed = now
            try w.update(source)
            try touchFolder(parent, w, now)
            if newParent != parent { try touchFolder(newParent, w, now) }
            let isExcluded = try r.isExcluded(source.ino)
            switch (wasExcluded, isExcluded) {
            case (false, false):
                if source.revision != nil {
                    try w.enqueue(.move, ino: source.ino)
                    if source.content == .dirty { try w.enqueue(.content, ino: source.ino) }
                    if let old = tookOver { try queueDifferences(of: source, from: old, w) }
                } else if try r.hasStartedCreate(source.ino) {
                    // The create in flight carries the old name and place. The move goes in the
                    // queue now, in its turn: a follow-up queued when the create is answered
                    // would come after a later deletion of the old folder, which the server
                    // then refuses as not empty (a false conflict that restored the folder).
                    try w.enqueue(.move, ino: source.ino)
                }
            case (false, true):
                // Into a `.nosync` folder: local-only from now on, gone from the server.
                try forgetOnServer(source, w)
            case (true, false):
                try announce(source, w)
            case (true, true):
                break
            }
        })
        if let replaced {
            if !openFiles.detachIfOpen(replaced) { cache.remove(replaced.ino) }
        }
        content.outboxChanged()
    }

    /// A safe save's file keeps its own mode and attributes: those that differ from the file
    /// it replaced go up too (a content upload carries neither). Its noted attribute changes
    /// become exactly those that differ.
    func queueDifferences(of source: LocalItem, from old: LocalItem, _ w: LocalWriter) throws {
        if source.mode & 0o7777 != old.mode & 0o7777 { try w.enqueue(.attributes, ino: source.ino) }
        let differing = Set(source.xattrs.keys).union(old.xattrs.keys).filter { source.xattrs[$0] != old.xattrs[$0] }
        try w.settleXattrChanges(source.ino, try w.reader.xattrChanges(of: source.ino).subtracting(differing))
        for name in differing { try w.noteXattrChange(source.ino, name: name) }
        if !differing.isEmpty { try w.enqueue(.xattrs, ino: source.ino) }
    }

    /// Queues the deletion of an item (and what is below it) that became local-only: deepest
    /// first, each with its base revision, as `rm -r` goes (a deletion is never recursive, so a
    /// change made elsewhere below it wins, see deleteRow). An item whose create may be on its way
    /// is deleted too, once that create lands.
    func forgetOnServer(_ item: LocalItem, _ w: LocalWriter) throws {
        let below = try w.reader.descendants(of: item.ino)
        let parents = Dictionary(uniqueKeysWithValues: below.map { ($0.ino, $0.parent) })
        func depth(_ ino: Int64) -> Int {
            var (count, at) = (0, ino)
            while let parent = parents[at] ?? nil, parent != item.ino { (count, at) = (count + 1, parent) }
            return count
        }
        // Each depth found once, not at every comparison of the sort.
        let deepestFirst = below.map { (depth: depth($0.ino), item: $0) }.sorted { $0.depth > $1.depth }.map(\.item)
        for var d in deepestFirst + [item] {
            let onServer = try d.revision != nil || w.reader.hasStartedCreate(d.ino)
            try w.dropOps(for: d.ino)
            if onServer {
                if d.revision == nil { try w.abandonSentContents(of: d.ino, itemID: d.itemID) }
                try w.enqueue(.delete, ino: d.ino, itemID: d.itemID, revision: d.revision)
            }
            try w.forgetSentContents(of: d.ino)
            d.revision = nil
            d.itemID = .random()
            try w.update(d)
        }
    }

    /// Queues the creation of an item (and what is below it) that stopped being local-only.
    func announce(_ item: LocalItem, _ w: LocalWriter) throws {
        var all = [item]
        all += try w.reader.descendants(of: item.ino)
        for var d in all where d.kind.isSynced {
            d.revision = nil
            if d.kind == .file { d.content = d.content == .placeholder ? .placeholder : .dirty }
            try w.update(d)
            try w.enqueue(d.kind == .file ? .content : .create, ino: d.ino)
        }
    }
}
