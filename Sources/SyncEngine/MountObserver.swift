import ItemModel

/// What the kernel must forget after a remote change. Sent by the engine after the change is
/// committed, and delivered to the kernel by a separate service, never inside a request.
public enum KernelInvalidation: Sendable, Hashable {
    /// The name `name` in folder `parent` may now point elsewhere (or nowhere).
    case entry(parent: Int64, name: String)
    /// The item's attributes or content changed.
    case inode(Int64)
    /// Only the item's attributes changed (a download landed: its blocks now count); the
    /// pages the kernel holds of it stay good.
    case attributes(Int64)
}

/// A change the mount reports to `ubiq monitor` and live queries.
public struct MountEvent: Sendable, Codable, Hashable {
    public var kind: String
    public var path: String?
    public var detail: String?
    public init(kind: String, path: String? = nil, detail: String? = nil) {
        self.kind = kind
        self.path = path
        self.detail = detail
    }
}

/// Who hears about changes the engine made: the mount daemon, which invalidates kernel caches.
public protocol MountObserver: Sendable {
    func invalidate(_ invalidations: [KernelInvalidation])
    func event(_ event: MountEvent)
}
