import Foundation
import Synchronization
import TestSupport
import Testing
import UbiqKit

/// `UbiquitousKeyValueStore`, `UbiquityContainer` and publishing, over a live server and two
/// real mounts of one account.
@Suite(.serialized) struct KeyValueStoreTests {
    @Test func aKeySetOnAIsReportedOnBAsAServerChangeAndReadsBackTyped() async throws {
        try await withDevices(["A", "B"]) { _, devices in
            let (a, b) = (devices[0], devices[1])
            let storeA = UbiquitousKeyValueStore(containerURL: a.root, registry: a.registry)
            let storeB = UbiquitousKeyValueStore(containerURL: b.root, registry: b.registry)
            let changesA = Recorded(storeA.changes), changesB = Recorded(storeB.changes)
            // The notification, as an app observes it once it has synchronized.
            let posted = Mutex<[(reason: Int, keys: [String])]>([])
            let observer = NotificationCenter.default.addObserver(forName: UbiquitousKeyValueStore.didChangeExternallyNotification, object: nil, queue: nil) { note in
                let reason = note.userInfo?[NSUbiquitousKeyValueStoreChangeReasonKey] as? Int ?? -1
                let keys = note.userInfo?[NSUbiquitousKeyValueStoreChangedKeysKey] as? [String] ?? []
                posted.withLock { $0.append((reason, keys)) }
            }
            defer {
                [changesA, changesB].forEach { $0.cancel() }
                NotificationCenter.default.removeObserver(observer)
            }
            #expect(storeB.synchronize())
            try await eventually("B's initial sync to be posted") {
                posted.withLock { $0.contains { $0.reason == UbiquitousKeyValueStore.ChangeReason.initialSyncChange.rawValue } }
            }
            // A fresh device's first read of the store: once seen, the watch is listening.
            for changes in [changesA, changesB] {
                try await eventually("the initial sync") { changes.elements.contains { $0.reason == .initialSyncChange } }
            }

            let blob = Data((0..<3000).map { UInt8(truncatingIfNeeded: $0 &* 7919 &+ 13) })
            storeA.set("dark", forKey: "theme")
            storeA.set(42, forKey: "count")
            storeA.set(Int64(1) << 53, forKey: "big")
            storeA.set(2.5, forKey: "ratio")
            storeA.set(true, forKey: "enabled")
            storeA.set(blob, forKey: "blob")
            storeA.set(["a", 1, false] as [Any], forKey: "list")
            storeA.set(["width": 1280, "title": "x/y", "nested": ["b": blob]] as [String: Any], forKey: "window")
            #expect(storeA.string(forKey: "theme") == "dark", "kept by A's mount at once")
            let keys: Set = ["theme", "count", "big", "ratio", "enabled", "blob", "list", "window"]
            try await eventually("B to be told of every key as a server change") {
                Set(changesB.elements.filter { $0.reason == .serverChange }.flatMap(\.changedKeys)).isSuperset(of: keys)
            }
            try await eventually("the notification of every key as a server change") {
                Set(posted.withLock { $0.filter { $0.reason == UbiquitousKeyValueStore.ChangeReason.serverChange.rawValue }.flatMap(\.keys) }).isSuperset(of: keys)
            }
            #expect(storeB.string(forKey: "theme") == "dark")
            #expect(storeB.longLong(forKey: "count") == 42 && storeB.object(forKey: "count") as? Int == 42)
            #expect(storeB.longLong(forKey: "big") == 1 << 53)
            #expect(storeB.double(forKey: "ratio") == 2.5 && storeB.double(forKey: "count") == 42)
            #expect(storeB.bool(forKey: "enabled") && !storeB.bool(forKey: "nothing"))
            #expect(storeB.data(forKey: "blob") == blob)
            let list = try #require(storeB.array(forKey: "list"))
            #expect(list.count == 3 && list[0] as? String == "a" && list[1] as? Int == 1 && list[2] as? Bool == false)
            let window = try #require(storeB.dictionary(forKey: "window"))
            #expect(window["width"] as? Int == 1280 && window["title"] as? String == "x/y")
            #expect((window["nested"] as? [String: Any])?["b"] as? Data == blob)
            #expect(storeB.json(forKey: "window") == storeA.json(forKey: "window"), "the same bytes on both devices")
            #expect(Set(storeB.dictionaryRepresentation.keys) == keys)
            #expect(storeB.string(forKey: "count") == nil && storeB.longLong(forKey: "theme") == 0, "a getter of another type finds nothing")
            #expect(storeB.synchronize())

            // Removed on A: gone on B, reported.
            let seen = changesB.elements.count
            storeA.removeObject(forKey: "theme")
            try await eventually("B to be told of the removal") {
                changesB.elements.dropFirst(seen).contains { $0.reason == .serverChange && $0.changedKeys == ["theme"] }
            }
            #expect(storeB.string(forKey: "theme") == nil)

            // A value past the store's limit is refused, and A's watchers hear of it.
            #expect(throws: UbiqKitError.self) { try storeA.setValue(String(repeating: "x", count: 1_100_000), forKey: "huge") }
            try await eventually("the quota violation") { changesA.elements.contains { $0.reason == .quotaViolationChange && $0.changedKeys == ["huge"] } }
            #expect(storeA.object(forKey: "huge") == nil)
            #expect(throws: UbiqKitError.self) { try storeA.setValue(Date(), forKey: "when") }
            #expect(!changesA.ended && !changesB.ended)
        }
    }

    @Test func theContainerURLIsTheMountsTopForItsContainerAndNilForAnother() async throws {
        try await withDevices(["A", "B"]) { _, devices in
            let (a, b) = (devices[0], devices[1])
            #expect(UbiquityContainer.url(forIdentifier: "default", registry: a.registry)?.path == a.mountpoint)
            #expect(UbiquityContainer.url(forIdentifier: nil, registry: a.registry)?.path == a.mountpoint)
            #expect(UbiquityContainer.url(forIdentifier: "default", registry: b.registry)?.path == b.mountpoint)
            #expect(UbiquityContainer.url(forIdentifier: "iCloud.com.example.other", registry: a.registry) == nil)
            let empty = try TempDirectory("ubiqkit-no-mounts")
            defer { empty.remove() }
            let nowhere = MountRegistryLocation(directory: empty.path)
            #expect(UbiquityContainer.url(forIdentifier: nil, registry: nowhere) == nil)

            // One account: one identity on both devices, none without a mount. Reading it starts
            // the notification of its changes.
            let identityNotes = Mutex(0)
            let observer = NotificationCenter.default.addObserver(forName: .NSUbiquityIdentityDidChange, object: nil, queue: nil) { _ in
                identityNotes.withLock { $0 += 1 }
            }
            defer { NotificationCenter.default.removeObserver(observer) }
            let token = try #require(UbiquityContainer.identityToken(registry: a.registry))
            #expect(UbiquityContainer.identityToken(forContainerAt: b.root, registry: b.registry) == token)
            #expect(UbiquityContainer.identityToken(registry: nowhere) == nil)

            // A published link serves the file as it is now, until its expiry.
            try await a.must(#"echo "shared text" > "$M/shared.txt""#)
            try await a.waitUntilUploaded(timeout: waitLimit)
            let published = try UbiquitousItem.publishingURL(forItemAt: a.root.appendingPathComponent("shared.txt"), expiringAfter: .seconds(3600), registry: a.registry)
            let expiration = try #require(published.expiration)
            #expect(abs(expiration.timeIntervalSinceNow - 3600) < 120, "\(expiration)")
            #expect(try await a.must("curl -sf '\(published.url.absoluteString)'") == "shared text\n")
            #expect(throws: UbiqKitError.self) { try UbiquitousItem.publishingURL(forItemAt: URL(fileURLWithPath: "/tmp"), registry: a.registry) }

            // A link's state, which Linux keeps no user attributes on, comes from the daemon.
            try await a.must(#"ln -s shared.txt "$M/link""#)
            let link = try UbiquitousItem.resourceValues(at: a.root.appendingPathComponent("link"), registry: a.registry)
            #expect(link.ubiquitousItemDownloadingStatus == .current && link.ubiquitousItemIdentifier != nil, "\(link)")

            // The last mount going is a change of identity: to none. It ends the store's
            // changes (they throw) and a query (it fails), each listening on the daemon's socket.
            let identities = Recorded(UbiquityContainer.identityChanges(every: .milliseconds(100), registry: a.registry))
            let storeChanges = Recorded(UbiquitousKeyValueStore(containerURL: a.root, registry: a.registry).changes)
            let query = MetadataQuery(containerURL: a.root, registry: a.registry)
            query.predicate = MetadataPredicate("TRUEPREDICATE")
            let queryEvents = Recorded(query.events)
            defer {
                identities.cancel()
                storeChanges.cancel()
            }
            #expect(query.start())
            try await eventually("the query to gather") { queryEvents.elements.contains { $0.isFinishGathering } }
            try await eventually("the store's watch to answer") { storeChanges.elements.contains { $0.reason == .initialSyncChange } }
            await a.unmount()
            try await eventually("the store's changes to end, failing") { storeChanges.ended && storeChanges.failure != nil }
            try await eventually("the query to fail") {
                queryEvents.elements.contains { if case .didFail = $0 { true } else { false } }
            }
            #expect(query.isStopped)
            try await eventually("the identity to go with the mount") { identities.elements.count == 1 }
            #expect(identities.elements == [nil])
            try await eventually("NSUbiquityIdentityDidChange to be posted") { identityNotes.withLock { $0 } == 1 }
            #expect(UbiquityContainer.url(forIdentifier: nil, registry: a.registry) == nil)
        }
    }
}
