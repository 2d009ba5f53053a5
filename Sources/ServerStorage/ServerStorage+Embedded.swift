extension ServerStorage {
    /// The embedded default: SQLite (`DIR/metadata.sqlite`) and a blob folder (`DIR/blobs`).
    public static func embedded(dataDirectory dir: String) throws -> ServerStorage {
        .sqlite(try SQLiteMetadataStore(path: dir + "/metadata.sqlite"), blobs: try FileBlobStore(root: dir + "/blobs"))
    }

    /// Everything but blobs in one SQLite store.
    public static func sqlite(_ store: SQLiteMetadataStore, blobs: any BlobStore) -> ServerStorage {
        ServerStorage(accounts: store, metadata: store, changes: store, keyValues: store, blobs: blobs, shares: store)
    }
}
