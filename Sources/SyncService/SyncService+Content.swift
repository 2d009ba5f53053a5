import Foundation
import ItemModel
import NIOCore
import ServerStorage
import SyncAPI

extension SyncService {
    /// The size of `digest`'s content when `account` may use it (it uploaded it), else nil.
    /// Existence is answered per account: one account cannot probe what another has stored.
    public func grantedSize(_ digest: ContentDigest, for account: AccountRef) async throws -> Int64? {
        try await storage.metadata.blobSize(digest, for: account)
    }

    /// `grantedSize` for a client that asks whether it must send the content: the grant is
    /// renewed, so that the blob stays for the retention even if nothing names it yet.
    public func renewedSize(_ digest: ContentDigest, for account: AccountRef) async throws -> Int64? {
        try await storage.metadata.renewBlob(digest, for: account)
    }

    /// Deletes the blobs that nothing names and that no account was granted (uploaded or
    /// asked about) since `cutoff`: first the grants, so that no request can name them any
    /// more, then the files, each only if no upload granted it again meanwhile. Returns how
    /// many files went.
    public func collectBlobs(grantedBefore cutoff: Timestamp) async throws -> Int {
        _ = try await storage.metadata.forgetUnreferencedBlobs(grantedBefore: cutoff)
        var removed = 0
        for digest in try await storage.blobs.digests(writtenBefore: cutoff) where try await removeUnlessGranted(digest) {
            removed += 1
        }
        return removed
    }

    /// Removes the blob's file unless an account may use it, with the blob's gate held
    /// (`BlobGate`); true when it went.
    func removeUnlessGranted(_ digest: ContentDigest) async throws -> Bool {
        let storage = self.storage
        return try await blobGate.holding(digest) { () async throws -> Bool in
            guard try await !storage.metadata.isGranted(digest) else { return false }
            try await storage.blobs.remove(digest)
            return true
        }
    }

    /// A reader of `digest`'s content. The caller has checked the right to it: the account's
    /// grant (`grantedSize`), or a live item of the account's container that names it.
    public func openContent(_ digest: ContentDigest) async throws -> any BlobReader {
        do {
            return try await storage.blobs.openReader(digest)
        } catch BlobStoreError.notFound(let missing) {
            // A small content that came with a batch of creates is kept by the metadata store.
            guard let data = try await storage.metadata.inlineContent(digest) else { throw APIError(BlobStoreError.notFound(missing)) }
            return DataBlobReader(data)
        } catch let error as BlobStoreError {
            throw APIError(error)
        }
    }

    /// Starts an upload of content declared to hash to `declared`; `length` is the size the
    /// sender announced, if it did. Nothing is stored until `ContentUpload.finish`.
    public func beginUpload(_ declared: ContentDigest, length: Int64?, for account: AccountRef) async throws -> ContentUpload {
        if let length, length > maxUploadBytes {
            throw APIError(.payloadTooLarge, "the body is \(length) bytes; this server accepts at most \(maxUploadBytes)")
        }
        return ContentUpload(service: self, declared: declared, account: account, writer: try await blobWriter())
    }

    /// Stores content sent inline with a create or an update, exactly as an upload of it
    /// would: hashed against the declared digest, durable, then given to the account.
    func storeInline(_ content: Data, declared: ContentDigest, for account: AccountRef) async throws {
        guard content.count <= SyncProtocol.maxInlineContent else { throw Self.inlineTooLarge }
        let writer = try await blobWriter()
        do {
            do { try await writer.write(ByteBuffer(bytes: content)) } catch let error as BlobStoreError { throw APIError(error) }
            try await commitAndGrant(writer, expecting: declared, to: account)
        } catch {
            await writer.abort()
            throw error
        }
    }

    /// Makes the blob durable, then gives the account its use, with the blob's gate held
    /// between the two (`BlobGate`).
    @discardableResult
    func commitAndGrant(_ writer: any BlobWriter, expecting declared: ContentDigest, to account: AccountRef) async throws -> (digest: ContentDigest, size: Int64) {
        let owned = OwnedWriter(writer: writer)
        let storage = self.storage
        return try await blobGate.holding(declared) {
            let (digest, size) = try await Self.commit(owned.writer, expecting: declared)
            try await storage.metadata.recordBlob(digest, size: size, for: account)
            return (digest, size)
        }
    }

    static let inlineTooLarge = APIError(
        .payloadTooLarge, "inline content is at most \(SyncProtocol.maxInlineContent) bytes; upload it as a blob")

    func blobWriter() async throws -> any BlobWriter {
        do { return try await storage.blobs.makeWriter() } catch let error as BlobStoreError { throw APIError(error) }
    }

    static func commit(_ writer: any BlobWriter, expecting declared: ContentDigest) async throws -> (digest: ContentDigest, size: Int64) {
        do {
            return try await writer.commit(expecting: declared)
        } catch let error as BlobStoreError {
            throw APIError(error)
        }
    }
}

/// A writer on its way into the blob's gate: it belongs to one request alone, which waits for
/// the gate's body to finish with it.
struct OwnedWriter: @unchecked Sendable {
    let writer: any BlobWriter
}

/// One content upload in progress, fed by its transport as bytes arrive. Owned by one request.
public final class ContentUpload {
    let service: SyncService
    let declared: ContentDigest
    let account: AccountRef
    let writer: any BlobWriter

    init(service: SyncService, declared: ContentDigest, account: AccountRef, writer: any BlobWriter) {
        self.service = service
        self.declared = declared
        self.account = account
        self.writer = writer
    }

    public func write(_ bytes: ByteBuffer) async throws {
        if writer.bytesWritten + Int64(bytes.readableBytes) > service.maxUploadBytes {
            throw APIError(.payloadTooLarge, "the body is larger than \(service.maxUploadBytes) bytes; nothing was stored")
        }
        do { try await writer.write(bytes) } catch let error as BlobStoreError { throw APIError(error) }
    }

    /// Drops what was written: for an upload that failed or was refused (a writer dropped
    /// without it cleans up too, but later).
    public func abort() async { await writer.abort() }

    /// Checks the bytes against the declared digest, makes them durable, and only then gives
    /// the account the use of them: an acknowledged upload survives a crash.
    public func finish() async throws -> BlobInfo {
        do {
            let (digest, size) = try await service.commitAndGrant(writer, expecting: declared, to: account)
            return BlobInfo(digest: digest, size: size)
        } catch {
            await writer.abort()
            throw error
        }
    }
}
