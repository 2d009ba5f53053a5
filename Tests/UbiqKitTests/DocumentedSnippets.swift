import Foundation
import UbiqKit

// The snippets of docs/UBIQKIT.md ("Snippets"), compiled: each function below is one of its
// code blocks, character for character, and DocumentedSnippetsTests checks that they stay so.
// Edit a snippet here and in the document together.

/// The container's Documents folder; nil when no mount runs, as Apple's call answers nil
/// without iCloud.
func documentsFolder() async -> URL? {
    // The lookup asks each mount's daemon and may block: never on the main actor.
    let container = await Task.detached { UbiquityContainer.url(forIdentifier: nil) }.value
    return container?.appendingPathComponent("Documents", isDirectory: true)
}

/// What changed since the last launch: the token is kept in UserDefaults to be compared.
func accountAtLaunch() -> String {
    let defaults = UserDefaults.standard
    let token = UbiquityContainer.ubiquityIdentityToken
    let last = defaults.data(forKey: "identityToken").flatMap { try? JSONDecoder().decode(UbiquityIdentityToken.self, from: $0) }
    defaults.set(token.flatMap { try? JSONEncoder().encode($0) }, forKey: "identityToken")
    switch (last, token) {
    case (_, nil): return "signed out: no mount runs, or it has not reached its server yet"
    case (nil, _?): return "first launch with this account"
    case (let last?, let token?): return last == token ? "the same account" : "another account"
    }
}

/// Sets up again at each change of identity, as an app does on NSUbiquityIdentityDidChange.
func followIdentityChanges(setUp: @Sendable (UbiquityIdentityToken?) async -> Void) async {
    for await token in UbiquityContainer.identityChanges() {
        // nil: the last mount went; stop using the container until one comes back.
        await setUp(token)
    }
}

/// The query for the text documents of the Documents folder.
func textDocumentQuery() throws -> MetadataQuery {
    let query = MetadataQuery()
    query.searchScopes = [NSMetadataQueryUbiquitousDocumentsScope]
    query.predicate = try MetadataPredicate(format: "%K LIKE %@", NSMetadataItemFSNameKey, "*.txt")
    return query
}

/// Starts the query and hands `show` the whole list once gathered, then after each update.
/// Keep the query and the observers for as long as the list shows; then remove the observers
/// and `stop()` the query.
func setUpAndStartQuery(show: @escaping @Sendable ([URL]) -> Void) throws -> (MetadataQuery, [any NSObjectProtocol]) {
    let query = try textDocumentQuery()
    let processFiles: @Sendable (Notification) -> Void = { _ in
        // Hold the results still while walking them.
        query.disableUpdates()
        let files = query.results.map(\.url).filter { !$0.lastPathComponent.hasPrefix(".") }
        query.enableUpdates()
        show(files)
    }
    let observers = [Notification.Name.NSMetadataQueryDidFinishGathering, .NSMetadataQueryDidUpdate].map { name in
        NotificationCenter.default.addObserver(forName: name, object: query, queue: nil, using: processFiles)
    }
    guard query.start() else { throw query.lastError ?? UbiqKitError.noMount("the query did not start") }
    return (query, observers)
}

/// The same with the query's events, which also say what each update added, changed and removed.
func followDocuments(_ query: MetadataQuery) async throws {
    let events = query.events  // before start(): a sequence gets the events from when it was made
    guard query.start() else { throw query.lastError ?? UbiqKitError.noMount("the query did not start") }
    for await event in events {
        switch event {
        case .didFinishGathering:
            print("documents:", query.results.map(\.name))
        case .didUpdate(let added, let changed, let removed):
            print("added:", added.map(\.name), "changed:", changed.map(\.name), "removed:", removed.map(\.name))
        case .didFail(let error):
            throw error  // the mount went away
        case .didStartGathering, .gatheringProgress:
            break
        }
    }
}

/// A query's item carries its transfer state under Apple's keys.
func transferState(of item: MetadataItem) -> String {
    let downloaded = item.value(forAttribute: NSMetadataUbiquitousItemIsDownloadedKey) as? Bool ?? false
    let uploaded = item.value(forAttribute: NSMetadataUbiquitousItemIsUploadedKey) as? Bool ?? false
    let percent = item.value(forAttribute: NSMetadataUbiquitousItemPercentDownloadedKey) as? Double ?? 0
    return "\(item.name): \(downloaded ? "here" : "\(Int(percent)) % here"), \(uploaded ? "uploaded" : "not uploaded yet")"
}

/// True when the document's content is here to open; else starts its download (a query
/// reports its progress). Reading a file of the mount downloads it too, but waits meanwhile.
func isReadyToOpen(_ url: URL) throws -> Bool {
    let values = try UbiquitousItem.resourceValues(at: url)
    if let error = values.ubiquitousItemDownloadingError { throw error }
    switch values.ubiquitousItemDownloadingStatus {
    case .current?, .excluded?, nil:
        return true
    case .downloaded?, .notDownloaded?:
        if !values.ubiquitousItemIsDownloading { try FileManager.default.startDownloadingUbiquitousItem(at: url) }
        // An older copy is here: open it, and the newer content follows.
        return values.ubiquitousItemDownloadingStatus == .downloaded
    }
}

/// Whether the document's last save is on the server.
func uploadState(of url: URL) throws -> String {
    let values = try UbiquitousItem.resourceValues(at: url)
    if let error = values.ubiquitousItemUploadingError { return "not uploaded: \(error)" }
    if values.ubiquitousItemIsUploaded { return "uploaded" }
    return values.ubiquitousItemIsUploading ? "uploading, \(Int(values.ubiquitousItemPercentUploaded)) %" : "waiting to upload"
}

/// A setting every device shares. It lives in UserDefaults too: a program without a mount
/// still has it.
func setFontSize(_ size: Int) {
    UserDefaults.standard.set(size, forKey: "fontSize")
    UbiquitousKeyValueStore.default.set(size, forKey: "fontSize")
}

/// Takes the settings other devices change, as an app does on the store's
/// did-change-externally notification.
func followSharedSettings() async {
    let store = UbiquitousKeyValueStore.default
    do {
        for try await change in store.changes {
            switch change.reason {
            case .serverChange, .initialSyncChange:
                for key in change.changedKeys where key == "fontSize" {
                    UserDefaults.standard.set(Int(store.longLong(forKey: key)), forKey: key)
                }
            case .quotaViolationChange:
                print("the store refused:", change.changedKeys)
            case .accountChange:
                // Another account: its settings, not the last one's.
                UserDefaults.standard.removeObject(forKey: "fontSize")
            }
        }
    } catch {
        print("the store's changes ended:", error)  // the mount went away
    }
}

/// The notification's way: observed once the store has synchronized; keep the observer.
func observeSharedSettings() -> (any NSObjectProtocol)? {
    let store = UbiquitousKeyValueStore.default
    guard store.synchronize() else { return nil }  // no mount runs
    return NotificationCenter.default.addObserver(forName: UbiquitousKeyValueStore.didChangeExternallyNotification, object: nil, queue: nil) { note in
        let reason = note.userInfo?[NSUbiquitousKeyValueStoreChangeReasonKey] as? Int
        let keys = note.userInfo?[NSUbiquitousKeyValueStoreChangedKeysKey] as? [String] ?? []
        if reason == UbiquitousKeyValueStore.ChangeReason.serverChange.rawValue, keys.contains("fontSize") {
            UserDefaults.standard.set(Int(store.longLong(forKey: "fontSize")), forKey: "fontSize")
        }
    }
}

/// Resolves a document's conflict: the most recent edit wins (an app may ask the user instead).
func resolveConflict(at url: URL) throws {
    guard let conflicts = FileVersion.unresolvedConflictVersionsOfItem(at: url),
          let newest = conflicts.max(by: { ($0.modificationDate ?? .distantPast) < ($1.modificationDate ?? .distantPast) }),
          let current = FileVersion.currentVersionOfItem(at: url)
    else { return }  // no conflict, or not a document of a mount
    if (newest.modificationDate ?? .distantPast) > (current.modificationDate ?? .distantPast) {
        // This resolves every conflict version of the document, on every device.
        try newest.replaceItem(at: url)
    } else {
        for version in conflicts { version.isResolved = true }
        try FileVersion.removeOtherVersionsOfItem(at: url)
    }
}

/// A link to a read-only copy of the document as it is now, for a week. It waits for the
/// server: keep it off the main actor.
func publishForAWeek(_ url: URL) throws -> String {
    let (link, expiration) = try UbiquitousItem.publishingURL(forItemAt: url, expiringAfter: .seconds(7 * 24 * 3600))
    return "\(link.absoluteString), until \(expiration.map { $0.formatted(.iso8601) } ?? "removed")"
}
