import Foundation
import ItemModel
import ServerStorage
import SyncAPI

extension ContainerService {
    /// Publishes a snapshot of a file, or of the files below a folder, as they are on the
    /// server now. Links are left out of a folder's snapshot: what they point at is not in it.
    public func share(_ body: CreateShareRequest) async throws -> ShareInfo {
        let now = WallClock.now()
        if let expires = body.expires, expires <= now { throw APIError(.invalidRequest, "the expiry is in the past") }
        let item = try await item(body.itemID)
        let entries: [ShareEntry]
        switch item.kind {
        case .file:
            entries = [ShareEntry(path: "", digest: item.digest ?? .empty, size: item.size, modified: item.modified)]
        case .folder:
            entries = try await files(below: item.id, prefix: "")
        case .symlink, .fifo, .socket:
            throw APIError(.invalidRequest, "only a file or a folder can be shared; share what a link points at")
        }
        let share = Share(
            token: Credentials.newToken(), itemID: item.id, name: item.name, kind: item.kind, created: now, expires: body.expires, entries: entries)
        try await storage.shares.addShare(share, in: ref)
        return Self.info(share)
    }

    /// Every file below a folder, by path, in name order.
    func files(below folder: ItemID, prefix: String) async throws -> [ShareEntry] {
        var out: [ShareEntry] = []
        for child in try await storage.metadata.children(of: folder, in: ref) {
            let path = prefix + child.name
            switch child.kind {
            case .file: out.append(ShareEntry(path: path, digest: child.digest ?? .empty, size: child.size, modified: child.modified))
            case .folder: out += try await files(below: child.id, prefix: path + "/")
            case .symlink, .fifo, .socket: continue
            }
        }
        return out
    }

    public func shares() async throws -> [ShareInfo] {
        try await storage.shares.shares(in: ref).map(Self.info)
    }

    public func unshare(token: String) async throws {
        guard try await storage.shares.removeShare(token: token, in: ref) else { throw APIError(.shareNotFound, "no such share in this container") }
    }

    static func info(_ share: Share) -> ShareInfo {
        ShareInfo(
            token: share.token, path: APIPath.publicShare(share.token), itemID: share.itemID, name: share.name, kind: share.kind,
            created: share.created, expires: share.expires, downloads: share.downloads, files: share.entries.count,
            size: share.entries.reduce(0) { $0 + $1.size })
    }
}

extension SyncService {
    /// The share behind a public link. Unknown, removed and malformed tokens are all the same
    /// 404, so that the answer tells nothing of what exists; an expired one is 410.
    public func publicShare(_ token: String) async throws -> Share {
        guard token.utf8.count <= 64, let share = try await storage.shares.share(token: token) else {
            throw APIError(.shareNotFound, "no such share")
        }
        if share.isExpired(at: WallClock.now()) { throw APIError(.shareExpired, "this share has expired") }
        return share
    }
}
