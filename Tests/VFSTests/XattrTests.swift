import Foundation
import ItemModel
import LocalState
import SyncAPI
@testable import SyncEngine
import Testing
import TestSupport
import VFS

/// SPEC, "Extended attributes".
@Suite("Extended attributes")
struct XattrTests {
    static let statusNames = [
        "user.ubiq.downloadingStatus", "user.ubiq.isDownloading", "user.ubiq.percentDownloaded", "user.ubiq.isUploaded",
        "user.ubiq.isUploading", "user.ubiq.percentUploaded", "user.ubiq.hasUnresolvedConflicts", "user.ubiq.pinned",
        "user.ubiq.itemID", "user.ubiq.revision",
    ]

    func set(_ h: Harness, _ ino: Int64, _ name: String, _ value: String, create: Bool = false, replace: Bool = false) throws {
        try h.fs.setXattr(ino, name: name, value: n(value), create: create, replace: replace)
    }

    @Test("the full status list on an uploaded file and on the root, with their values")
    func statusLists() async throws {
        let h = try await Harness()
        defer { h.close() }
        let ino = try h.writeNewFile("a.txt", Array("hello".utf8))
        try await h.running {
            try await h.settled()
            let remote = try #require(try await h.remote.item(atPath: "/a.txt"))

            #expect(try h.fs.listXattrs(ino) == Self.statusNames)
            let values = try Dictionary(uniqueKeysWithValues: Self.statusNames.map { ($0, try h.xattr(ino, $0)) })
            #expect(values == [
                "user.ubiq.downloadingStatus": "current", "user.ubiq.isDownloading": "0", "user.ubiq.percentDownloaded": "100",
                "user.ubiq.isUploaded": "1", "user.ubiq.isUploading": "0", "user.ubiq.percentUploaded": "100",
                "user.ubiq.hasUnresolvedConflicts": "0", "user.ubiq.pinned": "0", "user.ubiq.itemID": remote.id.rawValue,
                "user.ubiq.revision": remote.revision.rawValue,
            ])
            #expect(try h.xattr(ino, "user.ubiq.identityToken") == nil, "the identity token is on the root only")
            #expect(errnoOf { try h.fs.getXattr(ino, name: "user.ubiq.identityToken") } == ENODATA)
            #expect(errnoOf { try h.fs.getXattr(ino, name: "user.ubiq.downloadingError") } == ENODATA)
            #expect(errnoOf { try h.fs.getXattr(ino, name: "user.ubiq.noSuchThing") } == ENODATA)
            #expect(errnoOf { try h.fs.getXattr(ino, name: "system.posix_acl_access") } == EOPNOTSUPP)
            #expect(errnoOf { try h.fs.getXattr(ino, name: "trusted.x") } == ENODATA)

            let rootNames = try h.fs.listXattrs(rootIno)
            #expect(rootNames == Self.statusNames + ["user.ubiq.identityToken"])
            #expect(try await h.xattr(rootIno, "user.ubiq.identityToken") == h.remote.server.identity())
            #expect(try h.xattr(rootIno, "user.ubiq.itemID") == "root")
            #expect(try h.xattr(rootIno, "user.ubiq.downloadingStatus") == "current")
            #expect(try h.xattr(rootIno, "user.ubiq.isUploaded") == "1")
        }
    }

    @Test("a new local file: not uploaded yet, no revision attribute")
    func newFileStatus() async throws {
        let h = try await Harness()
        defer { h.close() }
        let ino = try h.writeNewFile("new.txt", Array("x".utf8))
        #expect(try h.fs.listXattrs(ino) == Self.statusNames.filter { $0 != "user.ubiq.revision" })
        #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "0")
        #expect(try h.xattr(ino, "user.ubiq.percentUploaded") == "0")
        #expect(try h.xattr(ino, "user.ubiq.downloadingStatus") == "current")
        #expect(try h.xattr(ino, "user.ubiq.revision") == nil)
    }

    @Test("read-only status names answer EPERM to set and remove")
    func readOnlyNames() async throws {
        let h = try await Harness()
        defer { h.close() }
        let ino = try h.writeNewFile("a.txt", Array("x".utf8))
        let readOnly = Self.statusNames.filter { $0 != "user.ubiq.pinned" && $0 != "user.ubiq.downloadingStatus" }
            + ["user.ubiq.downloadingError", "user.ubiq.uploadingError", "user.ubiq.identityToken", "user.ubiq.somethingNew"]
        for name in readOnly {
            #expect(errnoOf { try set(h, ino, name, "1") } == EPERM, "\(name) on a file")
            #expect(errnoOf { try set(h, rootIno, name, "1") } == EPERM, "\(name) on the root")
        }
        for name in Self.statusNames + ["user.ubiq.identityToken"] {
            #expect(errnoOf { try h.fs.removeXattr(ino, name: name) } == EPERM, "remove \(name)")
        }
        #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "0")
        #expect(try await h.xattr(rootIno, "user.ubiq.identityToken") == h.remote.server.identity())
    }

    @Test("pinned accepts 0 and 1 only; 1 pins and downloads, 0 unpins")
    func pinnedValues() async throws {
        let h = try await Harness()
        defer { h.close() }
        let content = pattern(20_000)
        try await h.running([.changeFeed, .maintenance]) {
            try await h.remote.otherDevice.createFile("p.bin", content: content)
            let ino = try await h.appeared("/p.bin")
            for bad in ["2", "", "true", "yes", "-1", "11", "current"] {
                #expect(errnoOf { try set(h, ino, "user.ubiq.pinned", bad) } == EINVAL, "pinned = '\(bad)'")
            }
            #expect(try h.xattr(ino, "user.ubiq.pinned") == "0")
            #expect(try h.downloadingStatus(ino) == "notDownloaded")

            try set(h, ino, "user.ubiq.pinned", "1")
            #expect(try h.xattr(ino, "user.ubiq.pinned") == "1")
            try await eventually("the pinned file to download") { try h.downloadingStatus(ino) == "current" }
            #expect(sha(try #require(FileManager.default.contents(atPath: h.engine.cache.path(ino))).map { $0 }) == sha(content))
            try set(h, ino, "user.ubiq.pinned", "0")
            #expect(try h.xattr(ino, "user.ubiq.pinned") == "0")
            #expect(try h.downloadingStatus(ino) == "current", "unpinning keeps the content")
        }
    }

    @Test("pinning a folder pins what is below it, and what arrives there later")
    func pinnedFolder() async throws {
        let h = try await Harness()
        defer { h.close() }
        try await h.running([.changeFeed, .maintenance]) {
            let folder = try await h.remote.otherDevice.createFolder("keep")
            try await h.remote.otherDevice.createFile("one.txt", in: folder.id, content: Array("one".utf8))
            try await eventually("the folder to appear") { try h.ino("/keep/one.txt") != nil }
            try set(h, try h.requireIno("/keep"), "user.ubiq.pinned", "1")
            let one = try h.requireIno("/keep/one.txt")
            #expect(try h.xattr(one, "user.ubiq.pinned") == "1")
            try await eventually("one.txt to download") { try h.downloadingStatus(one) == "current" }
            try await h.remote.otherDevice.createFile("two.txt", in: folder.id, content: Array("two".utf8))
            let two = try await h.appeared("/keep/two.txt")
            #expect(try h.xattr(two, "user.ubiq.pinned") == "1")
            try await eventually("two.txt to download") { try h.downloadingStatus(two) == "current" }
        }
    }

    @Test("another device's change that lands after this device's own and reaches here before its answer still applies")
    func aNewerChangeOvertakingAnAnswerApplies() async throws {
        let h = try await Harness()
        defer { h.close() }
        try await h.running([.changeFeed, .outbox]) {
            let made = try await h.remote.otherDevice.createFile("shared.txt", content: Array("shared".utf8))
            let ino = try await h.appeared("/shared.txt")
            let answers = h.remote.holdAnswers(.setXattrs)
            try set(h, ino, "user.mine", "1")
            try await eventually("this device's change to land") { answers.arrivals == 1 }
            // Then the other device's, on top of it; the push stream brings both here while
            // the answer to this device's change still travels.
            var theirs = try #require(try await h.remote.item(atPath: "/shared.txt")).xattrs
            theirs["user.theirs"] = Data("2".utf8)
            let latest = try await h.remote.otherDevice.setXattrs(made.id, theirs)
            try await eventually("the feed to bring both") { try await h.engine.appliedCursor == h.remote.latestCursor() }
            answers.open()
            try await eventually("the answer to be recorded") { try h.outbox().isEmpty }
            try await eventually("the other device's attribute to show") { try h.xattr(ino, "user.theirs") == "2" }
            #expect(try h.xattr(ino, "user.mine") == "1")
            #expect(try h.local(ino)?.revision == latest.revision)
        }
    }

    @Test("a pinned file whose download keeps failing is tried again after pauses that grow, not at every pass")
    func failingPinnedDownloadPauses() async throws {
        let h = try await Harness()
        defer { h.close() }
        try await h.running([.changeFeed, .maintenance]) {
            let content = pattern(1_000, seed: 4)
            try await h.remote.otherDevice.createFile("broken.bin", content: content)
            let ino = try await h.appeared("/broken.bin")
            // A server error that leaves the connection up: the pass after each failure would
            // start it again at once.
            h.remote.failNext(.download, with: .protocolError("injected: 500"), times: 2)
            // Taken before the pin: the first failure, and so each pause, starts after it. (Taken
            // once the first try was seen, it was up to a poll late, and the wait came out 6 ms
            // short of the pauses once under load.)
            let first = ContinuousClock.now
            try set(h, ino, "user.ubiq.pinned", "1")
            try await eventually("a try that works") { try h.downloadingStatus(ino) == "current" }
            #expect(h.remote.calls(.download) == 3, "two failures, then the try that worked")
            #expect(ContinuousClock.now - first >= DownloadRetries.pause(afterFailures: 1) + DownloadRetries.pause(afterFailures: 2),
                    "each try waited out its pause")
            #expect(try await h.read(ino) == content)
        }
    }

    @Test("downloadingStatus: notDownloaded on a file with unsent changes is EBUSY; other values EINVAL")
    func evictDirtyIsBusy() async throws {
        let h = try await Harness()
        defer { h.close() }
        let content = Array("unsent changes".utf8)
        let ino = try h.writeNewFile("dirty.txt", content)
        #expect(errnoOf { try set(h, ino, "user.ubiq.downloadingStatus", "notDownloaded") } == EBUSY)
        #expect(try h.local(ino)?.content == .dirty)
        #expect(h.engine.cache.exists(ino))
        #expect(try await h.read(ino) == content)
        for bad in ["downloaded", "excluded", "", "Current", "1"] {
            #expect(errnoOf { try set(h, ino, "user.ubiq.downloadingStatus", bad) } == EINVAL, "downloadingStatus = '\(bad)'")
        }
        // While open, even a clean file is busy.
        let opened = try await h.fs.open(ino, flags: O_RDONLY)
        #expect(errnoOf { try set(h, ino, "user.ubiq.downloadingStatus", "notDownloaded") } == EBUSY)
        h.fs.release(opened.handle)
        // A folder holding it refuses too.
        let folder = try h.mkdir("folder")
        try h.fs.rename(parent: rootIno, name: n("dirty.txt"), newParent: folder, newName: n("dirty.txt"), noReplace: false, exchange: false)
        #expect(errnoOf { try set(h, folder, "user.ubiq.downloadingStatus", "notDownloaded") } == EBUSY)
        #expect(try await h.read(ino) == content)
    }

    @Test("user.xdg.tags: set, get, list, remove, and each change is queued for an uploaded item", arguments: ServerSetup.allCases)
    func userAttributeRoundTrip(_ server: ServerSetup) async throws {
        let h = try await Harness(server)
        defer { h.close() }
        let ino = try h.writeNewFile("tagged.txt", Array("x".utf8))
        try await h.running {
            try await h.settled()
            let id = try #require(try await h.remote.item(atPath: "/tagged.txt")).id
            // Hold the server's answer so that the queued op can be seen before it is sent.
            let gate = h.remote.hold(.setXattrs)
            try set(h, ino, "user.xdg.tags", "work,urgent")
            #expect(try h.xattr(ino, "user.xdg.tags") == "work,urgent")
            #expect(try h.fs.listXattrs(ino) == Self.statusNames + ["user.xdg.tags"])
            #expect(try h.pending(ino) == [.xattrs])
            #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "0")
            gate.open()
            try await eventually("the tags to reach the server") { try await h.remote.liveItem(id)?.xattrs["user.xdg.tags"] == Data("work,urgent".utf8) }
            try await eventually("the op to leave the outbox") { try h.pending(ino).isEmpty }
            #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "1")

            #expect(errnoOf { try set(h, ino, "user.xdg.tags", "again", create: true) } == EEXIST)
            #expect(errnoOf { try set(h, ino, "user.xdg.comment", "x", replace: true) } == ENODATA)
            #expect(errnoOf { try set(h, ino, "trusted.thing", "x") } == EOPNOTSUPP)
            #expect(errnoOf { try set(h, ino, "user.", "x") } == EOPNOTSUPP)
            #expect(errnoOf { try h.fs.getXattr(ino, name: "user.xdg.comment") } == ENODATA)

            try h.fs.removeXattr(ino, name: "user.xdg.tags")
            #expect(try h.xattr(ino, "user.xdg.tags") == nil)
            #expect(try h.fs.listXattrs(ino) == Self.statusNames)
            #expect(errnoOf { try h.fs.removeXattr(ino, name: "user.xdg.tags") } == ENODATA)
            try await eventually("the removal to reach the server") { try await h.remote.liveItem(id)?.xattrs.isEmpty == true }
        }
    }

    @Test("attributes of a new item travel with its create")
    func attributesOnNewItem() async throws {
        let h = try await Harness()
        defer { h.close() }
        let ino = try h.writeNewFile("new.txt", Array("x".utf8))
        try set(h, ino, "user.xdg.comment", "made offline")
        #expect(try h.pending(ino) == [.content], "no separate op before the item exists on the server")
        try await h.running {
            try await eventually("the upload") { try h.outbox().isEmpty }
            #expect(try await h.remote.item(atPath: "/new.txt")?.xattrs == ["user.xdg.comment": Data("made offline".utf8)])
        }
    }

    @Test("another device's attributes arrive, and reading them starts no download", arguments: ServerSetup.allCases)
    func remoteAttributes(_ server: ServerSetup) async throws {
        let h = try await Harness(server)
        defer { h.close() }
        try await h.running {
            let file = try await h.remote.otherDevice.createFile("r.txt", content: pattern(5000))
            let ino = try await h.appeared("/r.txt")
            try await h.remote.otherDevice.setXattrs(file.id, ["user.xdg.tags": Data("from-afar".utf8)])
            try await eventually("the tags to arrive") { try h.xattr(ino, "user.xdg.tags") == "from-afar" }
            #expect(try h.fs.listXattrs(ino).contains("user.xdg.tags"))
            #expect(h.remote.calls(.download) == 0)
            #expect(try h.downloadingStatus(ino) == "notDownloaded")
        }
    }
}
