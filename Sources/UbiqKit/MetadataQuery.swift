import ControlSocket
import Foundation
import SyncAPI
import Synchronization

/// NSMetadataQuery over a mount: the daemon's live query (docs/QUERY_LANGUAGE.md, "Live
/// queries") gathers the matching items, placeholders included, then reports each batch of
/// changes that touches them, local and remote alike.
///
/// Events come both as an `AsyncSequence` (`events`) and as notifications on
/// `NotificationCenter.default` with the query as their object, under Apple's names; both in the
/// same order, from the query's own task. Thread-safe: one lock guards the configuration, the
/// results and the subscribers, and is never held while an event is delivered.
public final class MetadataQuery: Sendable {
    /// NSMetadataQueryUbiquitousDocumentsScope and NSMetadataQueryUbiquitousDataScope: what is
    /// below the container's `/Documents`, and everything else (the folder itself included).
    public enum SearchScope: Sendable, Hashable {
        case documents
        case data
    }

    /// NSSortDescriptor for a metadata key: any name the query language takes.
    public struct SortDescriptor: Sendable, Hashable {
        public var key: String
        public var ascending: Bool
        public init(key: String, ascending: Bool = true) {
            self.key = key
            self.ascending = ascending
        }
    }

    public enum Event: Sendable {
        case didStartGathering
        /// Results found while gathering, in batches, before `didFinishGathering`.
        case gatheringProgress(added: [MetadataItem])
        case didFinishGathering
        /// The net effect of a batch of changes (an item is in one array at most). A removed
        /// item is given as it was last seen.
        case didUpdate(added: [MetadataItem], changed: [MetadataItem], removed: [MetadataItem])
        /// The query stopped: the predicate cannot run, or the mount went away. Not in Apple's API.
        case didFail(UbiqKitError)
    }

    /// NSMetadataQueryResultGroup: the results that share a value of a grouping attribute, with
    /// their subgroups by the next attribute.
    public struct ResultGroup: Sendable {
        public var attribute: String
        /// The value as text: numbers without a needless fraction, dates in ISO 8601, booleans
        /// `1`/`0`, several values joined with `, `.
        public var value: String
        public var results: [MetadataItem]
        public var subgroups: [ResultGroup]
    }

    /// NSMetadataQueryAttributeValueTuple.
    public struct AttributeValueTuple: Sendable, Hashable {
        public var attribute: String
        public var value: String
        public var count: Int
    }

    enum Phase { case idle, gathering, live, stopped }

    struct State {
        var predicate: MetadataPredicate?
        var searchScopes: [SearchScope] = []
        var sortDescriptors: [SortDescriptor] = []
        var groupingAttributes: [String] = []
        var valueListAttributes: [String] = []
        var notificationBatchingInterval: TimeInterval = 0.1
        var phase = Phase.idle
        var disabledUpdates = 0
        /// Every matching item as the daemon last reported it.
        var latest: [String: MetadataItem] = [:]
        /// What `results` shows: `latest` as of the last event, in order.
        var visible: [MetadataItem] = []
        var runner: Task<Void, Never>?
        var inputs: AsyncStream<Input>.Continuation?
        var subscribers: [Int: AsyncStream<Event>.Continuation] = [:]
        var nextSubscriber = 0
        var lastError: UbiqKitError?
    }

    enum Input: Sendable {
        case line(String)
        case enableUpdates
        case ended(String?)
    }

    let target: MountTarget
    let state = Mutex(State())

    /// A query of the container mounted at `containerURL` (any path inside the mount); nil:
    /// the default container, looked up when the query starts.
    public init(containerURL: URL? = nil, registry: MountRegistryLocation = .standard) {
        target = MountTarget(containerURL: containerURL, registry: registry)
    }

    // MARK: Configuration (read when the query starts)

    public var predicate: MetadataPredicate? {
        get { state.withLock { $0.predicate } }
        set { state.withLock { $0.predicate = newValue } }
    }

    /// Empty, or both: the whole container.
    public var searchScopes: [SearchScope] {
        get { state.withLock { $0.searchScopes } }
        set { state.withLock { $0.searchScopes = newValue } }
    }

    /// The order of `results`; ties go by path. By path when empty.
    public var sortDescriptors: [SortDescriptor] {
        get { state.withLock { $0.sortDescriptors } }
        set { state.withLock { $0.sortDescriptors = newValue; $0.visible = Self.ordered($0.visible, by: newValue) } }
    }

    public var groupingAttributes: [String] {
        get { state.withLock { $0.groupingAttributes } }
        set { state.withLock { $0.groupingAttributes = newValue } }
    }

    public var valueListAttributes: [String] {
        get { state.withLock { $0.valueListAttributes } }
        set { state.withLock { $0.valueListAttributes = newValue } }
    }

    /// Seconds the daemon collects changes for before it reports them (0.1 by default, the
    /// daemon's). Any value is taken, as Apple's property takes it, and kept within what the
    /// daemon takes: at least 0.001, at most 60; not a number is the default.
    public var notificationBatchingInterval: TimeInterval {
        get { state.withLock { $0.notificationBatchingInterval } }
        set { state.withLock { $0.notificationBatchingInterval = newValue.isNaN ? 0.1 : min(60, max(0.001, newValue)) } }
    }

    // MARK: Running

    /// Starts gathering. False when the query is running, has no predicate, no mount answers,
    /// or the daemon refuses the predicate (`lastError` says which, with the offending token's
    /// offset). Blocks for the daemon to check the predicate (one count of the matches). Ask for
    /// `events` first: an event is delivered to the sequences that exist then.
    @discardableResult
    public func start() -> Bool {
        let configuration: State? = state.withLock { s in
            guard s.phase == .idle || s.phase == .stopped, s.predicate != nil else { return nil }
            s.phase = .gathering
            return s
        }
        guard let configuration, let predicate = configuration.predicate else { return false }
        let mount: RunningMount
        do throws(UbiqKitError) {
            mount = try target.mount()
            // A one-shot count first: a predicate the daemon refuses makes `start()` false, as
            // Apple's does for a query that cannot start, instead of a stream that fails later.
            let check: QueryAnswer = try mount.call("GET", ControlPath.query + "?" + Self.parameters(predicate, configuration, count: true), timeout: 60)
            if let error = check.error { throw .invalidPredicate(error, position: check.position) }
        } catch {
            state.withLock { s in
                s.phase = .idle
                s.lastError = error
            }
            return false
        }
        let path = ControlPath.liveQuery + "?" + Self.parameters(predicate, configuration, count: false) + "&interval=\(configuration.notificationBatchingInterval)"
        let (inputs, feed) = AsyncStream<Input>.makeStream()
        return state.withLock { s in
            // A `stop()` while the predicate was checked wins.
            guard s.phase == .gathering else { return false }
            (s.latest, s.visible, s.lastError, s.inputs) = ([:], [], nil, feed)
            s.runner = Task { await self.run(mount: mount, path: path, inputs: inputs, feed: feed) }
            return true
        }
    }

    /// Stops the query: no more events, and every `events` sequence ends. The results stay as
    /// they were; `start()` begins afresh. A started query runs until this is called: its own
    /// task holds it, so letting go of it does not stop it.
    public func stop() {
        let subscribers = state.withLock { s in
            s.phase = .stopped
            s.runner?.cancel()
            s.inputs?.finish()
            (s.runner, s.inputs) = (nil, nil)
            defer { s.subscribers = [:] }
            return Array(s.subscribers.values)
        }
        subscribers.forEach { $0.finish() }
    }

    /// Holds `results` as they are, so that they can be walked; the changes meanwhile are
    /// reported as one update by the `enableUpdates()` that balances it.
    public func disableUpdates() {
        state.withLock { $0.disabledUpdates += 1 }
    }

    public func enableUpdates() {
        let feed = state.withLock { s -> AsyncStream<Input>.Continuation? in
            s.disabledUpdates = max(0, s.disabledUpdates - 1)
            return s.disabledUpdates == 0 ? s.inputs : nil
        }
        feed?.yield(.enableUpdates)
    }

    public var isStarted: Bool { state.withLock { $0.phase == .gathering || $0.phase == .live } }
    public var isGathering: Bool { state.withLock { $0.phase == .gathering } }
    public var isStopped: Bool { state.withLock { $0.phase == .stopped } }
    /// Why the last `start()` returned false, or why the query failed.
    public var lastError: UbiqKitError? { state.withLock { $0.lastError } }

    // MARK: Results

    public var results: [MetadataItem] { state.withLock { $0.visible } }
    public var resultCount: Int { state.withLock { $0.visible.count } }
    public func result(at index: Int) -> MetadataItem { state.withLock { $0.visible[index] } }
    public func index(ofResult result: MetadataItem) -> Int? { state.withLock { $0.visible.firstIndex { $0.id == result.id } } }

    /// The results grouped by the first of `groupingAttributes`, each group by the next.
    public var groupedResults: [ResultGroup] {
        let (items, attributes) = state.withLock { ($0.visible, $0.groupingAttributes) }
        return Self.groups(items, by: attributes[...])
    }

    /// For each of `valueListAttributes`, its values among the results with how many have each,
    /// the most frequent first (several values, as tags, each counted).
    public var valueLists: [String: [AttributeValueTuple]] {
        let (items, attributes) = state.withLock { ($0.visible, $0.valueListAttributes) }
        var lists: [String: [AttributeValueTuple]] = [:]
        for attribute in attributes {
            var counts: [String: Int] = [:]
            for item in items {
                for value in item.texts(forAttribute: attribute) { counts[value, default: 0] += 1 }
            }
            lists[attribute] = counts.map { AttributeValueTuple(attribute: attribute, value: $0.key, count: $0.value) }
                .sorted { ($0.count, $1.value) > ($1.count, $0.value) }
        }
        return lists
    }

    // MARK: Events

    /// The events from now until `stop()`, as they are delivered to notifications.
    public var events: AsyncStream<Event> {
        let (stream, continuation) = AsyncStream<Event>.makeStream()
        let id = state.withLock { s in
            defer { s.nextSubscriber += 1 }
            s.subscribers[s.nextSubscriber] = continuation
            return s.nextSubscriber
        }
        continuation.onTermination = { [weak self] _ in _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) } }
        return stream
    }

    public static let didStartGatheringNotification = Notification.Name("NSMetadataQueryDidStartGatheringNotification")
    public static let gatheringProgressNotification = Notification.Name("NSMetadataQueryGatheringProgressNotification")
    public static let didFinishGatheringNotification = Notification.Name("NSMetadataQueryDidFinishGatheringNotification")
    public static let didUpdateNotification = Notification.Name("NSMetadataQueryDidUpdateNotification")
    /// Posted with `error` in the user info: the query stopped (`Event.didFail`).
    public static let didFailNotification = Notification.Name("UbiqKitMetadataQueryDidFailNotification")
    /// The user info keys of `didUpdateNotification` (and of `gatheringProgressNotification`,
    /// added only): `[MetadataItem]`.
    public static let updateAddedItemsKey = "kMDQueryUpdateAddedItems"
    public static let updateChangedItemsKey = "kMDQueryUpdateChangedItems"
    public static let updateRemovedItemsKey = "kMDQueryUpdateRemovedItems"

    // MARK: The query's task

    func run(mount: RunningMount, path: String, inputs: AsyncStream<Input>, feed: AsyncStream<Input>.Continuation) async {
        deliver(.didStartGathering)
        let reader = Task {
            do {
                for try await line in mount.lines(path) { feed.yield(.line(line)) }
                feed.yield(.ended(nil))
            } catch {
                feed.yield(.ended("\(error)"))
            }
        }
        defer { reader.cancel() }
        // Results are reported in batches while gathering: an event per item would cost more
        // than the item, and one at the end would leave a long gathering silent.
        let progressBatch = 256
        var gathered: [MetadataItem] = []
        for await input in inputs {
            guard !Task.isCancelled else { return }
            switch input {
            case .line(let text):
                // Blank lines keep the stream alive.
                guard !text.isEmpty, let line = try? JSONDecoder().decode(LiveQueryLine.self, from: Data(text.utf8)) else { continue }
                switch line.event {
                case "result":
                    guard let record = line.item else { continue }
                    let item = MetadataItem(record: record, mountpoint: mount.mountpoint)
                    state.withLock { $0.latest[item.id] = item }
                    gathered.append(item)
                    if gathered.count >= progressBatch {
                        publishProgress(gathered)
                        gathered = []
                    }
                case "finishGathering":
                    if !gathered.isEmpty { publishProgress(gathered) }
                    gathered = []
                    state.withLock { $0.phase = .live }
                    deliver(.didFinishGathering)
                case "update":
                    let enabled = state.withLock { s in
                        for record in (line.added ?? []) + (line.changed ?? []) { s.latest[record.itemID] = MetadataItem(record: record, mountpoint: mount.mountpoint) }
                        for gone in line.removed ?? [] { s.latest[gone.itemID] = nil }
                        return s.disabledUpdates == 0
                    }
                    if enabled { publishUpdate() }
                case "error":
                    return fail(.invalidPredicate(line.error ?? "the query cannot run", position: line.position))
                default:
                    continue
                }
            case .enableUpdates:
                publishUpdate()
            case .ended(let why):
                return fail(.daemonUnreachable(why ?? "the live query ended (the mount went away)"))
            }
        }
    }

    func publishProgress(_ added: [MetadataItem]) {
        state.withLock { s in
            // A stopped query's results stay as they were when it stopped.
            if s.phase != .stopped { s.visible = Self.ordered(s.latest.values, by: s.sortDescriptors) }
        }
        deliver(.gatheringProgress(added: added))
    }

    /// Shows `latest` and reports how it differs from what was shown: the net effect of every
    /// change since the last event, also of those held back by `disableUpdates()`.
    func publishUpdate() {
        let event: Event? = state.withLock { s in
            guard s.phase != .stopped else { return nil }
            let shown = Dictionary(s.visible.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
            var added: [MetadataItem] = [], changed: [MetadataItem] = []
            let ordered = Self.ordered(s.latest.values, by: s.sortDescriptors)
            for item in ordered {
                if let before = shown[item.id] {
                    if before != item { changed.append(item) }
                } else {
                    added.append(item)
                }
            }
            let removed = s.visible.filter { s.latest[$0.id] == nil }
            guard !added.isEmpty || !changed.isEmpty || !removed.isEmpty else { return nil }
            s.visible = ordered
            return .didUpdate(added: added, changed: changed, removed: removed)
        }
        if let event { deliver(event) }
    }

    func fail(_ error: UbiqKitError) {
        let failed = state.withLock { s in
            guard s.phase != .stopped else { return false }
            s.lastError = error
            return true
        }
        guard failed else { return }
        deliver(.didFail(error))
        stop()
    }

    func deliver(_ event: Event) {
        let (stopped, subscribers) = state.withLock { ($0.phase == .stopped, Array($0.subscribers.values)) }
        guard !stopped else { return }
        let (name, userInfo): (Notification.Name, [AnyHashable: Any]?) = switch event {
        case .didStartGathering: (Self.didStartGatheringNotification, nil)
        case .gatheringProgress(let added): (Self.gatheringProgressNotification, [Self.updateAddedItemsKey: added])
        case .didFinishGathering: (Self.didFinishGatheringNotification, nil)
        case .didUpdate(let added, let changed, let removed):
            (Self.didUpdateNotification, [Self.updateAddedItemsKey: added, Self.updateChangedItemsKey: changed, Self.updateRemovedItemsKey: removed])
        case .didFail(let error): (Self.didFailNotification, ["error": error])
        }
        // The notification first, then the streams: its observers run within `post`, so a
        // program that sees an event on a stream has had the notification of it too (posted
        // after, a consumer of the stream could look before the observers ran).
        NotificationCenter.default.post(name: name, object: self, userInfo: userInfo)
        for subscriber in subscribers { subscriber.yield(event) }
    }

    // MARK: Helpers

    /// The parameters of `/query` and `/query/live`.
    static func parameters(_ predicate: MetadataPredicate, _ configuration: State, count: Bool) -> String {
        var request = QueryOutputRequest(predicate: predicate.predicateFormat)
        let scopes = Set(configuration.searchScopes)
        request.scope = scopes == [.documents] ? "documents" : scopes == [.data] ? "data" : "all"
        if !configuration.sortDescriptors.isEmpty {
            request.sort = configuration.sortDescriptors.map { ($0.ascending ? "" : "-") + $0.key }.joined(separator: ",")
        }
        request.count = count
        return request.queryString(root: "")
    }

    /// `items` in the order of `descriptors`, then by path (the daemon's order: by bytes).
    static func ordered(_ items: some Collection<MetadataItem>, by descriptors: [SortDescriptor]) -> [MetadataItem] {
        items.sorted { a, b in
            for descriptor in descriptors {
                let order = compare(a.value(forAttribute: descriptor.key), b.value(forAttribute: descriptor.key))
                if order != 0 { return descriptor.ascending ? order < 0 : order > 0 }
            }
            return a.containerPath.utf8.lexicographicallyPrecedes(b.containerPath.utf8)
        }
    }

    /// -1, 0 or 1; no value comes first.
    static func compare(_ a: Any?, _ b: Any?) -> Int {
        func sign<T: Comparable>(_ x: T, _ y: T) -> Int { x < y ? -1 : x > y ? 1 : 0 }
        switch (a, b) {
        case (nil, nil): return 0
        case (nil, _): return -1
        case (_, nil): return 1
        case (let x as String, let y as String): return x.utf8.lexicographicallyPrecedes(y.utf8) ? -1 : x == y ? 0 : 1
        case (let x as Int64, let y as Int64): return sign(x, y)
        case (let x as Double, let y as Double): return sign(x, y)
        case (let x as Date, let y as Date): return sign(x, y)
        case (let x as Bool, let y as Bool): return sign(x ? 1 : 0, y ? 1 : 0)
        case (let x as URL, let y as URL): return compare(x.path, y.path)
        default: return 0
        }
    }

    static func groups(_ items: [MetadataItem], by attributes: ArraySlice<String>) -> [ResultGroup] {
        guard let attribute = attributes.first else { return [] }
        var order: [String] = []
        var members: [String: [MetadataItem]] = [:]
        for item in items {
            let value = item.texts(forAttribute: attribute).joined(separator: ", ")
            if members[value] == nil { order.append(value) }
            members[value, default: []].append(item)
        }
        return order.map { value in
            ResultGroup(attribute: attribute, value: value, results: members[value]!, subgroups: groups(members[value]!, by: attributes.dropFirst()))
        }
    }
}

#if !canImport(Darwin)
extension Notification.Name {
    public static let NSMetadataQueryDidStartGathering = MetadataQuery.didStartGatheringNotification
    public static let NSMetadataQueryGatheringProgress = MetadataQuery.gatheringProgressNotification
    public static let NSMetadataQueryDidFinishGathering = MetadataQuery.didFinishGatheringNotification
    public static let NSMetadataQueryDidUpdate = MetadataQuery.didUpdateNotification
}

public let NSMetadataQueryUpdateAddedItemsKey = MetadataQuery.updateAddedItemsKey
public let NSMetadataQueryUpdateChangedItemsKey = MetadataQuery.updateChangedItemsKey
public let NSMetadataQueryUpdateRemovedItemsKey = MetadataQuery.updateRemovedItemsKey
public let NSMetadataQueryUbiquitousDocumentsScope = MetadataQuery.SearchScope.documents
public let NSMetadataQueryUbiquitousDataScope = MetadataQuery.SearchScope.data
#endif
