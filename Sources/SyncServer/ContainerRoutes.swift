import HTTPTypes
import Hummingbird
import ServerStorage
import SyncAPI
import SyncService

extension SyncServer {
    /// `/v1/containers`: the account's containers, listed, made on first use, and each one's info.
    func addContainerRoutes(to router: Router<ServerContext>) {
        router.get(RouterPath(APIPath.containers)) { _, context in
            try json(ContainerList(containers: try await service.containers(of: try context.requireAccount())))
        }
        router.put("/v1/containers/:container") { _, context in
            let account = try context.requireAccount()
            let (info, created) = try await service.ensureContainer(try containerID(context), of: account)
            return try json(info, status: created ? .created : .ok)
        }
        router.get("/v1/containers/:container") { _, context in
            try json(try await container(context).info())
        }
    }
}
