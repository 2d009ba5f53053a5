import ItemModel

/// The mount daemon's control socket (`CACHE/control.sock`), spoken by the `ubiq` command.
/// JSON over HTTP on a Unix socket; local to the machine and to the user who owns the cache.
public enum ControlPath {
    public static let status = "/status"
    /// `GET /metrics`: the mount's metrics as Prometheus text (`ubiq status --metrics`).
    public static let metrics = "/metrics"
    /// `POST /flush?timeout=SECONDS`: waits until every local change is on the server, or the
    /// timeout (30 s by default; out of `isFlushTimeout`: 400).
    public static let flush = "/flush"
    /// A flush's timeout in seconds: from 0 to a day.
    public static func isFlushTimeout(_ seconds: Double) -> Bool { seconds >= 0 && seconds <= 86_400 }
    public static let flushTimeoutRule = "the timeout is a number of seconds from 0 to 86400"
    /// `POST /unmount`: unmounts and ends the daemon (after answering).
    public static let unmount = "/unmount"
    /// `GET /events`: one JSON object per line, as `ubiq monitor` prints them.
    public static let events = "/events"
    /// `GET /earlier-versions?ino=N`: the file's earlier contents, from the server
    /// (`EarlierVersionsReport`).
    public static let earlierVersions = "/earlier-versions"
    /// `POST /restore?ino=N&revision=R`: makes that earlier content current (`RestoreReport`).
    public static let restore = "/restore"
    /// `GET /query?q=PREDICATE&args=JSON-ARRAY&scope=S&sort=K,K`: a one-shot metadata query
    /// (`QueryAnswer`).
    public static let query = "/query"
    /// `GET /query/output?…` (the parameters of `/query`, with `json=1` for `--json` and
    /// `root=MOUNTPOINT`, the prefix of each plain path): what `ubiq query` prints, as text.
    /// 200: its output. 422: a predicate that cannot run; the body is the command's refusal
    /// (for standard output with `json=1`, else standard error), its exit status 2. 400: a
    /// request the command refuses as bad usage before asking (an unknown key to sort, group or
    /// count by), left to the command to say.
    public static let queryOutput = "/query/output"
    /// `GET /query/live?…` (the parameters of `/query`, and `interval`, seconds a batch of
    /// changes is collected for, 0.1 by default): JSON lines, `LiveQueryLine`, until the client
    /// goes away. An interval out of `isLiveInterval` is one `error` line.
    public static let liveQuery = "/query/live"
    /// A live query's batch interval in seconds: more than 0, at most a minute (a change held
    /// back longer is one nobody waits for).
    public static func isLiveInterval(_ seconds: Double) -> Bool { seconds > 0 && seconds <= 60 }
    public static let liveIntervalRule = "a live query's batch interval is more than 0 and at most 60 seconds"
    /// `GET /kv[?key=K]`: the key-value store as this mount sees it, every key or one, as a
    /// `KeyValuePage`: the store's version this mount has read up to, and each key's value with
    /// the server's version of it (0: a write of this mount not yet on the server).
    public static let keyValues = "/kv"
    /// `POST /kv/set?key=K`, the value's JSON as the body: `KeyValueWriteReport`.
    public static let keyValueSet = "/kv/set"
    /// `POST /kv/remove?key=K`: `KeyValueWriteReport`.
    public static let keyValueRemove = "/kv/remove"
    /// `GET /kv/watch`: JSON lines, `KeyValueNotice`, until the client goes away.
    public static let keyValueWatch = "/kv/watch"
    /// `GET /whoami`: `WhoAmIReport`.
    public static let whoami = "/whoami"
    /// `GET /item-status?path=P`, P from the container's root (`/a/b`): the status attributes
    /// of the item there, not of what a link points at (`ItemStatusReport`). For links, FIFOs
    /// and sockets, whose `user.*` attributes Linux does not let anyone read.
    public static let itemStatus = "/item-status"
    /// `POST /share?path=P[&expires=SECONDS]`: shares the item at P (from the container's
    /// root), whose content must be on the server (`ShareReport`).
    public static let share = "/share"
    /// `POST /unshare?path=P`: removes every share of the item at P (`ShareReport`, `removed`).
    public static let unshare = "/unshare"
    /// `GET /shares`: the container's shares (`ShareReport`, `shares`).
    public static let shares = "/shares"

    /// A key as a query parameter's value: every byte but `A-Z a-z 0-9 - _ ~` percent-encoded.
    public static func keyParameter(_ key: String) -> String { "key=" + APIPath.percentEncoded(key) }
}

/// The answer to `POST /kv/set` and `/kv/remove`: nil `error` when the write is queued (it is
/// kept on this device and goes up when the server can be reached).
public struct KeyValueWriteReport: Codable, Sendable, Equatable {
    public var error: String?
    /// The write passed one of the store's limits (`quotaViolation`).
    public var quotaViolation: Bool?
    public init(error: String? = nil, quotaViolation: Bool? = nil) {
        self.error = error
        self.quotaViolation = quotaViolation
    }
}

/// The answer to `GET /whoami`: whose container the mount shows, and the account's identity
/// token (nil until the server was first reached from this cache).
public struct WhoAmIReport: Codable, Sendable, Equatable {
    public var account: String
    public var container: String
    public var server: String
    public var identityToken: String?
    public init(account: String, container: String, server: String, identityToken: String?) {
        (self.account, self.container, self.server, self.identityToken) = (account, container, server, identityToken)
    }
}

/// One line of a live query (rules L1–L4): each initial result, then `finishGathering`, then an
/// `update` per batch of changes that touches the result set; or one `error`.
public struct LiveQueryLine: Codable, Sendable, Equatable {
    public var event: String
    public var item: QueryResultItem?
    public var added: [QueryResultItem]?
    public var changed: [QueryResultItem]?
    public var removed: [RemovedItem]?
    public var error: String?
    public var position: Int?

    public init(event: String, item: QueryResultItem? = nil, added: [QueryResultItem]? = nil, changed: [QueryResultItem]? = nil,
                removed: [RemovedItem]? = nil, error: String? = nil, position: Int? = nil) {
        (self.event, self.item, self.added, self.changed, self.removed, self.error, self.position) = (event, item, added, changed, removed, error, position)
    }

    /// An item that left the results: its identity and its last known path (L4).
    public struct RemovedItem: Codable, Sendable, Equatable {
        public var itemID: String
        public var path: String
        public init(itemID: String, path: String) { (self.itemID, self.path) = (itemID, path) }
    }
}

/// The answer to `GET /query`: the matching items, or why the predicate cannot run (the
/// offset, in Unicode scalars, of the offending token).
public struct QueryAnswer: Codable, Sendable {
    public var results: [QueryResultItem]?
    /// With `values=KEY`: each distinct value of the key among the results, with its count.
    public var values: [ValueCount]?
    /// With `count=1`: how many items match, and no results.
    public var count: Int?
    public var error: String?
    public var position: Int?
    public init(results: [QueryResultItem]? = nil, values: [ValueCount]? = nil, count: Int? = nil, error: String? = nil, position: Int? = nil) {
        self.results = results
        self.values = values
        self.count = count
        self.error = error
        self.position = position
    }
}

public struct ValueCount: Codable, Sendable, Equatable {
    public var value: String
    public var count: Int
    public init(value: String, count: Int) { (self.value, self.count) = (value, count) }
}

/// One item a query found, under the keys' short names, each with its JSON type.
public struct QueryResultItem: Codable, Sendable, Equatable {
    /// In the container, with a leading `/`.
    public var path: String
    public var name: String
    public var itemID: String
    public var kind: String
    public var size: Int64
    /// ISO 8601, UTC, to the second.
    public var created: String
    public var modified: String
    public var contentType: String
    public var downloadingStatus: String
    public var isDownloading: Bool
    public var percentDownloaded: Int
    public var isUploaded: Bool
    public var isUploading: Bool
    public var percentUploaded: Int
    public var hasUnresolvedConflicts: Bool
    public var pinned: Bool
    public var tags: [String]
    /// With `group=KEY`: the item's value of that key as text (several joined with `, `).
    public var group: String?

    public init(
        path: String, name: String, itemID: String, kind: String, size: Int64, created: String, modified: String, contentType: String,
        downloadingStatus: String, isDownloading: Bool, percentDownloaded: Int, isUploaded: Bool, isUploading: Bool, percentUploaded: Int,
        hasUnresolvedConflicts: Bool, pinned: Bool, tags: [String]
    ) {
        (self.path, self.name, self.itemID, self.kind, self.size, self.created, self.modified, self.contentType) =
            (path, name, itemID, kind, size, created, modified, contentType)
        (self.downloadingStatus, self.isDownloading, self.percentDownloaded, self.isUploaded, self.isUploading, self.percentUploaded) =
            (downloadingStatus, isDownloading, percentDownloaded, isUploaded, isUploading, percentUploaded)
        (self.hasUnresolvedConflicts, self.pinned, self.tags) = (hasUnresolvedConflicts, pinned, tags)
    }
}

/// The answer to `GET /earlier-versions`: the versions, or why there are none to give.
public struct EarlierVersionsReport: Codable, Sendable {
    public var versions: [EarlierVersion]?
    public var error: String?
    public init(versions: [EarlierVersion]? = nil, error: String? = nil) {
        self.versions = versions
        self.error = error
    }
}

/// A share as `ubiq share` shows it: where its link is, and where its item is now.
public struct ShareLine: Codable, Sendable, Equatable {
    /// The shared item's path in the mount now, from its top; absent when it is gone (the
    /// share still serves its snapshot).
    public var path: String?
    public var url: String
    public var share: ShareInfo
    public init(path: String?, url: String, share: ShareInfo) {
        self.path = path
        self.url = url
        self.share = share
    }
}

/// The answer to `POST /share`, `POST /unshare` and `GET /shares`; `error` when refused.
public struct ShareReport: Codable, Sendable {
    public var shares: [ShareLine]
    public var removed: Int?
    public var error: String?
    public init(shares: [ShareLine] = [], removed: Int? = nil, error: String? = nil) {
        self.shares = shares
        self.removed = removed
        self.error = error
    }
}

/// The answer to `GET /item-status`: the `user.ubiq.*` attributes by name, or why there are none.
public struct ItemStatusReport: Codable, Sendable {
    public var attributes: [String: String]
    public var error: String?
    public init(attributes: [String: String] = [:], error: String? = nil) {
        self.attributes = attributes
        self.error = error
    }
}

/// The answer to `POST /restore`: nil `error` when the content is current again.
public struct RestoreReport: Codable, Sendable {
    public var error: String?
    public init(error: String? = nil) { self.error = error }
}

public struct MountStatusReport: Codable, Sendable, Equatable {
    public var mountpoint: String
    public var server: String
    public var account: String
    public var container: String
    public var device: String
    public var connected: Bool
    public var lastError: String?
    public var pendingUploads: Int
    public var activeDownloads: Int
    public var cachedBytes: Int64
    public var cacheLimit: Int64?
    public var items: Int
    /// The mount lists the container's whole tree (as of its last catch-up with the server):
    /// false on a fresh device until its first sync has ended.
    public var hasWholeTree: Bool
    /// The daemon's log file; absent when it logs to a terminal or another standard error.
    public var logFile: String?

    public init(
        mountpoint: String, server: String, account: String, container: String, device: String, connected: Bool,
        lastError: String?, pendingUploads: Int, activeDownloads: Int, cachedBytes: Int64, cacheLimit: Int64?, items: Int,
        hasWholeTree: Bool, logFile: String?
    ) {
        self.hasWholeTree = hasWholeTree
        self.logFile = logFile
        self.mountpoint = mountpoint
        self.server = server
        self.account = account
        self.container = container
        self.device = device
        self.connected = connected
        self.lastError = lastError
        self.pendingUploads = pendingUploads
        self.activeDownloads = activeDownloads
        self.cachedBytes = cachedBytes
        self.cacheLimit = cacheLimit
        self.items = items
    }
}

public struct FlushReport: Codable, Sendable, Equatable {
    /// Changes still not on the server when the flush ended.
    public var pending: Int
    /// Paths of the items they belong to (at most 20).
    public var paths: [String]
    public init(pending: Int, paths: [String]) {
        self.pending = pending
        self.paths = paths
    }
}

/// A duration as the command lines take it: `30d`, `12h`, `90m`, `45s`, a positive whole
/// number and its unit.
public enum DurationText {
    public static let usage = "a number and s, m, h or d (for example 7d)"

    public static func parse(_ text: String) -> Duration? {
        guard let unit = text.last, let n = Int64(text.dropLast()), n > 0, n < Int64.max / 86400 else { return nil }
        switch unit {
        case "s": return .seconds(n)
        case "m": return .seconds(n * 60)
        case "h": return .seconds(n * 3600)
        case "d": return .seconds(n * 86400)
        default: return nil
        }
    }
}
