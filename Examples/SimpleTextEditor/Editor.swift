import Foundation
import UbiqKit

/// What a command could not do, said on its `error` line.
struct EditorError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The editor's state: one live query of the documents, kept for the program's life as an iCloud
/// app keeps its query, and the container's key-value store.
final class Editor: Sendable {
    /// The container's `Documents` folder: the query's documents scope.
    let documents: URL
    let query: MetadataQuery
    let store: UbiquitousKeyValueStore
    /// Keys in the key-value store.
    static let fontSizeKey = "fontSize", lastDocumentKey = "lastDocument"

    init(container: URL, registry: MountRegistryLocation) throws {
        documents = container.appendingPathComponent("Documents", isDirectory: true)
        query = MetadataQuery(containerURL: container, registry: registry)
        query.searchScopes = [NSMetadataQueryUbiquitousDocumentsScope]
        query.predicate = try MetadataPredicate(format: "%K LIKE %@", NSMetadataItemFSNameKey, "*.txt")
        store = UbiquitousKeyValueStore(containerURL: container, registry: registry)
    }

    /// Starts the query and the notices, and returns once the query has gathered (with how
    /// many documents it found): before then the list would be short.
    func start() async throws -> Int {
        // Asked for before `start()`: a sequence gets the events from when it was made.
        let gathering = query.events, updates = query.events
        guard query.start() else { throw EditorError("the document query did not start: \(query.lastError.map { "\($0)" } ?? "?")") }
        Task { await Self.announce(updates) }
        let changes = store.changes
        Task { await Self.announce(changes) }
        for await event in gathering {
            if case .didFinishGathering = event { return listed().count }
            if case .didFail(let error) = event { throw error }
        }
        throw EditorError("the document query stopped while gathering")
    }

    func stop() { query.stop() }

    /// Runs one command line; false for `quit`.
    func perform(_ line: String) async -> Bool {
        // The command, a NAME, and the rest of the line as one argument: a text keeps its spaces.
        let words = line.split(separator: " ", maxSplits: 2).map(String.init)
        guard let command = words.first else { return true }
        if command == "quit" {
            Console.say("ok bye")
            return false
        }
        do {
            Console.say("ok " + (try await run(command, Array(words.dropFirst()))))
        } catch {
            Console.say("error \(error)")
        }
        return true
    }

    /// The command's own lines; returns what its `ok` line adds.
    func run(_ command: String, _ arguments: [String]) async throws -> String {
        switch (command, arguments.count) {
        case ("list", 0):
            let items = listed()
            for item in items { Console.say("document \(Self.name(of: item)) \(state(of: item))") }
            return "\(items.count) documents"
        case ("new", 1):
            let url = try document(arguments[0], creatingFolder: true)
            // Exclusive: `new` of a name another device already took must not empty its document.
            let fd = open(url.path, O_WRONLY | O_CREAT | O_EXCL, 0o644)
            guard fd >= 0 else { throw EditorError("cannot create \(url.lastPathComponent): \(String(cString: strerror(errno)))") }
            close(fd)
            return "created \(url.lastPathComponent)"
        case ("write", 1...2):
            let url = try document(arguments[0], creatingFolder: true)
            let text = (arguments.count == 2 ? arguments[1] : "") + "\n"
            // In place, not by a rename over it: the document stays the same item, so an edit
            // made meanwhile on another device is a conflict of this document.
            try Data(text.utf8).write(to: url)
            return "saved \(url.lastPathComponent) \(text.utf8.count) bytes"
        case ("show", 1):
            let url = try document(arguments[0])
            // Reading a placeholder downloads it: no need to wait for a download first.
            let text = try String(contentsOf: url, encoding: .utf8)
            for line in text.split(separator: "\n", omittingEmptySubsequences: false).dropLast(text.hasSuffix("\n") ? 1 : 0) {
                Console.say("text \(line)")
            }
            store.set(url.lastPathComponent, forKey: Self.lastDocumentKey)
            return "shown \(url.lastPathComponent)"
        case ("download", 1):
            let url = try document(arguments[0])
            try UbiquitousItem.startDownloading(at: url)
            return "downloading \(url.lastPathComponent)"
        case ("status", 1):
            let url = try document(arguments[0])
            let values = try UbiquitousItem.resourceValues(at: url)
            var line = "status \(url.lastPathComponent) download=\(values.ubiquitousItemDownloadingStatus?.rawValue ?? "unknown")"
            line += " downloading=\(values.ubiquitousItemIsDownloading) percent-downloaded=\(Int(values.ubiquitousItemPercentDownloaded))"
            line += " uploaded=\(values.ubiquitousItemIsUploaded) uploading=\(values.ubiquitousItemIsUploading)"
            line += " conflicts=\(values.ubiquitousItemHasUnresolvedConflicts)"
            if let error = values.ubiquitousItemDownloadingError { line += " download-error=\(error)" }
            if let error = values.ubiquitousItemUploadingError { line += " upload-error=\(error)" }
            Console.say(line)
            return url.lastPathComponent
        case ("conflicts", 1):
            let versions = try conflictVersions(of: try document(arguments[0]))
            for version in versions {
                let modified = version.modificationDate.map { $0.formatted(.iso8601) } ?? "unknown"
                Console.say("version \(version.persistentIdentifier) device=\(version.localizedNameOfSavingComputer ?? "unknown") size=\(version.size) modified=\(modified)")
            }
            return "\(versions.count) conflict versions"
        case ("resolve", 2):
            let url = try document(arguments[0])
            let choice = arguments[1].split(separator: " ").map(String.init)
            if choice == ["keep-current"] {
                try FileVersion.removeOtherVersionsOfItem(at: url)
            } else if choice.count == 2, choice[0] == "keep" {
                guard let version = try conflictVersions(of: url).first(where: { $0.persistentIdentifier == choice[1] }) else {
                    throw EditorError("\(url.lastPathComponent) has no conflict version \(choice[1])")
                }
                // Every other conflict version of the document goes with it, on every device.
                try version.replaceItem(at: url)
            } else {
                throw EditorError("resolve NAME keep-current, or resolve NAME keep VERSION")
            }
            return "resolved \(url.lastPathComponent)"
        case ("font-size", 1):
            guard let size = Int(arguments[0]), (6...96).contains(size) else { throw EditorError("a font size is a whole number from 6 to 96") }
            // `setValue` rather than `set`: a write the store refuses is said, not dropped.
            try store.setValue(size, forKey: Self.fontSizeKey)
            return "font-size \(size)"
        case ("settings", 0):
            // Apple's store answers 0 for a number it does not have: the default size then.
            let size = store.longLong(forKey: Self.fontSizeKey)
            Console.say("setting \(Self.fontSizeKey)=\(size == 0 ? 12 : size)")
            Console.say("setting \(Self.lastDocumentKey)=\(store.string(forKey: Self.lastDocumentKey) ?? "")")
            return "settings"
        case ("wait-for", 1...2):
            let name = try document(arguments[0]).lastPathComponent
            guard let seconds = arguments.count == 2 ? Double(arguments[1]) : 30, seconds >= 0 else { throw EditorError("wait-for NAME [SECONDS]") }
            guard await waitUntilListed(name, timeout: .seconds(seconds)) else { throw EditorError("\(name) was not listed within \(seconds) s") }
            return "listed \(name)"
        default:
            throw EditorError("unknown command or wrong arguments: \(([command] + arguments).joined(separator: " ")) (see --help)")
        }
    }

    // MARK: The list of documents

    /// The query's results as the list shows them. The query reports every document each time,
    /// so the list is rebuilt from them; updates are held meanwhile, so that the results do not
    /// change while they are walked.
    func listed() -> [MetadataItem] {
        query.disableUpdates()
        defer { query.enableUpdates() }
        // Hidden files are not documents.
        return query.results.filter { !$0.name.hasPrefix(".") }
    }

    /// The item's path below Documents: the name commands take.
    static func name(of item: MetadataItem) -> String {
        String(item.containerPath.dropFirst("/Documents/".count))
    }

    /// The state the query carries with each document, under Apple's keys.
    func state(of item: MetadataItem) -> String {
        let status = item.downloadingStatus?.rawValue ?? "unknown"
        let uploaded = item.value(forAttribute: NSMetadataUbiquitousItemIsUploadedKey) as? Bool ?? false
        let conflicts = item.value(forAttribute: NSMetadataUbiquitousItemHasUnresolvedConflictsKey) as? Bool ?? false
        return "download=\(status) uploaded=\(uploaded) conflicts=\(conflicts)"
    }

    /// Whether `name` is listed now or becomes so within `timeout`. A query shows its new
    /// results before it reports them, so each event is a moment to look again.
    func waitUntilListed(_ name: String, timeout: Duration) async -> Bool {
        let events = query.events
        if isListed(name) { return true }
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                for await _ in events where self.isListed(name) { return true }
                return false
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return false
            }
            let found = await group.next() ?? false
            group.cancelAll()
            return found
        }
    }

    func isListed(_ name: String) -> Bool { listed().contains { Self.name(of: $0) == name } }

    // MARK: Documents

    /// The document's URL: a plain name, `.txt` added when it has no such ending. A container
    /// has no Documents folder until its first document is saved.
    func document(_ name: String, creatingFolder: Bool = false) throws -> URL {
        guard !name.isEmpty, !name.hasPrefix("."), !name.contains("/") else {
            throw EditorError("'\(name)' is not a document name: a name has no '/' and does not start with '.'")
        }
        if creatingFolder { try FileManager.default.createDirectory(at: documents, withIntermediateDirectories: true) }
        return documents.appendingPathComponent(name.hasSuffix(".txt") ? name : name + ".txt")
    }

    func conflictVersions(of url: URL) throws -> [FileVersion] {
        guard let versions = FileVersion.unresolvedConflictVersionsOfItem(at: url) else {
            throw EditorError("\(url.lastPathComponent) is not a document in the mount")
        }
        return versions
    }

    // MARK: Notices

    /// Says what changed in the list: documents added, removed, renamed, edited, and a conflict
    /// appearing or resolved. Only what the query reports as changed is compared, with the last
    /// state seen of it.
    static func announce(_ events: AsyncStream<MetadataQuery.Event>) async {
        var seen: [String: MetadataItem] = [:]
        func conflicted(_ item: MetadataItem) -> Bool { item.value(forAttribute: NSMetadataUbiquitousItemHasUnresolvedConflictsKey) as? Bool ?? false }
        func modified(_ item: MetadataItem) -> Date? { item.value(forAttribute: NSMetadataItemFSContentChangeDateKey) as? Date }
        for await event in events {
            switch event {
            case .gatheringProgress(let added):
                for item in added { seen[item.id] = item }
            case .didUpdate(let added, let changed, let removed):
                for item in added {
                    seen[item.id] = item
                    Console.say("notice added \(name(of: item))")
                }
                for item in changed {
                    let before = seen[item.id]
                    seen[item.id] = item
                    guard let before else { continue }
                    if before.containerPath != item.containerPath { Console.say("notice renamed \(name(of: before)) \(name(of: item))") }
                    if modified(before) != modified(item) { Console.say("notice edited \(name(of: item))") }
                    if !conflicted(before) && conflicted(item) { Console.say("notice conflict \(name(of: item))") }
                    if conflicted(before) && !conflicted(item) { Console.say("notice resolved \(name(of: item))") }
                }
                for item in removed {
                    seen[item.id] = nil
                    Console.say("notice removed \(name(of: item))")
                }
            case .didFail(let error):
                Console.say("notice query-stopped \(error)")
            case .didStartGathering, .didFinishGathering:
                break
            }
        }
    }

    /// Says each change of the shared settings made elsewhere, with Apple's reasons.
    static func announce(_ changes: AsyncThrowingStream<UbiquitousKeyValueStore.Change, Error>) async {
        do {
            for try await change in changes {
                Console.say("notice settings-changed reason=\(change.reason) keys=\(change.changedKeys.joined(separator: ","))")
            }
        } catch {
            Console.say("notice settings-unavailable \(error)")
        }
    }
}
