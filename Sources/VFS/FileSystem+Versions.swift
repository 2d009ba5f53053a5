import Foundation
import ItemModel
import LocalState

/// The versions folder, `.ubiq-versions` at the top of the mount: every conflict version this
/// device shows, as a read-only file named `VERSION.EXT` (the version's identifier, and the
/// extension of the file it belongs to, so that editors and `file` treat it alike). Its files
/// are placeholders of the version's content: opened, they download it like any other, so
/// `cat`, `cp`, `diff` and editors read it, and listing downloads nothing. The folder is made
/// to match on each lookup and listing in it, so it never lists a version that a resolution
/// settled. Nothing in it can be changed (`EROFS`), and it is never sent to the server.
extension FileSystem {
    /// The versions the folder should hold, by file name.
    static func versionFiles(_ r: LocalReader) throws -> [String: ConflictVersion] {
        var wanted: [String: ConflictVersion] = [:]
        for item in try r.itemsWithConflicts() {
            let settled = try r.resolution(of: item.ino)?.settled ?? []
            for version in item.conflicts where !settled.contains(version.id) {
                wanted[ConflictVersion.fileName(version.id, of: item.name)] = version
            }
        }
        return wanted
    }

    /// Makes the versions folder hold a file for each version this device shows, and no other.
    /// Written only when something differs: lookups in the folder come often.
    func refreshVersionsFolder() throws(FSError) {
        guard let folder = versionsFolder else { return }
        let differs: Bool
        do {
            differs = try store.read { r in
                try Set(Self.versionFiles(r).keys) != Set(r.children(of: folder).map(\.name))
            }
        } catch { throw .io }
        guard differs else { return }
        let removed = try commit(Rerunnable { w -> [LocalItem] in
            var wanted = try Self.versionFiles(w.reader)
            var removed: [LocalItem] = []
            for row in try w.reader.children(of: folder) where wanted.removeValue(forKey: row.name) == nil {
                try w.delete(row.ino)
                removed.append(row)
            }
            for (name, version) in wanted {
                try w.insert(LocalItem(
                    itemID: .random(), parent: folder, name: name, kind: .file, size: version.size, mode: 0o444, uid: getuid(), gid: getgid(),
                    created: version.modified, modified: version.modified, changed: version.modified, serverDigest: version.digest,
                    content: .placeholder))
            }
            return removed
        })
        // A reader that has one open goes on reading it to the end.
        for row in removed {
            if !openFiles.detachIfOpen(row) { cache.remove(row.ino) }
            content.cancelDownload(row.ino)
        }
    }

    /// The name a lookup or listing of `parent` keeps it under: the versions folder's own.
    func storedName(_ name: String, in parent: Int64) -> String {
        parent == LocalItem.rootIno && name == LocalItem.versionsFolderShownName ? LocalItem.versionsFolderName : name
    }

    /// Refuses a change of the name `name` in `parent` that would be in the versions folder,
    /// or would be the folder itself.
    func refuseChange(in parent: Int64, name: [UInt8]) throws(FSError) {
        if parent == versionsFolder || (parent == LocalItem.rootIno && name.elementsEqual(LocalItem.versionsFolderShownName.utf8)) {
            throw .readOnlyFileSystem
        }
    }

    /// Refuses a change of `item` when it is the versions folder or one of its files.
    func refuseChange(of item: LocalItem) throws(FSError) {
        if versionsFolder != nil && (item.ino == versionsFolder || item.parent == versionsFolder) { throw .readOnlyFileSystem }
    }
}
