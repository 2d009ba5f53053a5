import Foundation
import HTTPTypes
import Hummingbird
import ItemModel
import NIOCore
import ServerStorage
import SyncAPI
import SyncService

extension SyncServer {
    /// `/v1/blobs/{digest}`: content by digest, its size, download and upload.
    func addBlobRoutes(to router: Router<ServerContext>) {
        router.head("/v1/blobs/:digest") { _, context in
            let account = try context.requireAccount()
            let digest = try blobDigest(context)
            // Not from the recent answers: a client that hears yes names the content without
            // sending it, so the grant is renewed, and a grant collected a moment ago is no.
            guard let size = try await service.renewedSize(digest, for: account) else {
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
            return serve(try await service.openContent(digest), digest: digest, request: request)
        }
        router.put("/v1/blobs/:digest") { request, context in try await uploadBlob(request, context) }
    }

    /// The size of `digest`'s content when `account` may use it, remembered a moment.
    func grantedSize(_ digest: ContentDigest, for account: AccountRef) async throws -> Int64? {
        try await grants.value(for: GrantKey(account: account.key, digest: digest)) {
            try await service.grantedSize(digest, for: account)
        }
    }

    func uploadBlob(_ request: Request, _ context: ServerContext) async throws -> Response {
        let account = try context.requireAccount()
        let declared = try blobDigest(context)
        let upload = try await service.beginUpload(declared, length: request.headers[.contentLength].flatMap { Int64($0) }, for: account)
        do {
            for try await buffer in request.body {
                try await upload.write(buffer)
            }
        } catch let error as APIError {
            await upload.abort()
            throw error
        } catch {
            await upload.abort()
            // The client stopped sending before the end of its body.
            throw APIError(.invalidRequest, "the body ended before its declared length; nothing was stored")
        }
        let stored = try await upload.finish()
        ContentBytes.received.increment(by: stored.size)
        return try json(stored, status: .created)
    }

    /// Streams a blob, honouring a single `Range` and `If-Range` (by ETag, the digest).
    func serve(_ reader: any BlobReader, digest: ContentDigest, request: Request) -> Response {
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
            try await reader.read(span.lowerBound..<(span.upperBound + 1), firstChunkSize: 16 * 1024, chunkSize: 1 << 20) { buffer in
                let sent = buffer.readableBytes
                try await writer.write(buffer)
                ContentBytes.sent.increment(by: sent)
            }
            try await writer.finish(nil)
        }
        return Response(status: status, headers: headers, body: body)
    }
}
