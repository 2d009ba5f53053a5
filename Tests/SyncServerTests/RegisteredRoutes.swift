import ServerStorage
@testable import SyncServer
import TestSupport

/// The routes the server's router registers, as `METHOD` and a path template with `{name}`
/// for each capture: what the OpenAPI document and the isolation walk are checked against.
enum RegisteredRoutes {
    static func all() throws -> [(method: String, template: String)] {
        let metadata = try SQLiteMetadataStore.inMemory()
        let storage = ServerStorage.sqlite(metadata, blobs: InMemoryBlobStore())
        return SyncServer(storage: storage).makeRouter().routes.map { route in
            // `:name` captures as `{name}`, whichever way the router spells them.
            let path = route.path.description.split(separator: "/", omittingEmptySubsequences: false).map { segment in
                segment.hasPrefix(":") ? "{\(segment.dropFirst())}" : String(segment)
            }.joined(separator: "/")
            return (route.method.rawValue, path)
        }
    }
}
