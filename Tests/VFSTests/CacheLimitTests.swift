import Foundation
import ItemModel
import LocalState
import SyncAPI
import Testing
import TestSupport
import VFS

@Suite("Cache limit")
struct CacheLimitTests {
    static let fileSize = 10_000

    func content(_ i: Int) -> [UInt8] { pattern(Self.fileSize, seed: UInt8(i)) }

    func isPlaceholder(_ h: Harness, _ ino: Int64) throws -> Bool {
        try h.downloadingStatus(ino) == "notDownloaded" && !h.engine.cache.exists(ino)
    }

    @Test("reading past the limit evicts the least recently used clean, closed, unpinned files; never pinned, dirty or open ones")
    func evictsLeastRecentlyUsed() async throws {
        // Room for 3.5 files: the pinned one, the dirty one, and one or two more.
        let h = try await Harness(cacheLimit: 35_000)
        defer { h.close() }
        // No outbox: the dirty file keeps its unsent change for the whole test.
        try await h.running([.changeFeed, .maintenance]) {
            for i in 1...4 { try await h.remote.otherDevice.createFile("f\(i).bin", content: content(i)) }
            try await h.remote.otherDevice.createFile("pinned.bin", content: content(9))
            try await eventually("the files to appear") { try h.children().count == 5 }
            let f = try (1...4).map { try h.requireIno("/f\($0).bin") }
            let pinned = try h.requireIno("/pinned.bin")
            try h.fs.setXattr(pinned, name: "user.ubiq.pinned", value: n("1"), create: false, replace: false)
            try await eventually("the pinned file to download") { try h.downloadingStatus(pinned) == "current" }
            let dirty = try h.writeNewFile("dirty.bin", content(10))

            // f1 stays open while f2 is read: over the limit, but an open file is never evicted.
            let open1 = try await h.fs.open(f[0], flags: O_RDONLY)
            #expect(sha(try await h.readAll(open1.handle, size: Int64(Self.fileSize))) == sha(content(1)))
            #expect(sha(try await h.read(f[1])) == sha(content(2)))
            try await eventually("f2, the only closed candidate, to be evicted") { try isPlaceholder(h, f[1]) }
            #expect(try h.downloadingStatus(f[0]) == "current")
            h.fs.release(open1.handle)

            // Now f1 is the least recently used clean file.
            #expect(sha(try await h.read(f[2])) == sha(content(3)))
            try await eventually("f1 to be evicted") { try isPlaceholder(h, f[0]) }
            #expect(try h.downloadingStatus(f[2]) == "current")
            #expect(sha(try await h.read(f[3])) == sha(content(4)))
            try await eventually("f3 to be evicted") { try isPlaceholder(h, f[2]) }
            #expect(try h.downloadingStatus(f[3]) == "current")

            // The pinned and the dirty file were never touched.
            #expect(try h.downloadingStatus(pinned) == "current")
            #expect(h.engine.cache.exists(pinned))
            #expect(try h.local(dirty)?.content == .dirty)
            #expect(sha(try await h.read(dirty)) == sha(content(10)))
            let used = try h.engine.status().cachedBytes
            #expect(used <= 35_000, "cache use \(used) is over the limit")
            // An evicted file still reads (it downloads again).
            #expect(sha(try await h.read(f[0])) == sha(content(1)))
        }
    }

    @Test(
        "a file downloaded on request is the most recently used, not the first to go"
    )
    func requestedDownloadIsRecent() async throws {
        let h = try await Harness(cacheLimit: 15_000)
        defer { h.close() }
        try await h.running([.changeFeed, .maintenance]) {
            try await h.remote.otherDevice.createFile("old.bin", content: content(1))
            try await h.remote.otherDevice.createFile("wanted.bin", content: content(2))
            try await eventually("the files to appear") { try h.children().count == 2 }
            let old = try h.requireIno("/old.bin")
            let wanted = try h.requireIno("/wanted.bin")
            #expect(sha(try await h.read(old)) == sha(content(1)))
            try h.fs.setXattr(wanted, name: "user.ubiq.downloadingStatus", value: n("current"), create: false, replace: false)
            try await eventually("one of them to be evicted") { try isPlaceholder(h, old) || isPlaceholder(h, wanted) }
            #expect(try h.downloadingStatus(wanted) == "current", "the file just downloaded on request was evicted")
            #expect(try isPlaceholder(h, old))
        }
    }

    @Test("downloading a folder starts a few files at a time, not all at once, and fetches them all")
    func aFolderDownloadsAFewAtATime() async throws {
        let h = try await Harness()
        defer { h.close() }
        let folder = try await h.remote.otherDevice.createFolder("many")
        for i in 0..<20 { _ = try await h.remote.otherDevice.createFile("f\(i).txt", in: folder.id, content: Array("file \(i)".utf8)) }
        try await h.running {
            let ino = try await h.appeared("/many")
            try await eventually("the folder's files to appear") { try h.children(ino).count == 20 }
            let gate = h.remote.holdDownloads(afterBytes: 0)
            try h.engine.startDownload(ino)
            try await eventually("the first downloads to start") { h.engine.downloads.activeCount == 4 }
            for _ in 0..<20 {
                #expect(h.engine.downloads.activeCount <= 4)
                try await Task.sleep(for: .milliseconds(5))
            }
            gate.open()
            try await eventually("every file to be downloaded") {
                try h.store.read { try $0.children(of: ino) }.allSatisfy { $0.content == .current }
            }
        }
    }

    /// `ubiq download` of a folder whose files had not all arrived when the daemon stopped: the
    /// next daemon fetches the rest, and once they are here nothing is asked for any more.
    @Test func aRequestedDownloadGoesOnAfterARestart() async throws {
        let h = try await Harness()
        defer { h.close() }
        let folder = try await h.remote.otherDevice.createFolder("many")
        for i in 0..<10 { _ = try await h.remote.otherDevice.createFile("f\(i).txt", in: folder.id, content: Array("file \(i)".utf8)) }
        let ino = try await h.running {
            let ino = try await h.appeared("/many")
            try await eventually("the folder's files to appear") { try h.children(ino).count == 10 }
            _ = h.remote.holdDownloads(afterBytes: 0)
            try h.engine.startDownload(ino)
            try await eventually("the first downloads to start") { h.engine.downloads.activeCount == 4 }
            return ino
        }
        // The daemon stops: its downloads are cut, and nothing has arrived.
        h.engine.downloads.cancelAll()
        h.remote.releaseAll()
        #expect(try h.store.read { try $0.children(of: ino) }.allSatisfy { $0.content == .placeholder })

        let again = try await h.restarted()
        try await again.running {
            try await eventually("every file to be downloaded after the restart") {
                try again.store.read { try $0.children(of: ino) }.allSatisfy { $0.content == .current }
            }
        }
        #expect(try again.store.read { r in try r.children(of: ino).filter { try r.isDownloadRequested($0.ino) } }.isEmpty,
                "a request ends once its file is here")
    }
}
