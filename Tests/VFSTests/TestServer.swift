import Foundation
import ItemModel
import SyncAPI
import SyncClient
import NIOHTTP1
import SyncEngine
import TestSupport

/// A server the harness's engine talks to, as a test sees it: the link the engine uses, what
/// is stored on it, and another device that changes it.
protocol TestServer: Sendable {
    associatedtype Device: AnotherDevice
    /// What the engine talks to.
    var link: any RemoteStore { get }
    var latestCursor: ChangeCursor { get }
    func item(atPath path: String) -> ItemMetadata?
    func content(of id: ItemID) -> [UInt8]?
    func content(atPath path: String) -> [UInt8]?
    func tree() -> [String: InMemoryRemoteStore.TreeEntry]
    var otherDevice: Device { get }
    /// Lets every held call go (the harness calls it on the way out).
    func releaseAll()
}

/// Another client of the same account, changing the container straight on the server. Each
/// change applies on top of the item's current revision.
protocol AnotherDevice: Sendable {
    @discardableResult
    func createFolder(_ name: String, in parent: ItemID, xattrs: [String: Data]) throws -> ItemMetadata
    @discardableResult
    func createFile(_ name: String, in parent: ItemID, content: [UInt8], mode: UInt32, xattrs: [String: Data]) throws -> ItemMetadata
    @discardableResult
    func updateContent(_ id: ItemID, to content: [UInt8]) throws -> ItemMetadata
    @discardableResult
    func move(_ id: ItemID, to name: String?, parent: ItemID?) throws -> ItemMetadata
    @discardableResult
    func delete(_ id: ItemID, recursive: Bool) throws -> [ItemMetadata]
}

extension InMemoryRemoteStore: TestServer {
    var link: any RemoteStore { self }
}

extension InMemoryRemoteStore.OtherDevice: AnotherDevice {}

/// The conformance the mount daemon declares, for the cases that run end to end.
extension SyncHTTPClient: RemoteStore {}

/// A live `ubiq-server` on loopback with one account, reached by the engine through
/// `SyncHTTPClient` and by the test through plain HTTP requests.
final class LiveServer: TestServer {
    let process: ServerProcess
    let http: TestHTTP
    let client: SyncHTTPClient
    let container = ContainerID.default

    static func start() async throws -> LiveServer {
        let process = try await ServerProcess.start()
        do {
            try await process.addAccount("vfs", password: "vfs-pw")
            let http = try await TestHTTP(baseURL: process.baseURL).login("vfs", "vfs-pw")
            return LiveServer(process: process, http: http)
        } catch {
            await process.stop()
            throw error
        }
    }

    init(process: ServerProcess, http: TestHTTP) {
        self.process = process
        self.http = http
        client = SyncHTTPClient(baseURL: process.baseURL, token: http.token!, container: container)
    }

    func stop() async {
        await client.shutdown()
        await process.stop()
    }

    var link: any RemoteStore { client }

    func releaseAll() {}

    /// One request to the server, for a synchronous test expectation.
    func request<T: Decodable & Sendable>(_ method: HTTPMethod, _ path: String, body: (any Encodable & Sendable)? = nil, as: T.Type = T.self) throws -> T? {
        let http = http
        return try BlockingCall.run {
            let r = if let body { try await http.json(method, path, body) } else { try await http.send(method, path) }
            if r.status == 404 { return nil }
            guard (200..<300).contains(r.status) else { throw TestSupportError("\(method) \(path): \(r.status) \(r.text)") }
            return try r.decode(T.self)
        }
    }

    func must<T>(_ value: T?, _ what: String) throws -> T {
        guard let value else { throw TestSupportError("\(what): not found") }
        return value
    }

    var latestCursor: ChangeCursor {
        (try? request(.GET, APIPath.container(container), as: ContainerInfo.self))?.cursor ?? ChangeCursor("none")
    }

    func children(of folder: ItemID) -> [ItemMetadata] {
        ((try? request(.GET, APIPath.item(container, folder) + "/children", as: ItemList.self)) ?? nil)?.items ?? []
    }

    func item(atPath path: String) -> ItemMetadata? {
        var current = (try? request(.GET, APIPath.item(container, .root), as: ItemMetadata.self)) ?? nil
        for name in path.split(separator: "/") {
            guard let folder = current, folder.kind == .folder else { return nil }
            current = children(of: folder.id).first { $0.name == name }
        }
        return current
    }

    func content(of id: ItemID) -> [UInt8]? {
        let http = http, path = APIPath.content(container, id)
        return try? BlockingCall.run { () -> [UInt8]? in
            let r = try await http.send(.GET, path)
            return r.status == 200 ? [UInt8](r.body) : nil
        }
    }

    func content(atPath path: String) -> [UInt8]? {
        item(atPath: path).flatMap { content(of: $0.id) }
    }

    func tree() -> [String: InMemoryRemoteStore.TreeEntry] {
        var out: [String: InMemoryRemoteStore.TreeEntry] = [:]
        func walk(_ folder: ItemID, _ prefix: String) {
            for child in children(of: folder) {
                let path = prefix + "/" + child.name
                out[path] = .init(kind: child.kind, digest: child.digest)
                if child.kind == .folder { walk(child.id, path) }
            }
        }
        walk(.root, "")
        return out
    }

    var otherDevice: Device { Device(server: self) }

    struct Device: AnotherDevice {
        let server: LiveServer
        var container: ContainerID { server.container }

        func current(_ id: ItemID) throws -> ItemMetadata {
            try server.must(try server.request(.GET, APIPath.item(container, id), as: ItemMetadata.self), "item \(id)")
        }

        func upload(_ content: [UInt8]) throws -> ContentDigest {
            let http = server.http
            return try BlockingCall.run { try await http.uploadBlob(Data(content)) }
        }

        func createFolder(_ name: String, in parent: ItemID = .root, xattrs: [String: Data] = [:]) throws -> ItemMetadata {
            try server.must(try server.request(
                .POST, APIPath.items(container), body: CreateItemRequest(parentID: parent, name: name, kind: .folder, xattrs: xattrs)), name)
        }

        func createFile(_ name: String, in parent: ItemID = .root, content: [UInt8], mode: UInt32 = 0o644, xattrs: [String: Data] = [:]) throws -> ItemMetadata {
            let digest = try upload(content)
            return try server.must(try server.request(.POST, APIPath.items(container), body: CreateItemRequest(
                parentID: parent, name: name, kind: .file, digest: digest, size: Int64(content.count), mode: mode, xattrs: xattrs)), name)
        }

        func updateContent(_ id: ItemID, to content: [UInt8]) throws -> ItemMetadata {
            let digest = try upload(content)
            let body = UpdateContentRequest(baseRevision: try current(id).revision, digest: digest, size: Int64(content.count))
            return try server.must(try server.request(.PUT, APIPath.content(container, id), body: body), "item \(id)")
        }

        func move(_ id: ItemID, to name: String? = nil, parent: ItemID? = nil) throws -> ItemMetadata {
            let body = UpdateItemRequest(baseRevision: try current(id).revision, name: name, parentID: parent)
            return try server.must(try server.request(.PATCH, APIPath.item(container, id), body: body), "item \(id)")
        }

        func delete(_ id: ItemID, recursive: Bool = false) throws -> [ItemMetadata] {
            let path = APIPath.item(container, id) + "?baseRevision=\(try current(id).revision.rawValue)&recursive=\(recursive)"
            return try server.must(try server.request(.DELETE, path, as: DeleteResponse.self), "item \(id)").deleted
        }
    }
}
