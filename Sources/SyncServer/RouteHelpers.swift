import Foundation
import HTTPTypes
import Hummingbird
import ItemModel
import NIOCore
import ServerStorage
import SyncAPI

extension SyncServer {
    func containerID(_ context: ServerContext) throws -> ContainerID {
        let raw = try context.parameters.require("container")
        do { return try ContainerID(raw) } catch { throw APIError(.invalidContainerID, error.description) }
    }

    func container(_ context: ServerContext, create: Bool = false) async throws -> ContainerRef {
        let account = try context.requireAccount()
        let id = try containerID(context)
        guard let c = try await storage.metadata.container(id, of: account, create: create) else {
            throw APIError(.containerNotFound, "no container '\(id)'")
        }
        return c
    }

    func itemID(_ context: ServerContext) throws -> ItemID {
        try wellFormed(ItemID(try context.parameters.require("item")))
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

func wellFormed(_ id: ItemID) throws -> ItemID {
    guard id.isWellFormed else { throw APIError(.invalidItemID, "'\(id.rawValue.prefix(80))' is not an item id") }
    return id
}

func validName(_ raw: String) throws -> ItemName {
    do { return try ItemName(raw) } catch { throw APIError(.invalidName, error.description) }
}

func json<T: Encodable>(_ value: T, status: HTTPResponse.Status = .ok) throws -> Response {
    let data = try JSONEncoder().encode(value)
    return Response(status: status, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
}
