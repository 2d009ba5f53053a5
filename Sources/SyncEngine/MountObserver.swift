import Foundation
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

/// What a mount event reports: a closed set, the same on every device. `ubiq monitor` shows
/// these names, and docs/CLI.md lists what each means.
public enum MountEventKind: String, Sendable, Codable, Hashable, CaseIterable {
    /// Another device's change, applied here from the change feed.
    case created, changed, renamed, deleted
    /// This device's change going up.
    case uploadStarted, uploadProgress, uploaded, uploadFailed
    /// A file's content coming down.
    case downloadStarted, downloadProgress, downloaded, downloadFailed
    /// A file's list of conflict versions went from empty to not, or back.
    case conflictAppeared, conflictResolved
    /// This device's change met another device's and was settled without asking anyone (an
    /// edit of a deleted item kept, a taken name given to a conflicted copy); `detail` says how.
    case reconciled
    /// A file's downloaded content left the cache to make room.
    case evicted
    /// Something failed that no other kind covers; `detail` says what.
    case error
    /// The server became reachable, or stopped being.
    case online, offline
    /// The mount shows another account than its cache showed before, or the server answers
    /// for another account than the one the cache holds.
    case accountChange
}

/// A change the mount reports to `ubiq monitor`.
public struct MountEvent: Sendable, Codable, Hashable {
    /// When it happened: ISO-8601, UTC, with milliseconds.
    public var time: String
    public var kind: MountEventKind
    /// The item's path in the mount, from its top, starting with "/" ("/Documents/a.txt").
    public var path: String?
    /// For `renamed`: the path it had before.
    public var from: String?
    public var detail: String?
    /// For `uploaded` and `downloaded`: the size of the content that went up or came down.
    public var bytes: Int64?

    public init(_ kind: MountEventKind, path: String? = nil, from: String? = nil, detail: String? = nil, bytes: Int64? = nil, at time: Date = Date()) {
        self.bytes = bytes
        self.time = Self.timeFormat.format(time)
        self.kind = kind
        self.path = path
        self.from = from
        self.detail = detail
    }

    static let timeFormat = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
}

/// Who hears about changes the engine made: the mount daemon, which invalidates kernel caches.
public protocol MountObserver: Sendable {
    func invalidate(_ invalidations: [KernelInvalidation])
    /// `keep`: also told to every listener that comes later (see `FanOut`).
    func event(_ event: MountEvent, keep: Bool)
}

extension MountObserver {
    public func event(_ event: MountEvent) { self.event(event, keep: false) }
}
