extension ServerStorage {
    /// The embedded default: SQLite (`DIR/metadata.sqlite`) and a blob folder (`DIR/blobs`).
    public static func embedded(dataDirectory dir: String) throws -> ServerStorage {
        let metadata = try SQLiteMetadataStore(path: dir + "/metadata.sqlite")
        let blobs = try FileBlobStore(root: dir + "/blobs")
        return ServerStorage(accounts: metadata, metadata: metadata, changes: metadata, keyValues: metadata, blobs: blobs, shares: metadata)
    }
}
