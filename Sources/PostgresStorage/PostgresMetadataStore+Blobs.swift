import Foundation
import ItemModel
import PostgresNIO
import ServerStorage

/// Which contents each account may use, the small contents kept inline, and their collection.
extension PostgresMetadataStore {
    public func recordBlob(_ digest: ContentDigest, size: Int64, for account: AccountRef) async throws {
        let granted = now()
        try await write { tx in try await Self.grant(digest, size: size, to: account, at: granted, tx) }
    }

    /// Gives `account` the use of a stored blob (again), inside the caller's transaction.
    static func grant(_ digest: ContentDigest, size: Int64, to account: AccountRef, at granted: Timestamp, _ tx: Transaction) async throws {
        try await tx.run("""
            INSERT INTO account_blobs (account_key, digest, size, granted) VALUES (\(account.key), \(digest.hex), \(size), \(granted))
            ON CONFLICT (account_key, digest) DO UPDATE SET granted = excluded.granted
            """)
    }

    public func renewBlob(_ digest: ContentDigest, for account: AccountRef) async throws -> Int64? {
        if digest == .empty { return 0 }
        let granted = now()
        return try await write { tx in
            try await tx.rows("""
                UPDATE account_blobs SET granted = \(granted) WHERE account_key = \(account.key) AND digest = \(digest.hex) RETURNING size
                """).first?.decode(Int64.self)
        }
    }

    public func blobSize(_ digest: ContentDigest, for account: AccountRef) async throws -> Int64? {
        if digest == .empty { return 0 }
        return try await rows("SELECT size FROM account_blobs WHERE account_key = \(account.key) AND digest = \(digest.hex)").first?.decode(Int64.self)
    }

    /// The size of the content an item or a version names: the account's grant of it, which
    /// must agree with the size the client declared.
    static func blobSize(_ digest: ContentDigest, account: AccountRef, declared: Int64?, _ tx: Transaction) async throws -> Int64 {
        let size: Int64
        if digest == .empty {
            size = 0
        } else {
            // FOR KEY SHARE: a collection (`forgetUnreferencedBlobs`) that took this grant first
            // is waited for, and then the grant is gone; one that comes later waits for this
            // transaction and then sees the item that names the content.
            let rows = try await tx.rows("""
                SELECT size FROM account_blobs WHERE account_key = \(account.key) AND digest = \(digest.hex) FOR KEY SHARE
                """)
            guard let granted = try rows.first?.decode(Int64.self) else { throw StorageError.blobNotFound(digest) }
            size = granted
        }
        if let declared, declared != size { throw StorageError.sizeMismatch(declared: declared, actual: size) }
        return size
    }

    public func forgetUnreferencedBlobs(grantedBefore cutoff: Timestamp) async throws -> Int {
        try await write { tx in
            // First the candidates' grants are locked. A write that names a content locks its
            // grant too (`blobSize`, FOR KEY SHARE): one that came first is waited for here, and
            // the next statement, with a snapshot taken after it committed, sees its item; one
            // that comes later waits for this commit and finds the grant gone (`blobNotFound`).
            try await tx.run("""
                SELECT 1 FROM account_blobs WHERE digest IN (SELECT digest FROM account_blobs GROUP BY digest HAVING MAX(granted) < \(cutoff))
                FOR UPDATE
                """)
            // What names a blob: live items, their conflict versions, earlier versions, shares.
            let forgotten = try await tx.rows("""
                WITH forgotten AS (
                    SELECT digest FROM account_blobs GROUP BY digest HAVING MAX(granted) < \(cutoff)
                    EXCEPT SELECT digest FROM items WHERE NOT deleted AND digest IS NOT NULL
                    EXCEPT SELECT v ->> 'digest' FROM items, jsonb_array_elements(items.conflicts) AS v
                        WHERE NOT items.deleted AND items.conflicts IS NOT NULL
                    EXCEPT SELECT digest FROM earlier_versions
                    EXCEPT SELECT digest FROM share_entries
                ), grants AS (
                    DELETE FROM account_blobs WHERE digest IN (SELECT digest FROM forgotten) RETURNING digest
                ), inline AS (
                    DELETE FROM inline_contents WHERE digest IN (SELECT digest FROM forgotten) RETURNING digest
                )
                SELECT digest FROM forgotten
                """)
            return forgotten.count
        }
    }

    public func isGranted(_ digest: ContentDigest) async throws -> Bool {
        try await rows("SELECT EXISTS (SELECT 1 FROM account_blobs WHERE digest = \(digest.hex))").first?.decode(Bool.self) ?? false
    }

    public func inlineContent(_ digest: ContentDigest) async throws -> Data? {
        try await rows("SELECT bytes FROM inline_contents WHERE digest = \(digest.hex)").first?.decode(Data.self)
    }

    public func grantedContentBytes() async throws -> Int64 {
        try await rows("SELECT COALESCE(SUM(size), 0)::bigint FROM (SELECT MAX(size) AS size FROM account_blobs GROUP BY digest) AS per_digest")
            .first?.decode(Int64.self) ?? 0
    }

    public func pendingBlobDeletions(limit: Int) async throws -> [ContentDigest] {
        try await rows("SELECT digest FROM blob_deletions ORDER BY queued, digest LIMIT \(limit)")
            .compactMap { try? ContentDigest(hex: $0.decode(String.self)) }
    }

    public func finishBlobDeletion(_ digest: ContentDigest) async throws {
        try await write { tx in try await tx.run("DELETE FROM blob_deletions WHERE digest = \(digest.hex)") }
    }
}
