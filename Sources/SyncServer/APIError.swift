import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import ItemModel
import ServerStorage
import SyncAPI

/// An error the server answers with: one code from the protocol's table, a clear message, and
/// for conflicts the item as it is now.
struct APIError: Error, HTTPResponseError {
    let code: APIErrorCode
    let message: String
    var current: ItemMetadata?

    init(_ code: APIErrorCode, _ message: String, current: ItemMetadata? = nil) {
        self.code = code
        self.message = message
        self.current = current
    }

    var status: HTTPResponse.Status { .init(code: code.httpStatus) }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        makeResponse()
    }

    func makeResponse() -> Response {
        let body = APIErrorBody(detail)
        // Encoding these plain values cannot fail; an empty body would still carry the status.
        let data = (try? JSONEncoder().encode(body)) ?? Data()
        var headers: HTTPFields = [.contentType: "application/json"]
        if let revision = current?.revision.rawValue { headers[.ubiqRevision] = revision }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

extension HTTPField.Name {
    static let ubiqRevision = Self(SyncProtocol.revisionHeader)!
}

extension APIError {
    /// The one mapping from storage's refusals to the protocol's codes. Exhaustive on purpose.
    init(_ error: StorageError) {
        switch error {
        case .accountExists(let n): self.init(.invalidRequest, "account '\(n)' already exists")
        case .accountNotFound: self.init(.unauthorized, "the account no longer exists")
        case .invalidAccountName(let n): self.init(.invalidRequest, "'\(n)' is not a valid account name")
        case .containerNotFound(let c): self.init(.containerNotFound, "no container '\(c)'")
        case .itemNotFound(let id): self.init(.itemNotFound, "no item '\(id)'")
        case .blobNotFound(let d): self.init(.blobNotFound, "no content with digest \(d); upload it first")
        case .invalidName(let why): self.init(.invalidName, why.description)
        case .invalidXattr(let why): self.init(.invalidXattr, why.description)
        case .notAFolder(let id): self.init(.notAFolder, "item '\(id)' is not a folder")
        case .notAFile(let id): self.init(.notAFile, "item '\(id)' is not a file")
        case .rootIsImmutable: self.init(.rootIsImmutable, "the root folder cannot be renamed, moved or deleted")
        case .invalidMove(let id): self.init(.invalidMove, "folder '\(id)' cannot move into itself or below itself")
        case .revisionConflict(let current):
            self.init(.revisionConflict, "the item changed since the base revision; it is now at \(current.revision)", current: current)
        case .nameExists(let existing):
            self.init(.nameExists, "the folder already holds an item named '\(existing.name)'", current: existing)
        case .folderNotEmpty(let id): self.init(.folderNotEmpty, "folder '\(id)' is not empty; pass recursive=true")
        case .sizeMismatch(let declared, let actual):
            self.init(.sizeMismatch, "declared size \(declared) but the content is \(actual) bytes")
        case .digestMismatch(let declared, let actual):
            self.init(.digestMismatch, "declared digest \(declared) but the body hashes to \(actual); nothing was stored")
        case .itemIDTaken(let id): self.init(.itemIDTaken, "item id '\(id)' is already used by another item")
        case .versionNotFound(let id): self.init(.versionNotFound, "the item has no conflict version '\(id)'")
        case .invalidDevice(let name): self.init(.invalidDevice, "a device name must be 1 to \(ConflictVersion.maxDeviceBytes) bytes, not '\(name.prefix(80))'")
        case .invalidCursor(let c): self.init(.invalidCursor, "'\(c)' is not a cursor of this server")
        case .diskFull: self.init(.insufficientStorage, "the server's disk is full; nothing was changed")
        }
    }

    init(_ error: BlobStoreError) {
        switch error {
        case .noSpace: self.init(.insufficientStorage, "the server's disk is full; nothing was stored")
        case .io(let op, let code): self.init(.internalError, "storage failed during \(op): \(String(cString: strerror(code)))")
        case .digestMismatch(let declared, let actual):
            self.init(.digestMismatch, "declared digest \(declared) but the body hashes to \(actual); nothing was stored")
        case .notFound(let d): self.init(.blobNotFound, "no content with digest \(d)")
        }
    }
}

/// Turns every error into the protocol's JSON error body, so that clients see one format.
struct ErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            if let mapped = try? APIError(mapping: error) { throw mapped }
            switch error {
            case let error as DecodingError:
                throw APIError(.invalidRequest, "malformed JSON: \(APIError.describe(error))")
            case is NIOTooManyBytesError:
                throw APIError(.payloadTooLarge, "the request body is larger than this server accepts")
            case let error as HTTPError:
                switch error.status {
                case .notFound: throw APIError(.routeNotFound, "no route \(request.method) \(request.uri.path)")
                case .contentTooLarge: throw APIError(.payloadTooLarge, "the request body is larger than this server accepts")
                case .methodNotAllowed: throw APIError(.methodNotAllowed, "\(request.method) is not allowed on \(request.uri.path)")
                default: throw APIError(.invalidRequest, error.body ?? "bad request (\(error.status.code))")
                }
            default:
                context.logger.error("request failed", metadata: ["http.path": "\(request.uri.path)", "error": "\(error)"])
                throw APIError(.internalError, "internal error")
            }
        }
    }
}

extension APIError {
    /// The refusals a single operation inside a request can meet (a batch answers them per
    /// create); anything else is rethrown, to fail the whole request.
    init(mapping error: any Error) throws {
        switch error {
        case let error as APIError: self = error
        case let error as StorageError: self.init(error)
        case let error as BlobStoreError: self.init(error)
        default: throw error
        }
    }

    var detail: APIErrorBody.Detail { .init(code: code, message: message, current: current) }

    static func describe(_ error: DecodingError) -> String {
        switch error {
        case .dataCorrupted(let c), .keyNotFound(_, let c), .typeMismatch(_, let c), .valueNotFound(_, let c):
            let path = c.codingPath.map(\.stringValue).joined(separator: ".")
            return path.isEmpty ? c.debugDescription : "\(path): \(c.debugDescription)"
        @unknown default:
            return "\(error)"
        }
    }
}
