import HTTPTypes
import Hummingbird
import ServerStorage
import SyncAPI

extension SyncServer {
    /// `/v1/containers`: the account's containers, listed, made on first use, and each one's info.
    func addContainerRoutes(to router: Router<ServerContext>) {
        router.get(RouterPath(APIPath.containers)) { _, context in
            let account = try context.requireAccount()
            var infos: [ContainerInfo] = []
            for c in try await storage.metadata.containers(of: account) {
                infos.append(try await info(c))
            }
            return try json(ContainerList(containers: infos))
        }
        router.put("/v1/containers/:container") { _, context in
            let account = try context.requireAccount()
            let id = try containerID(context)
            let (c, created) = try await storage.metadata.ensureContainer(id, of: account)
            return try json(try await info(c), status: created ? .created : .ok)
        }
        router.get("/v1/containers/:container") { _, context in
            try json(try await info(try await container(context)))
        }
    }

    func info(_ c: ContainerRef) async throws -> ContainerInfo {
        ContainerInfo(id: c.id, created: c.created, cursor: try await storage.changes.latestCursor(in: c))
    }
}
