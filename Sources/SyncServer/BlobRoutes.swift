import Foundation
import HTTPTypes
import Hummingbird
import ItemModel
import NIOCore
import ServerStorage
import SyncAPI

extension SyncServer {
    /// `/v1/blobs/{digest}`: content by digest, its size, download and upload.
    func addBlobRoutes(to router: Router<ServerContext>) {
        router.head("/v1/blobs/:digest") { _, context in
            let account = try context.requireAccount()
            let digest = try blobDigest(context)
            guard let size = try await grantedSize(digest, for: account) else {
                throw APIError(.blobNotFound, "no content with digest \(digest)")
            }
            return Response(status: .ok, headers: [.contentLength: String(size)])
        }
        router.get("/v1/blobs/:digest") { request, context in
            let account = try context.requireAccount()
            let digest = try blobDigest(context)
            guard try await grantedSize(digest, for: account) != nil else {
                throw APIError(.blobNotFound, "no content with digest \(digest)")
            }
            return try await serveBlob(digest, request: request)
        }
        router.put("/v1/blobs/:digest") { request, context in try await uploadBlob(request, context) }
    }

    /// The size of `digest`'s content when `account` may use it.
    func grantedSize(_ digest: ContentDigest, for account: AccountRef) async throws -> Int64? {
        try await grants.value(for: GrantKey(account: account.key, digest: digest)) {
            try await storage.metadata.blobSize(digest, for: account)
        }
    }

    func uploadBlob(_ request: Request, _ context: ServerContext) async throws -> Response {
        let account = try context.requireAccount()
        let declared = try blobDigest(context)
        if let length = request.headers[.contentLength].flatMap({ Int64($0) }), length > configuration.maxUploadBytes {
            throw APIError(.payloadTooLarge, "the body is \(length) bytes; this server accepts at most \(configuration.maxUploadBytes)")
        }
        let writer = try storage.blobs.makeWriter()
        defer { writer.abort() }
        do {
            for try await buffer in request.body {
                if writer.bytesWritten + Int64(buffer.readableBytes) > configuration.maxUploadBytes {
                    throw APIError(.payloadTooLarge, "the body is larger than \(configuration.maxUploadBytes) bytes; nothing was stored")
                }
                try buffer.withUnsafeReadableBytes { try writer.write($0) }
            }
        } catch let error as APIError {
            throw error
        } catch let error as BlobStoreError {
            throw APIError(error)
        } catch {
            // The client stopped sending before the end of its body.
            throw APIError(.invalidRequest, "the body ended before its declared length; nothing was stored")
        }
        let (digest, size) = try await store(writer, expecting: declared, for: account)
        return try json(BlobInfo(digest: digest, size: size), status: .created)
    }

    /// Commits an uploaded blob on a dispatch thread. The commit waits for two fsyncs (about
    /// a millisecond each here), and the server's tasks run on its event loops: waiting there
    /// would stall every other request of that loop; on other threads the syncs overlap.
    ///
    /// The blob is durable on disk before the account is given access to it, and both before
    /// the answer: an acknowledged upload survives a crash.
    func store(_ writer: any BlobWriter, expecting declared: ContentDigest, for account: AccountRef) async throws -> (digest: ContentDigest, size: Int64) {
        let (digest, size) = try await commit(writer, expecting: declared)
        try await storage.metadata.recordBlob(digest, size: size, for: account)
        return (digest, size)
    }

    /// The blob's commit alone, on a dispatch thread.
    func commit(_ writer: any BlobWriter, expecting declared: ContentDigest) async throws -> (digest: ContentDigest, size: Int64) {
        // The writer belongs to this request alone; it moves to the thread and back.
        struct Owned: @unchecked Sendable { let writer: any BlobWriter }
        let owned = Owned(writer: writer)
        return try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(with: Result { try owned.writer.commit(expecting: declared) })
            }
        }
    }

    /// Stores content sent inline with a create or an update, exactly as an upload of it to
    /// `PUT /v1/blobs/{digest}` would: hashed against the declared digest, durable, then
    /// given to the account.
    func storeInline(_ content: Data, declared: ContentDigest, _ context: ServerContext) async throws {
        let account = try context.requireAccount()
        let (digest, size) = try await commitInline(content, declared: declared)
        try await storage.metadata.recordBlob(digest, size: size, for: account)
    }

    /// Inline content hashed against its declared digest and made durable; not yet the account's.
    func commitInline(_ content: Data, declared: ContentDigest) async throws -> (digest: ContentDigest, size: Int64) {
        guard content.count <= SyncProtocol.maxInlineContent else {
            throw APIError(.payloadTooLarge, "inline content is at most \(SyncProtocol.maxInlineContent) bytes; upload it as a blob")
        }
        let writer = try storage.blobs.makeWriter()
        defer { writer.abort() }
        // A BlobStoreError (a full disk) is answered through APIError(mapping:), as makeWriter's is.
        try content.withUnsafeBytes { try writer.write($0) }
        return try await commit(writer, expecting: declared)
    }

    /// Streams a blob, honouring a single `Range` and `If-Range` (by ETag, the digest).
    func serveBlob(_ digest: ContentDigest, request: Request) async throws -> Response {
        let reader: any BlobReader
        do {
            reader = try storage.blobs.openReader(digest)
        } catch BlobStoreError.notFound(let missing) {
            // A small content that came with a batch of creates is kept by the metadata store.
            guard let data = try await storage.metadata.inlineContent(digest) else { throw BlobStoreError.notFound(missing) }
            reader = DataBlobReader(data)
        }
        let size = reader.size
        let etag = "\"\(digest.hex)\""
        var range = ByteRange.parse(request.headers[.range], size: size)
        if let ifRange = request.headers[.ifRange], ifRange != etag { range = .whole }
        var headers: HTTPFields = [
            .contentType: "application/octet-stream", .eTag: etag, .acceptRanges: "bytes",
        ]
        let span: ClosedRange<Int64>?
        let status: HTTPResponse.Status
        switch range {
        case .whole:
            span = size > 0 ? 0...(size - 1) : nil
            status = .ok
        case .partial(let r):
            span = r
            status = .partialContent
            headers[.contentRange] = "bytes \(r.lowerBound)-\(r.upperBound)/\(size)"
        case .unsatisfiable:
            reader.close()
            var error = APIError(.rangeNotSatisfiable, "the content is \(size) bytes long").makeResponse()
            error.headers[.contentRange] = "bytes */\(size)"
            return error
        }
        guard let span else {
            reader.close()
            return Response(status: status, headers: headers, body: .init())
        }
        let length = span.upperBound - span.lowerBound + 1
        let body = ResponseBody(contentLength: Int(length)) { writer in
            defer { reader.close() }
            // A small first chunk gets the first bytes to the client quickly (a placeholder's
            // open waits for them); then 1 MiB chunks, where per-chunk overhead vanishes.
            var chunk = 16 * 1024
            var offset = span.lowerBound
            let allocator = ByteBufferAllocator()
            while offset <= span.upperBound {
                let want = Int(min(Int64(chunk), span.upperBound - offset + 1))
                var buffer = allocator.buffer(capacity: want)
                let got = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: want) { ptr in
                    try reader.read(at: offset, into: UnsafeMutableRawBufferPointer(rebasing: ptr[0..<want]))
                }
                if got == 0 { throw APIError(.internalError, "content ended early") }
                offset += Int64(got)
                try await writer.write(buffer)
                chunk = 1 << 20
            }
            try await writer.finish(nil)
        }
        return Response(status: status, headers: headers, body: body)
    }
}
