import Foundation
import ItemModel
import SyncAPI
import SyncEngine
import Synchronization

/// What a test sees of the server and does there as another device, through a connection of
/// its own (no fault injected, nothing counted): the same calls the engine makes, so it works
/// over an in-process `ServiceRemote` and over HTTP to a running `ubiq-server` alike.
public struct ServerView: Sendable {
    public let connection: any RemoteStore

    public init(_ connection: any RemoteStore) {
        self.connection = connection
    }

    /// A path's entry in `tree()`.
    public struct TreeEntry: Sendable, Hashable, CustomStringConvertible {
        public var kind: ItemKind
        public var digest: ContentDigest?
        /// A link's target.
        public var target: String?
        public init(kind: ItemKind, digest: ContentDigest?, target: String? = nil) {
            self.kind = kind
            self.digest = digest
            self.target = target
        }
        public static func link(_ target: String) -> TreeEntry { TreeEntry(kind: .symlink, digest: nil, target: target) }
        public var description: String {
            switch kind {
            case .folder: "folder"
            case .symlink: "link(\(target ?? "-"))"
            default: "\(kind.rawValue)(\(digest?.hex.prefix(8) ?? "-"))"
            }
        }
    }

    /// The account's identity, as `whoami` answers it.
    public func identity() async throws -> String {
        try await connection.whoami().identity
    }

    /// The cursor of the container's latest change.
    public func latestCursor() async throws -> ChangeCursor {
        try await connection.ensureContainer().cursor
    }

    /// A live item; nil for unknown ids and deleted items.
    public func liveItem(_ id: ItemID) async throws -> ItemMetadata? {
        do {
            return try await connection.item(id)
        } catch RemoteError.refused(code: .itemNotFound, _, _), RemoteError.refused(code: .containerNotFound, _, _) {
            return nil
        }
    }

    /// Every live item, read from the change log (which holds each item's latest state).
    func liveItems() async throws -> [ItemID: ItemMetadata] {
        var items: [ItemID: ItemMetadata] = [:]
        var cursor = ChangeCursor.start
        while true {
            let page: ChangePage
            do {
                page = try await connection.changes(since: cursor, limit: 10_000)
            } catch RemoteError.refused(code: .containerNotFound, _, _) {
                return [:]
            }
            for change in page.changes { items[change.item.id] = change.item.deleted ? nil : change.item }
            cursor = page.cursor
            if !page.hasMore { return items }
        }
    }

    /// The live item at `/a/b` (`/` is the root).
    public func item(atPath path: String) async throws -> ItemMetadata? {
        let items = try await liveItems()
        var current = items[.root]
        for name in path.split(separator: "/", omittingEmptySubsequences: true) {
            guard let folder = current else { return nil }
            current = items.values.first { $0.parentID == folder.id && $0.name == name }
        }
        return current
    }

    /// The content of a live file.
    public func content(of id: ItemID) async throws -> [UInt8]? {
        guard let item = try await liveItem(id), let digest = item.digest else { return nil }
        return try await bytes(of: digest)
    }

    public func content(atPath path: String) async throws -> [UInt8]? {
        guard let item = try await item(atPath: path), let digest = item.digest else { return nil }
        return try await bytes(of: digest)
    }

    func bytes(of digest: ContentDigest) async throws -> [UInt8] {
        let received = Received()
        try await connection.download(digest, range: 0..<0) { chunk in received.bytes.withLock { $0.append(contentsOf: chunk) } }
        return received.bytes.withLock { $0 }
    }

    final class Received: Sendable {
        let bytes = Mutex<[UInt8]>([])
    }

    /// Every live item but the root, by path: what a client that is in sync must show.
    public func tree() async throws -> [String: TreeEntry] {
        let items = try await liveItems()
        let byParent = Dictionary(grouping: items.values.filter { $0.id != .root }, by: { $0.parentID })
        var out: [String: TreeEntry] = [:]
        func walk(_ folder: ItemID, _ prefix: String) {
            for child in byParent[folder] ?? [] {
                let path = prefix + "/" + child.name
                out[path] = TreeEntry(kind: child.kind, digest: child.digest, target: child.target)
                if child.kind == .folder { walk(child.id, path) }
            }
        }
        walk(.root, "")
        return out
    }

    /// Every live key with its value.
    public func storedKeyValues() async throws -> [String: Data] {
        do {
            let page = try await connection.keyValues(since: 0)
            return Dictionary(page.entries.compactMap { e in e.value.map { (e.key, $0) } }, uniquingKeysWith: { a, _ in a })
        } catch RemoteError.refused(code: .containerNotFound, _, _) {
            return [:]
        }
    }

    /// Changes the container as another device would. Each call is one commit.
    public var otherDevice: OtherDevice { OtherDevice(connection: connection) }
}

/// Another device's changes, made through its own connection on top of each item's current revision.
public struct OtherDevice: Sendable {
    let connection: any RemoteStore

    @discardableResult
    public func createFolder(_ name: String, in parent: ItemID = .root, xattrs: [String: Data] = [:]) async throws -> ItemMetadata {
        _ = try await connection.ensureContainer()
        return try await connection.createItem(CreateItemRequest(parentID: parent, name: name, kind: .folder, xattrs: xattrs))
    }

    @discardableResult
    public func createLink(_ name: String, target: String, in parent: ItemID = .root) async throws -> ItemMetadata {
        _ = try await connection.ensureContainer()
        return try await connection.createItem(CreateItemRequest(parentID: parent, name: name, kind: .symlink, target: target))
    }

    @discardableResult
    public func createFile(_ name: String, in parent: ItemID = .root, content: [UInt8], mode: UInt32 = 0o644, xattrs: [String: Data] = [:]) async throws -> ItemMetadata {
        _ = try await connection.ensureContainer()
        let (digest, inline) = try await send(content)
        return try await connection.createItem(CreateItemRequest(
            parentID: parent, name: name, kind: .file, digest: digest, size: Int64(content.count), mode: mode, xattrs: xattrs, content: inline))
    }

    /// New content on top of the item's current revision.
    @discardableResult
    public func updateContent(_ id: ItemID, to content: [UInt8]) async throws -> ItemMetadata {
        let base = try await connection.item(id).revision
        let (digest, inline) = try await send(content)
        return try await connection.updateContent(id, UpdateContentRequest(baseRevision: base, digest: digest, size: Int64(content.count), content: inline))
    }

    /// Renames and/or moves on top of the item's current revision.
    @discardableResult
    public func move(_ id: ItemID, to name: String? = nil, parent: ItemID? = nil) async throws -> ItemMetadata {
        let base = try await connection.item(id).revision
        return try await connection.updateItem(id, UpdateItemRequest(baseRevision: base, name: name, parentID: parent))
    }

    /// chmod on top of the item's current revision.
    @discardableResult
    public func setMode(_ id: ItemID, _ mode: UInt32) async throws -> ItemMetadata {
        let base = try await connection.item(id).revision
        return try await connection.updateItem(id, UpdateItemRequest(baseRevision: base, mode: mode))
    }

    @discardableResult
    public func setXattrs(_ id: ItemID, _ xattrs: [String: Data]) async throws -> ItemMetadata {
        try await connection.setXattrs(id, SetXattrsRequest(baseRevision: nil, xattrs: xattrs))
    }

    /// Resolves every conflict version the file has now, keeping `keep` (nil: the current content).
    @discardableResult
    public func resolveConflicts(_ id: ItemID, keep: ItemID?) async throws -> ItemMetadata {
        let item = try await connection.item(id)
        return try await connection.resolveConflicts(id, ResolveConflictsRequest(baseRevision: item.revision, settled: item.conflicts.map(\.id), keep: keep))
    }

    @discardableResult
    public func delete(_ id: ItemID, recursive: Bool = false) async throws -> [ItemMetadata] {
        let base = try await connection.item(id).revision
        return try await connection.deleteItem(id, base: base, recursive: recursive)
    }

    /// Sets a key of the key-value store.
    public func setKeyValue(_ key: String, json: Data) async throws {
        _ = try await connection.ensureContainer()
        _ = try await connection.setKeyValue(key, json: json)
    }

    /// The digest of `content`, and the content to send inline with the request when it is
    /// small enough; a larger one is uploaded first.
    func send(_ content: [UInt8]) async throws -> (ContentDigest, Data?) {
        let digest = ContentDigest.of(content)
        if content.count <= SyncProtocol.maxInlineContent { return (digest, Data(content)) }
        let file = try TempDirectory("ubiq-other-device")
        defer { file.remove() }
        let path = file.path + "/content"
        guard FileManager.default.createFile(atPath: path, contents: Data(content)) else { throw TestSupportError("cannot write \(path)") }
        try await connection.uploadBlob(digest, size: Int64(content.count), fromFile: path) { _ in }
        return (digest, nil)
    }
}
