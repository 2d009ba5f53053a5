import Foundation
import HTTPTypes
import Hummingbird
import ItemModel
import NIOCore
import ServerStorage
import SyncAPI
import SyncService

extension SyncServer {
    /// The owner's routes, `/v1/containers/{c}/shares`, and the public ones, `/s/{token}`: no
    /// login, and nothing reachable but the snapshot behind the token.
    func addShareRoutes(to router: Router<ServerContext>) {
        router.post("/v1/containers/:container/shares") { request, context in
            let c = try await container(context)
            return try json(try await c.share(try await decode(CreateShareRequest.self, request)), status: .created)
        }
        router.get("/v1/containers/:container/shares") { _, context in
            try json(ShareList(shares: try await container(context).shares()))
        }
        router.delete("/v1/containers/:container/shares/:token") { _, context in
            try await container(context).unshare(token: try context.parameters.require("token"))
            return Response(status: .noContent)
        }
        router.get("/s/:token") { request, context in try await answerShare(request, context, path: "") }
        router.head("/s/:token") { request, context in try await answerShare(request, context, path: "") }
        router.get("/s/:token/**") { request, context in try await answerShare(request, context, path: entryPath(context)) }
        router.head("/s/:token/**") { request, context in try await answerShare(request, context, path: entryPath(context)) }
    }

    /// The path below a shared folder, each segment percent-decoded. A decoded `/` or `..`
    /// matches no entry: only the snapshot's own paths lead anywhere.
    func entryPath(_ context: ServerContext) -> String {
        context.parameters.getCatchAll().map { String($0).removingPercentEncoding ?? "" }.joined(separator: "/")
    }

    /// A shared file's bytes, or one file of a shared folder's (`path`); to a browser (an
    /// `Accept` that names text/html) the page instead, unless the link asks for the download.
    func answerShare(_ request: Request, _ context: ServerContext, path: String) async throws -> Response {
        if let wait = shareFetches.take(for: context.remoteAddress?.ipAddress ?? "local") {
            throw APIError(.rateLimited, "too many share fetches from this address; try again in \(wait) s", retryAfter: wait)
        }
        let share = try await service.publicShare(try context.parameters.require("token"))
        if path.isEmpty && share.kind == .folder && request.uri.queryParameters["download"] == "zip" { return try await zip(share, request) }
        let wantsPage = request.uri.queryParameters["download"] == nil && (request.headers[.accept] ?? "").contains("text/html")
        if path.isEmpty && (wantsPage || share.kind == .folder) {
            if wantsPage { return SharePage.response(share, at: WallClock.now()) }
            return try json(ShareListing(
                name: share.name, expires: share.expires,
                files: share.entries.map { ShareListing.File(path: $0.path, size: $0.size, modified: $0.modified) }))
        }
        // A shared file's one entry has the empty path: below it there is nothing.
        guard let entry = share.entries.first(where: { $0.path == path }) else { throw APIError(.shareNotFound, "no such share") }
        let name = entry.path.isEmpty ? share.name : String(entry.path.split(separator: "/").last ?? "")
        if request.method == .get { try await service.storage.shares.countDownload(token: share.token) }
        var response = serve(try await service.openContent(entry.digest), digest: entry.digest, request: request)
        response.headers[.contentType] = MediaType.of(name: name)
        response.headers[.contentDisposition] = ContentDisposition.attachment(name)
        SharePage.protect(&response.headers)
        if request.method == .head { response.body = .init() }
        return response
    }
}

extension SyncServer {
    /// A shared folder's files as one zip, written as it is sent (`ZipStream`).
    func zip(_ share: Share, _ request: Request) async throws -> Response {
        var headers: HTTPFields = [.contentType: "application/zip", .contentDisposition: ContentDisposition.attachment(share.name + ".zip")]
        SharePage.protect(&headers)
        guard request.method == .get else { return Response(status: .ok, headers: headers) }
        try await service.storage.shares.countDownload(token: share.token)
        let members = share.entries.map { ZipStream.Member(name: $0.path, size: $0.size, modified: $0.modified, digest: $0.digest) }
        let service = self.service
        return Response(status: .ok, headers: headers, body: ResponseBody { writer in
            try await ZipStream().write(members, open: { try await service.openContent($0) }) { chunk in
                try await writer.write(chunk)
                ContentBytes.sent.increment(by: chunk.readableBytes)
            }
            try await writer.finish(nil)
        })
    }
}

/// `Content-Type` by a name's extension: what a browser or a program needs to open a download.
enum MediaType {
    static let byExtension: [String: String] = [
        "txt": "text/plain; charset=utf-8", "md": "text/markdown; charset=utf-8", "csv": "text/csv; charset=utf-8",
        "html": "text/html; charset=utf-8", "htm": "text/html; charset=utf-8", "css": "text/css", "js": "text/javascript",
        "json": "application/json", "xml": "application/xml", "pdf": "application/pdf", "zip": "application/zip",
        "gz": "application/gzip", "tar": "application/x-tar", "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg",
        "gif": "image/gif", "webp": "image/webp", "svg": "image/svg+xml", "heic": "image/heic", "mp3": "audio/mpeg",
        "m4a": "audio/mp4", "wav": "audio/wav", "mp4": "video/mp4", "mov": "video/quicktime", "webm": "video/webm",
        "doc": "application/msword", "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", "pages": "application/vnd.apple.pages",
        "numbers": "application/vnd.apple.numbers", "key": "application/vnd.apple.keynote",
    ]

    static func of(name: String) -> String {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return "application/octet-stream" }
        return byExtension[name[name.index(after: dot)...].lowercased()] ?? "application/octet-stream"
    }
}

/// `Content-Disposition: attachment` with the file's true name (RFC 6266): `filename*` carries
/// it in UTF-8, percent-encoded (RFC 8187), and `filename` an ASCII stand-in for old clients.
enum ContentDisposition {
    static func attachment(_ name: String) -> String {
        let fallback = String(name.unicodeScalars.map { s -> Character in
            s.isASCII && s.value >= 0x20 && s != "\"" && s != "\\" && s.value != 0x7F ? Character(s) : "_"
        })
        return "attachment; filename=\"\(fallback)\"; filename*=UTF-8''" + percentEncoded(name)
    }

    /// RFC 8187's attr-char kept; every other byte of the UTF-8 percent-encoded.
    static func percentEncoded(_ text: String) -> String {
        let kept = Set("!#$&+-.^_`|~".utf8)
        var out = ""
        for byte in text.utf8 {
            let isAlphanumeric = (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
            if isAlphanumeric || kept.contains(byte) { out.append(Character(Unicode.Scalar(byte))) } else { out += String(format: "%%%02X", byte) }
        }
        return out
    }
}
