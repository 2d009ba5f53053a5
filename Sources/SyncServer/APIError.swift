import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import ItemModel
import ServerStorage
import SyncAPI
import SyncService

extension APIError {
    var status: HTTPResponse.Status { .init(code: code.httpStatus) }

    /// The protocol's JSON error body, with the status from the protocol's one table and, for
    /// conflicts, the current revision in a header.
    func makeResponse() -> Response {
        let body = APIErrorBody(detail)
        // Encoding these plain values cannot fail; an empty body would still carry the status.
        let data = (try? JSONEncoder().encode(body)) ?? Data()
        var headers: HTTPFields = [.contentType: "application/json"]
        if let revision = current?.revision.rawValue { headers[.ubiqRevision] = revision }
        if let retryAfter { headers[.retryAfter] = String(retryAfter) }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

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

/// An `APIError` as Hummingbird answers it.
struct HTTPAPIError: Error, HTTPResponseError {
    let error: APIError

    var status: HTTPResponse.Status { error.status }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        error.makeResponse()
    }
}

extension HTTPField.Name {
    static let ubiqRevision = Self(SyncProtocol.revisionHeader)!
}

/// Turns every error into the protocol's JSON error body, so that clients see one format.
struct ErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            throw HTTPAPIError(error: Self.refusal(error, request, context))
        }
    }

    static func refusal(_ error: any Error, _ request: Request, _ context: Context) -> APIError {
        if let mapped = try? APIError(mapping: error) { return mapped }
        switch error {
        case let error as DecodingError:
            return APIError(.invalidRequest, "malformed JSON: \(APIError.describe(error))")
        case is NIOTooManyBytesError:
            return APIError(.payloadTooLarge, "the request body is larger than this server accepts")
        case let error as HTTPError:
            switch error.status {
            case .notFound: return APIError(.routeNotFound, "no route \(request.method) \(request.uri.path)")
            case .contentTooLarge: return APIError(.payloadTooLarge, "the request body is larger than this server accepts")
            case .methodNotAllowed: return APIError(.methodNotAllowed, "\(request.method) is not allowed on \(request.uri.path)")
            default: return APIError(.invalidRequest, error.body ?? "bad request (\(error.status.code))")
            }
        default:
            context.logger.error("request failed", metadata: ["http.path": "\(request.uri.path)", "error": "\(error)"])
            return APIError(.internalError, "internal error")
        }
    }
}
