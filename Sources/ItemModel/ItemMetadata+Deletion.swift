extension ItemMetadata {
    /// What a delete of `root` removes, in the order its tombstones are written: depth-first,
    /// children before their folder, so a replica applying them in order never sees a folder
    /// vanish while it still has children. `children` lists a folder's live children (and may
    /// refuse, for a folder that must be empty).
    public static func deletionOrder(of root: ItemMetadata, children: (ItemMetadata) throws -> [ItemMetadata]) rethrows -> [ItemMetadata] {
        var doomed: [ItemMetadata] = []
        func collect(_ folder: ItemMetadata) throws {
            for kid in try children(folder) {
                if kid.kind == .folder { try collect(kid) }
                doomed.append(kid)
            }
        }
        if root.kind == .folder { try collect(root) }
        doomed.append(root)
        return doomed
    }

    /// The item as deleted: a deleted file's conflict versions go with it.
    public var tombstone: ItemMetadata {
        var item = self
        item.deleted = true
        item.conflicts = []
        return item
    }
}
