import AsyncHTTPClient
import Foundation
import ItemModel
import SyncAPI

extension SyncHTTPClient {
    /// Publishes a read-only snapshot of the item (docs/SYNC_PROTOCOL.md, §15).
    public func createShare(of id: ItemID, expires: Timestamp?) async throws -> ShareInfo {
        try await call(.POST, APIPath.shares(container), json: CreateShareRequest(itemID: id, expires: expires), expect: [201])
    }

    public func shares() async throws -> [ShareInfo] {
        let list: ShareList = try await call(.GET, APIPath.shares(container))
        return list.shares
    }

    public func removeShare(token: String) async throws {
        let (status, data) = try await send(request(.DELETE, APIPath.share(container, token: token)), deadline: requestDeadline)
        guard status == 204 else { throw failure(status: status, body: data) }
    }
}
