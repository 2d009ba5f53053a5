import Foundation
import ItemModel
import ServerStorage
import SyncAPI

/// What the server decides, without a transport: logins, containers, the checks of each
/// request, item operations with their base revisions, the change log and its wake-ups, and the
/// rules of content upload. `ubiq-server` answers HTTP with it (SyncServer decodes a request,
/// makes one call here and encodes the answer); TestSupport's in-process server calls it
/// directly, without HTTP. Refusals are `APIError`.
public struct SyncService: Sendable {
    public let storage: ServerStorage
    /// Woken after each commit of a container's change.
    public let hub: ChangeHub
    /// The largest content upload accepted; larger ones are refused with `payload_too_large`.
    public let maxUploadBytes: Int64
    /// How long tokens live.
    public let tokens: TokenPolicy
    /// Shared by every copy of this value: uploads and collection take turns per blob.
    let blobGate = BlobGate()

    public init(storage: ServerStorage, hub: ChangeHub = ChangeHub(), maxUploadBytes: Int64 = 64 << 30, tokens: TokenPolicy = TokenPolicy()) {
        self.storage = storage
        self.hub = hub
        self.maxUploadBytes = maxUploadBytes
        self.tokens = tokens
    }

    // MARK: Accounts

    /// The caller's account and its identity.
    public func whoami(_ account: AccountRef) async throws -> WhoAmI {
        WhoAmI(account: account.name, identity: try await storage.accounts.identity(of: account))
    }

    // MARK: Containers

    public func containers(of account: AccountRef) async throws -> [ContainerInfo] {
        var infos: [ContainerInfo] = []
        for c in try await storage.metadata.containers(of: account) {
            infos.append(try await ContainerService(service: self, ref: c).info())
        }
        return infos
    }

    /// Makes the container (with its root folder) when missing; `created` tells whether this call made it.
    public func ensureContainer(_ id: ContainerID, of account: AccountRef) async throws -> (info: ContainerInfo, created: Bool) {
        let (c, created) = try await storage.metadata.ensureContainer(id, of: account)
        return (try await ContainerService(service: self, ref: c).info(), created)
    }

    /// An existing container of the account (with `create`, made when missing).
    public func container(_ id: ContainerID, of account: AccountRef, create: Bool = false) async throws -> ContainerService {
        guard let c = try await storage.metadata.container(id, of: account, create: create) else {
            throw APIError(.containerNotFound, "no container '\(id)'")
        }
        return ContainerService(service: self, ref: c)
    }

    // MARK: Creates

    /// Creates one item. The request is checked, and its inline content stored, before the
    /// container is made on first use: a refused request changes nothing, not even that.
    public func createItem(_ body: CreateItemRequest, in id: ContainerID, of account: AccountRef) async throws -> ItemMetadata {
        let new = try Self.newItem(body)
        if let content = body.content { try await storeInline(content, declared: new.digest!, for: account) }
        let c = try await container(id, of: account, create: new.parentID == .root)
        let item = try await storage.metadata.createItem(new, in: c.ref)
        hub.publish(container: c.ref.key)
        return item
    }

    /// Several creates and, for those that succeed, one commit. Each create is checked, its
    /// inline content checked, and applied exactly as `createItem` would; a refused one is
    /// answered in its own result and creates nothing (content it carried that hashed to its
    /// digest stays stored for the account, as after a separate upload).
    public func createItems(_ creates: [CreateItemRequest], in id: ContainerID, of account: AccountRef) async throws -> [BatchResponse.Result] {
        guard creates.count <= SyncProtocol.maxBatchItems else {
            throw APIError(.payloadTooLarge, "a batch holds at most \(SyncProtocol.maxBatchItems) creates; this one has \(creates.count)")
        }
        let contentBytes = creates.reduce(0) { $0 + ($1.content?.count ?? 0) }
        guard contentBytes <= SyncProtocol.maxBatchContent else {
            throw APIError(.payloadTooLarge, "a batch carries at most \(SyncProtocol.maxBatchContent) bytes of inline content; this one has \(contentBytes)")
        }
        var results = [BatchResponse.Result?](repeating: nil, count: creates.count)
        var checked: [(index: Int, item: NewItem)] = []
        for (index, create) in creates.enumerated() {
            do { checked.append((index, try Self.newItem(create))) } catch {
                results[index] = .init(error: try APIError(mapping: error).detail)
            }
        }
        guard !checked.isEmpty else {
            // Nothing to create, but a container that is not there is still 404, as for one create.
            _ = try await container(id, of: account, create: false)
            return results.map { $0! }
        }
        // Before anything is stored: content is never kept for a request that fails.
        let c = try await container(id, of: account, create: checked.contains { $0.item.parentID == .root })
        // The contents are checked here, in memory, and kept by the metadata store in the
        // transaction that creates the items: one commit and one sync for the whole batch.
        var contents: [ContentDigest: Data] = [:]
        for (index, _) in checked {
            guard let content = creates[index].content, let declared = creates[index].digest else { continue }
            guard content.count <= SyncProtocol.maxInlineContent else {
                results[index] = .init(error: Self.inlineTooLarge.detail)
                continue
            }
            let actual = ContentDigest.of(content)
            guard actual == declared else {
                results[index] = .init(error: APIError(BlobStoreError.digestMismatch(declared: declared, actual: actual)).detail)
                continue
            }
            contents[declared] = content
        }
        checked.removeAll { results[$0.index] != nil }
        let created = try await storage.metadata.createItems(checked.map(\.item), contents: contents, in: c.ref)
        for ((index, _), result) in zip(checked, created) {
            switch result {
            case .success(let item): results[index] = .init(item: item)
            case .failure(let error): results[index] = .init(error: APIError(error).detail)
            }
        }
        hub.publish(container: c.ref.key)
        return results.map { $0! }
    }

    /// A create as the storage layer takes it, once the request is checked.
    static func newItem(_ body: CreateItemRequest) throws -> NewItem {
        let name = try RequestChecks.validName(body.name)
        let parentID = try RequestChecks.wellFormed(body.parentID)
        if body.kind == .folder && (body.digest != nil || (body.size ?? 0) != 0) {
            throw APIError(.invalidRequest, "a folder has no content: omit digest and size")
        }
        if body.content != nil, body.kind != .file || body.digest == nil {
            throw APIError(.invalidRequest, "inline content needs a file and the digest it hashes to")
        }
        if body.kind == .symlink && (body.digest != nil || body.size.map { $0 != Int64(body.target?.utf8.count ?? 0) } == true) {
            throw APIError(.invalidRequest, "a link has no content: omit digest, and give size as its target's length or not at all")
        }
        if body.target != nil && body.kind != .symlink {
            throw APIError(.invalidRequest, "only a link has a target")
        }
        let now = WallClock.now()
        return NewItem(
            id: try body.id.map(RequestChecks.wellFormed) ?? ItemID.random(), parentID: parentID,
            name: name, kind: body.kind, digest: body.digest, declaredSize: body.size,
            mode: (body.mode ?? ItemMetadata.defaultMode(for: body.kind)) & 0o7777,
            created: body.created ?? now, modified: body.modified ?? body.created ?? now, xattrs: body.xattrs ?? [:],
            savedBy: body.kind == .file ? body.device : nil, target: body.target)
    }
}
