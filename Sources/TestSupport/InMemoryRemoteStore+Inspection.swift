import Foundation
import ItemModel
import ServerStorage
import SyncAPI
import SyncService

// What a test reads of the in-memory server, and the changes another device makes to it. Both
// go straight to the server's rules, counted nowhere, whether or not this client is online.

extension InMemoryRemoteStore {
    /// A path's entry in `tree()`.
    public struct TreeEntry: Sendable, Hashable, CustomStringConvertible {
        public var kind: ItemKind
        public var digest: ContentDigest?
        public init(kind: ItemKind, digest: ContentDigest?) {
            self.kind = kind
            self.digest = digest
        }
        public var description: String { kind == .folder ? "folder" : "file(\(digest?.hex.prefix(8) ?? "-"))" }
    }

    // MARK: Counters

    /// How many times `operation` was called (including refused and failed calls).
    public func calls(_ operation: Operation) -> Int { state.withLock { $0.calls[operation] ?? 0 } }

    /// How many calls of `operation` got past the injected failures and gates and were answered
    /// (with a result or a refusal). After a gate opens, this tells when the held call is done.
    public func answered(_ operation: Operation) -> Int { state.withLock { $0.answered[operation] ?? 0 } }

    /// Calls entered but not yet answered, per operation ("createItem 3/2" means three calls,
    /// two answered): what a stalled client is still waiting for. The push stream is left out
    /// (it is never answered). Calls refused at the door (offline, an injected failure) are
    /// never answered either, so they show here too; `unansweredStages` says so for each.
    public var callsInFlight: String {
        state.withLock { s in
            Operation.allCases.filter { $0 != .changeStream && (s.calls[$0] ?? 0) != (s.answered[$0] ?? 0) }
                .map { "\($0.rawValue) \(s.calls[$0] ?? 0)/\(s.answered[$0] ?? 0)" }.joined(separator: ", ")
        }
    }

    /// Content bytes sent by downloads so far.
    public var bytesDownloaded: Int64 { state.withLock { $0.blobBytesServed } }

    public var openStreamCount: Int { state.withLock { $0.streams.count } }

    // MARK: The server's state

    /// Reads the server's state for a test; a failing read of in-memory storage is a bug here.
    func inspect<T: Sendable>(_ body: @escaping @Sendable (ContainerService) async throws -> T) -> T {
        let server = server, containerID = containerID, account = account
        do {
            return try BlockingCall.run { try await body(try await server.container(containerID, of: account)) }
        } catch {
            fatalError("cannot read the in-memory server: \(error)")
        }
    }

    public var latestCursor: ChangeCursor { inspect { try await $0.info().cursor } }

    /// A live item; nil for unknown ids and tombstones.
    public func liveItem(_ id: ItemID) -> ItemMetadata? {
        inspect { c in try await Self.liveItem(id, in: c) }
    }

    static func liveItem(_ id: ItemID, in c: ContainerService) async throws -> ItemMetadata? {
        guard id.isWellFormed else { return nil }
        return try await c.service.storage.metadata.item(id, in: c.ref)
    }

    /// The live item at `/a/b` (`/` is the root).
    public func item(atPath path: String) -> ItemMetadata? {
        inspect { c in
            var current = try await Self.liveItem(.root, in: c)
            for name in path.split(separator: "/", omittingEmptySubsequences: true) {
                guard let folder = current, folder.kind == .folder else { return nil }
                current = try await c.children(of: folder.id).first { $0.name == name }
            }
            return current
        }
    }

    /// The content of a live file.
    public func content(of id: ItemID) -> [UInt8]? {
        inspect { c in
            guard let item = try await Self.liveItem(id, in: c), item.kind == .file else { return nil }
            let reader = try await c.fileContent(id).reader
            defer { reader.close() }
            var bytes = [UInt8](repeating: 0, count: Int(reader.size))
            var offset = 0
            while offset < bytes.count {
                let got = try bytes.withUnsafeMutableBytes { try reader.read(at: Int64(offset), into: UnsafeMutableRawBufferPointer(rebasing: $0[offset...])) }
                guard got > 0 else { throw TestSupportError("the content of \(id) ended early") }
                offset += got
            }
            return bytes
        }
    }

    public func content(atPath path: String) -> [UInt8]? {
        item(atPath: path).flatMap { content(of: $0.id) }
    }

    /// Whether the account may use this content (it was uploaded).
    public func hasBlobStored(_ digest: ContentDigest) -> Bool {
        let account = account
        return inspect { c in try await c.service.grantedSize(digest, for: account) != nil }
    }

    /// Every live item but the root, by path: what a client that is in sync must show.
    public func tree() -> [String: TreeEntry] {
        inspect { c in
            var out: [String: TreeEntry] = [:]
            func walk(_ folder: ItemID, _ prefix: String) async throws {
                for child in try await c.children(of: folder) {
                    let path = prefix + "/" + child.name
                    out[path] = TreeEntry(kind: child.kind, digest: child.digest)
                    if child.kind == .folder { try await walk(child.id, path) }
                }
            }
            try await walk(.root, "")
            return out
        }
    }

    // MARK: Another device

    /// Changes the container as another client would: straight on the server, counted nowhere,
    /// working while this client is offline. Each call is one commit, with a new revision.
    public var otherDevice: OtherDevice { OtherDevice(remote: self) }

    public struct OtherDevice: Sendable {
        let remote: InMemoryRemoteStore

        /// Runs `body` on the server; refusals are thrown as the client would hear them.
        func change<T: Sendable>(_ body: @escaping @Sendable (SyncService, AccountRef, ContainerID) async throws -> T) throws -> T {
            let server = remote.server, account = remote.account, containerID = remote.containerID
            do {
                return try BlockingCall.run { try await body(server, account, containerID) }
            } catch {
                throw InMemoryRemoteStore.remoteError(error)
            }
        }

        /// Applies `body` on top of the item's current revision: when this client changed the
        /// item in between, it is read again and applied on top of that.
        func onTop<T: Sendable>(of id: ItemID, _ body: @escaping @Sendable (ContainerService, Revision) async throws -> T) throws -> T {
            try change { server, account, containerID in
                let c = try await server.container(containerID, of: account)
                while true {
                    do {
                        return try await body(c, try await c.item(id).revision)
                    } catch StorageError.revisionConflict {
                        continue
                    }
                }
            }
        }

        /// The content uploaded as another device uploads it.
        static func upload(_ content: [UInt8], to server: SyncService, for account: AccountRef) async throws -> ContentDigest {
            let digest = ContentDigest.of(content)
            let upload = try server.beginUpload(digest, length: Int64(content.count), for: account)
            try content.withUnsafeBytes { try upload.write($0) }
            return try await upload.finish().digest
        }

        @discardableResult
        public func createFolder(_ name: String, in parent: ItemID = .root, xattrs: [String: Data] = [:]) throws -> ItemMetadata {
            try change { server, account, containerID in
                try await server.createItem(CreateItemRequest(parentID: parent, name: name, kind: .folder, xattrs: xattrs), in: containerID, of: account)
            }
        }

        @discardableResult
        public func createFile(_ name: String, in parent: ItemID = .root, content: [UInt8], mode: UInt32 = 0o644, xattrs: [String: Data] = [:]) throws -> ItemMetadata {
            try change { server, account, containerID in
                let digest = try await Self.upload(content, to: server, for: account)
                return try await server.createItem(
                    CreateItemRequest(parentID: parent, name: name, kind: .file, digest: digest, size: Int64(content.count), mode: mode, xattrs: xattrs),
                    in: containerID, of: account)
            }
        }

        /// New content on top of the item's current revision.
        @discardableResult
        public func updateContent(_ id: ItemID, to content: [UInt8]) throws -> ItemMetadata {
            _ = try change { server, account, _ in try await Self.upload(content, to: server, for: account) }
            return try onTop(of: id) { c, base in
                try await c.updateContent(id, UpdateContentRequest(baseRevision: base, digest: ContentDigest.of(content), size: Int64(content.count)))
            }
        }

        /// Renames and/or moves on top of the item's current revision.
        @discardableResult
        public func move(_ id: ItemID, to name: String? = nil, parent: ItemID? = nil) throws -> ItemMetadata {
            try onTop(of: id) { c, base in try await c.updateItem(id, UpdateItemRequest(baseRevision: base, name: name, parentID: parent)) }
        }

        /// chmod on top of the item's current revision.
        @discardableResult
        public func setMode(_ id: ItemID, _ mode: UInt32) throws -> ItemMetadata {
            try onTop(of: id) { c, base in try await c.updateItem(id, UpdateItemRequest(baseRevision: base, mode: mode)) }
        }

        @discardableResult
        public func setXattrs(_ id: ItemID, _ xattrs: [String: Data]) throws -> ItemMetadata {
            try onTop(of: id) { c, _ in try await c.setXattrs(id, SetXattrsRequest(baseRevision: nil, xattrs: xattrs)) }
        }

        @discardableResult
        public func delete(_ id: ItemID, recursive: Bool = false) throws -> [ItemMetadata] {
            try onTop(of: id) { c, base in try await c.deleteItem(id, base: base, recursive: recursive) }
        }
    }
}
