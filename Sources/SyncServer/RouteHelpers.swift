import Foundation
import HTTPTypes
import Hummingbird
import ItemModel
import NIOCore
import ServerStorage
import SyncAPI
import SyncService

extension SyncServer {
    func containerID(_ context: ServerContext) throws -> ContainerID {
        let raw = try context.parameters.require("container")
        do { return try ContainerID(raw) } catch { throw APIError(.invalidContainerID, error.description) }
    }

    /// The container the path names, of the calling account.
    func container(_ context: ServerContext) async throws -> ContainerService {
        try await service.container(try containerID(context), of: try context.requireAccount())
    }

    /// The item the path names; the service checks that it is well formed.
    func itemID(_ context: ServerContext) throws -> ItemID {
        ItemID(try context.parameters.require("item"))
    }

    func blobDigest(_ context: ServerContext) throws -> ContentDigest {
        let raw = try context.parameters.require("digest")
        do { return try ContentDigest(hex: raw) } catch { throw APIError(.invalidDigest, error.description) }
    }

    func decode<T: Decodable>(_ type: T.Type, _ request: Request, limit: Int? = nil) async throws -> T {
        var request = request
        let buffer = try await request.collectBody(upTo: limit ?? configuration.maxJSONBytes)
        return try JSONDecoder().decode(T.self, from: Data(buffer.readableBytesView))
    }
}

func json<T: Encodable>(_ value: T, status: HTTPResponse.Status = .ok) throws -> Response {
    json(encoded: try JSONEncoder().encode(value), status: status)
}

/// A response of JSON encoded already (a change-log page put together from stored items).
func json(encoded data: Data, status: HTTPResponse.Status = .ok) -> Response {
    Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
}
