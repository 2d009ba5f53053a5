import Foundation
import Synchronization
import SyncAPI
import TestSupport
import Testing
import UbiqKit

/// A `MetadataQuery` on device B, over a live server and two real mounts of one account.
@Suite(.serialized) struct MetadataQueryTests {
    @Test func aQueryOnBGathersWhatAMadeThenReportsItsCreationRenameDeletionAndBsDownload() async throws {
        try await withDevices(["A", "B"]) { _, devices in
            let (a, b) = (devices[0], devices[1])
            try await a.must(#"mkdir -p "$M/Documents" && echo one > "$M/Documents/one.txt" && echo two > "$M/Documents/two.txt" && echo x > "$M/Documents/x.md" && echo top > "$M/top.txt""#)
            try await a.waitUntilUploaded(timeout: waitLimit)
            try await eventually("B to list A's files") { try await b.sh(#"find "$M" -type f | wc -l"#).stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "4" }

            let outsideDocuments = try await Self.gatheredTextFiles(of: [NSMetadataQueryUbiquitousDataScope], on: b)
            #expect(outsideDocuments == ["top.txt"], "the data scope: everything outside Documents")

            let query = MetadataQuery(containerURL: b.root, registry: b.registry)
            query.predicate = try MetadataPredicate(format: "%K LIKE %@", NSMetadataItemFSNameKey, "*.txt")
            query.searchScopes = [NSMetadataQueryUbiquitousDocumentsScope]
            query.sortDescriptors = [.init(key: NSMetadataItemFSNameKey, ascending: false)]
            let events = Recorded(query.events)
            let finished = Mutex(0)
            let observer = NotificationCenter.default.addObserver(forName: .NSMetadataQueryDidFinishGathering, object: query, queue: nil) { _ in
                finished.withLock { $0 += 1 }
            }
            // What the progress and update notifications carry, by user info key.
            let posted = Mutex<[String: [String]]>([:])
            let carriers = [Notification.Name.NSMetadataQueryGatheringProgress, .NSMetadataQueryDidUpdate].map { name in
                NotificationCenter.default.addObserver(forName: name, object: query, queue: nil) { note in
                    for key in [NSMetadataQueryUpdateAddedItemsKey, NSMetadataQueryUpdateChangedItemsKey, NSMetadataQueryUpdateRemovedItemsKey] {
                        let names = (note.userInfo?[key] as? [MetadataItem] ?? []).map(\.name)
                        posted.withLock { $0["\(note.name.rawValue) \(key)", default: []] += names }
                    }
                }
            }
            defer {
                for o in [observer] + carriers { NotificationCenter.default.removeObserver(o) }
                query.stop()
            }
            #expect(query.start())
            #expect(!query.start(), "a running query does not start again")
            try await eventually("the end of gathering") { events.elements.contains { $0.isFinishGathering } }

            // The initial results: A's .txt files in Documents, as placeholders, in the asked order.
            guard case .didStartGathering = events.elements.first else { throw TestSupportError("first event: \(events.elements)") }
            let gathered = events.elements.compactMap { event -> [MetadataItem]? in
                if case .gatheringProgress(let added) = event { return added }
                return nil
            }.flatMap { $0 }
            #expect(Set(gathered.map(\.name)) == ["one.txt", "two.txt"])
            #expect(query.results.map(\.name) == ["two.txt", "one.txt"])
            #expect(query.resultCount == 2 && !query.isGathering && query.isStarted)
            #expect(finished.withLock { $0 } == 1, "the notification too")
            let progressAdded = "\(MetadataQuery.gatheringProgressNotification.rawValue) \(NSMetadataQueryUpdateAddedItemsKey)"
            #expect(Set(posted.withLock { $0[progressAdded] ?? [] }) == ["one.txt", "two.txt"], "the progress notifications carry what was gathered")
            let two = try #require(query.results.first)
            #expect(two.value(forAttribute: NSMetadataItemPathKey) as? String == b.mountpoint + "/Documents/two.txt")
            #expect(two.value(forAttribute: NSMetadataItemURLKey) as? URL == b.root.appendingPathComponent("Documents/two.txt"))
            #expect(two.value(forAttribute: NSMetadataItemFSSizeKey) as? Int64 == 4)
            #expect(two.value(forAttribute: NSMetadataUbiquitousItemDownloadingStatusKey) as? String == NSMetadataUbiquitousItemDownloadingStatusNotDownloaded)
            #expect(two.value(forAttribute: NSMetadataUbiquitousItemIsUploadedKey) as? Bool == true)
            #expect(two.value(forAttribute: "kMDItemFSContentChangeDate") is Date)
            #expect(query.valueLists.isEmpty && query.groupedResults.isEmpty)
            query.groupingAttributes = [NSMetadataUbiquitousItemDownloadingStatusKey]
            query.valueListAttributes = [NSMetadataItemContentTypeKey]
            #expect(query.groupedResults.map(\.value) == [NSMetadataUbiquitousItemDownloadingStatusNotDownloaded])
            #expect(query.valueLists[NSMetadataItemContentTypeKey]?.map(\.count) == [2])


            func updates() -> [(added: [MetadataItem], changed: [MetadataItem], removed: [MetadataItem])] { events.elements.compactMap(\.update) }

            // A's creation is added.
            try await a.must(#"echo three > "$M/Documents/three.txt""#)
            try await eventually("three.txt to be added") { updates().contains { $0.added.map(\.name) == ["three.txt"] } }
            let three = try #require(updates().lazy.compactMap { $0.added.first }.first)
            #expect(query.results.map(\.name) == ["two.txt", "three.txt", "one.txt"])
            let updateKey = { (key: String) in "\(MetadataQuery.didUpdateNotification.rawValue) \(key)" }
            #expect(posted.withLock { $0[updateKey(NSMetadataQueryUpdateAddedItemsKey)] } == ["three.txt"], "the update notification carries it")

            // A's rename is a change of the same item.
            try await a.must(#"mv "$M/Documents/three.txt" "$M/Documents/four.txt""#)
            try await eventually("the rename to be a change") { updates().contains { $0.changed.contains { $0.id == three.id && $0.name == "four.txt" } } }

            // A's deletion is a removal.
            let one = try #require(query.results.first { $0.name == "one.txt" })
            try await a.must(#"rm "$M/Documents/one.txt""#)
            try await eventually("the deletion to be a removal") { updates().contains { $0.removed.map(\.id) == [one.id] } }
            #expect(query.results.map(\.name) == ["two.txt", "four.txt"])
            #expect(posted.withLock { $0[updateKey(NSMetadataQueryUpdateChangedItemsKey)] ?? [] }.contains("four.txt"))
            #expect(posted.withLock { $0[updateKey(NSMetadataQueryUpdateRemovedItemsKey)] } == ["one.txt"])

            // B's download is a change of its downloading status.
            let twoURL = b.root.appendingPathComponent("Documents/two.txt")
            #expect(try UbiquitousItem.resourceValues(at: twoURL).ubiquitousItemDownloadingStatus == .notDownloaded)
            try UbiquitousItem.startDownloading(at: twoURL)
            try await eventually("the download to be a change") {
                updates().contains { $0.changed.contains { $0.id == two.id && $0.downloadingStatus == .current } }
            }
            let values = try UbiquitousItem.resourceValues(at: twoURL)
            #expect(values.ubiquitousItemDownloadingStatus == .current && values.ubiquitousItemPercentDownloaded == 100 && values.ubiquitousItemIsUploaded)
            #expect(!values.ubiquitousItemHasUnresolvedConflicts && values.ubiquitousItemDownloadingError == nil && values.isUbiquitousItem)

            // Evicted: a placeholder again, reported too; pinned: downloaded and kept.
            try UbiquitousItem.evict(at: twoURL)
            #expect(try UbiquitousItem.resourceValues(at: twoURL).ubiquitousItemDownloadingStatus == .notDownloaded)
            try await eventually("the eviction to be a change") {
                updates().last { $0.changed.contains { $0.id == two.id } }?.changed.first { $0.id == two.id }?.downloadingStatus == .notDownloaded
            }
            try UbiquitousItem.setPinned(true, at: twoURL)
            try await eventually("the pin to download two.txt") {
                let pinned = try UbiquitousItem.resourceValues(at: twoURL)
                return pinned.ubiquitousItemIsPinned && pinned.ubiquitousItemDownloadingStatus == .current
            }
            try UbiquitousItem.setPinned(false, at: twoURL)
            #expect(try !UbiquitousItem.resourceValues(at: twoURL).ubiquitousItemIsPinned)
            #expect(throws: UbiqKitError.notInMount("/tmp")) { try UbiquitousItem.evict(at: URL(fileURLWithPath: "/tmp")) }

            // Nothing outside the predicate or the scope was ever reported, and each update is a net
            // effect: an item in one array at most.
            for update in updates() {
                let ids = (update.added + update.changed + update.removed).map(\.id)
                #expect(!ids.isEmpty && Set(ids).count == ids.count, "\(update)")
                #expect(!(update.added + update.changed).contains { $0.name == "x.md" || $0.name == "top.txt" })
            }

            // Held while updates are disabled, reported as one update when they are enabled again.
            // A second query, not held, says when the change has reached queries.
            let witness = MetadataQuery(containerURL: b.root, registry: b.registry)
            witness.predicate = query.predicate
            let witnessed = Recorded(witness.events)
            defer { witness.stop() }
            #expect(witness.start())
            try await eventually("the witness to gather") { witnessed.elements.contains { $0.isFinishGathering } }
            query.disableUpdates()
            try await a.must(#"echo five > "$M/Documents/five.txt""#)
            try await eventually("the witness to see five.txt") { witnessed.elements.contains { $0.update?.added.map(\.name) == ["five.txt"] } }
            #expect(!query.results.contains { $0.name == "five.txt" }, "results hold while updates are disabled")
            let before = updates().count
            query.enableUpdates()
            try await eventually("five.txt to be added once enabled") { updates().dropFirst(before).contains { $0.added.map(\.name) == ["five.txt"] } }

            // Stopping ends every event sequence.
            query.stop()
            try await eventually("the events to end") { events.ended }
            #expect(query.isStopped && query.results.count == 3)
        }
    }

    /// The names of the `.txt` files a query of `scopes` gathers on `device`.
    static func gatheredTextFiles(of scopes: [MetadataQuery.SearchScope], on device: TestDevice) async throws -> [String] {
        let query = MetadataQuery(containerURL: device.root, registry: device.registry)
        query.predicate = try MetadataPredicate(format: "%K LIKE %@", NSMetadataItemFSNameKey, "*.txt")
        query.searchScopes = scopes
        let events = Recorded(query.events)
        defer { query.stop() }
        guard query.start() else { throw TestSupportError("the query did not start: \(String(describing: query.lastError))") }
        try await eventually("the gathering of \(scopes)") { events.elements.contains { $0.isFinishGathering } }
        return query.results.map(\.name)
    }

    @Test func aPredicateTheDaemonRefusesMakesStartFalseWithWhere() async throws {
        try await withDevices(["A"]) { _, devices in
            let a = devices[0]
            let query = MetadataQuery(containerURL: a.root, registry: a.registry)
            query.predicate = MetadataPredicate("name == ")
            #expect(!query.start())
            guard case .invalidPredicate(_, let position) = query.lastError else { throw TestSupportError("\(String(describing: query.lastError))") }
            #expect(position == 8, "the offset of the missing value")
            #expect(!query.isStarted)
            // Without a mount there: false, saying so.
            let nowhere = MetadataQuery(containerURL: URL(fileURLWithPath: "/tmp"), registry: a.registry)
            nowhere.predicate = MetadataPredicate("TRUEPREDICATE")
            #expect(!nowhere.start())
            #expect(nowhere.lastError == .notInMount("/tmp"))

            // Any batching interval is taken, kept within what the daemon takes; the daemon
            // answers one out of it with an error line and goes on.
            for (seconds, kept) in [(0, 0.001), (-1, 0.001), (61, 60), (.infinity, 60), (.nan, 0.1)] as [(TimeInterval, TimeInterval)] {
                let query = MetadataQuery(containerURL: a.root, registry: a.registry)
                query.predicate = MetadataPredicate("TRUEPREDICATE")
                query.notificationBatchingInterval = seconds
                #expect(query.notificationBatchingInterval == kept, "\(seconds)")
                #expect(query.start(), "\(seconds): \(String(describing: query.lastError))")
                query.stop()
            }
            for interval in ["1e300", "nan", "0", "x"] {
                let answer = try await a.must("curl -s --max-time 10 --unix-socket '\(a.cache)/control.sock' 'http://localhost\(ControlPath.liveQuery)?q=TRUEPREDICATE&interval=\(interval)'")
                #expect(answer.contains(#""event":"error""#) && answer.contains("batch interval"), "\(interval): \(answer)")
            }
            #expect(try await a.status().connected, "the daemon still answers")
        }
    }
}
