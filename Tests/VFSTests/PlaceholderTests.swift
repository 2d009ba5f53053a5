import CacheFiles
import Foundation
import ItemModel
import LocalState
import OpenFiles
import SyncAPI
import Synchronization
import Testing
import TestSupport
@testable import VFS

@Suite("Placeholders and content")
struct PlaceholderTests {
    @Test("a remote file appears as a placeholder; metadata never downloads; open + read do", arguments: ServerSetup.allCases)
    func remoteFileIsPlaceholder(_ server: ServerSetup) async throws {
        let h = try await Harness(server)
        defer { h.close() }
        let content = pattern(200_000, seed: 9)
        try await h.running {
            let remote = try await h.remote.otherDevice.createFile("remote.bin", content: content, mode: 0o640, xattrs: ["user.xdg.tags": Data("blue".utf8)])
            let ino = try await h.appeared("/remote.bin")

            let attributes = try h.fs.attributes(ino)
            #expect(attributes.kind == .file)
            #expect(attributes.blocks == 0)
            #expect(attributes.size == Int64(content.count))
            #expect(attributes.mode == 0o640)
            #expect(attributes.mtime == remote.modified)
            let listed = try h.fs.openDirectory(rootIno)
            let entry = try h.fs.readDirectory(listed, from: 0).first { $0.name == "remote.bin" }
            h.fs.closeDirectory(listed)
            #expect(entry?.attributes.size == Int64(content.count))
            #expect(entry?.attributes.blocks == 0)

            // Reading every attribute is answered from metadata.
            let downloadsBefore = h.remote.calls(.download)
            #expect(try h.downloadingStatus(ino) == "notDownloaded")
            for name in try h.fs.listXattrs(ino) { _ = try h.fs.getXattr(ino, name: name) }
            #expect(try h.xattr(ino, "user.xdg.tags") == "blue")
            #expect(try h.xattr(ino, "user.ubiq.percentDownloaded") == "0")
            #expect(try h.xattr(ino, "user.ubiq.isUploaded") == "1")
            #expect(h.engine.downloads.activeCount == 0)
            #expect(h.remote.calls(.download) == downloadsBefore)
            #expect(!h.engine.cache.exists(ino))
            #expect(try h.fs.attributes(ino).blocks == 0)

            #expect(sha(try await h.read(ino)) == sha(content))
            try await eventually("the status to become current") { try h.downloadingStatus(ino) == "current" }
            #expect(try h.fs.attributes(ino).blocks > 0)
            #expect(try h.xattr(ino, "user.ubiq.percentDownloaded") == "100")
            #expect(try h.xattr(ino, "user.ubiq.itemID") == remote.id.rawValue)
            #expect(try h.xattr(ino, "user.ubiq.revision") == remote.revision.rawValue)
            #expect(try h.xattr(ino, "user.ubiq.downloadingError") == nil)
            // Once current, another open reads from the cache.
            let calls = h.remote.calls(.download)
            #expect(sha(try await h.read(ino)) == sha(content))
            #expect(h.remote.calls(.download) == calls)
        }
    }

    @Test("a download whose bytes do not match the digest never becomes current; a good retry does")
    func corruptDownloadIsRefused() async throws {
        let h = try await Harness()
        defer { h.close() }
        let content = pattern(300_000, seed: 4)
        try await h.running {
            _ = try await h.remote.otherDevice.createFile("checked.bin", content: content)
            let ino = try await h.appeared("/checked.bin")
            h.remote.corruptDownloads = true
            // The bytes reach the reader before the check (as they stream), but the file is
            // never marked current and the reason is in downloadingError.
            _ = try? await h.read(ino)
            // The error is recorded just before the failed download leaves the table; a read in
            // between would join it and fail with it, so wait for both.
            try await eventually("the mismatch to be reported") {
                try h.xattr(ino, "user.ubiq.downloadingError") != nil && h.engine.downloads.activeCount == 0
            }
            #expect(try h.downloadingStatus(ino) != "current")
            h.remote.corruptDownloads = false
            #expect(sha(try await h.read(ino)) == sha(content))
            try await eventually("the status to become current") { try h.downloadingStatus(ino) == "current" }
            #expect(try h.xattr(ino, "user.ubiq.downloadingError") == nil)
        }
    }

    @Test("connected, a placeholder opened for reading is answered at once; a read ahead of its download, when its bytes land")
    func openWhileDownloadingConnected() async throws {
        let h = try await Harness(remote: try await FaultInjectingRemote.inMemory(chunkSize: 16 * 1024))
        defer { h.close() }
        let content = Self.bigContent
        try await h.running {
            let (ino, other) = try await Self.twoPlaceholders(h)
            try await eventually("the engine to be connected") { h.engine.isConnected }
            let gate = h.remote.holdDownloads(afterBytes: 0)
            let answer = Answer()
            #expect(try h.fs.openWhileDownloading(ino, flags: O_RDONLY) { answer.set($0) })
            let opened = try #require(answer.value ?? nil, "answered at once, before any byte")
            #expect(h.engine.downloads.progress(ino) != nil, "and the download runs")
            let read = ReadAnswer()
            #expect(try h.fs.readWhenLanded(opened.handle, offset: 0, size: 4096) { read.set($0) })
            #expect(read.value == nil, "held before its first byte: no answer, and the caller's thread was not kept")
            gate.open()
            try await eventually("the read to be answered") { read.value != nil }
            let result = try #require(read.value ?? nil)
            #expect(sha(try Self.bytes(of: result)) == sha(Array(content[..<4096])))
            // Behind the download's front (or once it is done) it is not this path's business.
            try await eventually("the download to end") { h.engine.downloads.progress(ino) == nil }
            #expect(try !h.fs.readWhenLanded(opened.handle, offset: 0, size: 4096) { _ in })
            h.fs.release(opened.handle)
            // Not for this path: a writer, or content already here.
            #expect(try !h.fs.openWhileDownloading(ino, flags: O_RDWR) { _ in })
            #expect(try !h.fs.openWhileDownloading(ino, flags: O_RDONLY) { _ in })

            // A download that fails: the open succeeded, the read says EIO.
            h.remote.failNext(.download, with: .unreachable("test"), times: 100)
            let failed = Answer()
            #expect(try h.fs.openWhileDownloading(other, flags: O_RDONLY) { failed.set($0) })
            let handle = try #require(failed.value ?? nil).handle
            await #expect(throws: FSError.self) { try await h.readRange(handle, offset: 0, size: 4096) }
            #expect(try h.xattr(other, "user.ubiq.downloadingError") != nil)
            h.fs.release(handle)
        }
    }

    @Test("not connected, a placeholder opened for reading is answered when its first bytes land; when they cannot, its handle is dropped")
    func openWhileDownloadingDisconnected() async throws {
        let h = try await Harness(remote: try await FaultInjectingRemote.inMemory(chunkSize: 16 * 1024))
        defer { h.close() }
        let content = Self.bigContent
        try await h.running {
            let (ino, other) = try await Self.twoPlaceholders(h)
            // The push stream ends and cannot come back: the engine is not connected, while
            // downloads still work.
            try await eventually("the push stream to open") { h.remote.openStreamCount == 1 && h.engine.isConnected }
            let reconnect = h.remote.hold(.ensureContainer)
            h.remote.dropStreams()
            try await eventually("the engine to notice") { !h.engine.isConnected }
            let gate = h.remote.holdDownloads(afterBytes: 0)
            let answer = Answer()
            #expect(try h.fs.openWhileDownloading(ino, flags: O_RDONLY) { answer.set($0) })
            // Held before its first byte: no answer, and the caller's thread was not kept.
            #expect(answer.value == nil)
            gate.open()
            try await eventually("the open to be answered") { answer.value != nil }
            let opened = try #require(answer.value ?? nil)
            let head = try await within(.seconds(10), "a read of the first bytes") { try await h.readRange(opened.handle, offset: 0, size: 4096) }
            #expect(sha(head) == sha(Array(content[..<4096])))
            h.fs.release(opened.handle)

            h.remote.isOnline = false
            let failed = Answer()
            #expect(try h.fs.openWhileDownloading(other, flags: O_RDONLY) { failed.set($0) })
            try await eventually("the failed open to be answered") { failed.value != nil }
            #expect(failed.value! == nil, "no first bytes: the general open says why")
            #expect(!h.fs.openFiles.isOpen(other), "and the handle made for it is gone")
            h.remote.isOnline = true
            reconnect.open()
        }
    }

    @Test("a download the daemon cancels as it stops records no error, and what it fetched is dropped at the next start")
    func downloadCutByAStopLeavesNoErrorAndNoBytes() async throws {
        let first = try await Harness(remote: try await FaultInjectingRemote.inMemory(chunkSize: 16 * 1024))
        defer { first.close() }
        let (ino, gate) = try await first.running {
            let (ino, _) = try await Self.twoPlaceholders(first)
            let gate = first.remote.holdDownloads(afterBytes: 64 * 1024)
            try first.engine.startDownload(ino)
            try await eventually("part of the file to land") { first.engine.cache.allocatedBytes(ino) > 0 }
            return (ino, gate)
        }
        // As the daemon does once its services have stopped (else the background would start
        // the requested download again).
        first.engine.downloads.cancelAll()
        gate.open()
        #expect(try first.xattr(ino, "user.ubiq.downloadingError") == nil)
        #expect(try first.downloadingStatus(ino) == "notDownloaded")
        #expect(first.engine.cache.exists(ino), "kept while this run may have readers")

        let second = try await first.restarted()
        second.engine.dropLeftoverContent()
        #expect(!second.engine.cache.exists(ino), "the next start drops what no one can see")
        #expect(try await second.read(ino) == Self.bigContent)
        // The read has all the bytes before the digest check ends.
        try await second.running([]) {
            try await eventually("the download to be checked") { try second.downloadingStatus(ino) == "current" }
        }
        second.engine.dropLeftoverContent()
        #expect(second.engine.cache.exists(ino), "a downloaded file's content stays")
    }

    static let bigContent = pattern(500_000, seed: 6)

    /// Another device makes big.bin (`bigContent`) and other.bin; both appear here as placeholders.
    static func twoPlaceholders(_ h: Harness) async throws -> (big: Int64, other: Int64) {
        try await h.remote.otherDevice.createFile("big.bin", content: bigContent)
        try await h.remote.otherDevice.createFile("other.bin", content: pattern(9_000, seed: 7))
        return (try await h.appeared("/big.bin"), try await h.appeared("/other.bin"))
    }

    static func bytes(of result: FileSystem.ReadResult) throws -> [UInt8] {
        switch result {
        case .bytes(let b): return b
        case .file(let fd, let offset, let count):
            var buffer = [UInt8](repeating: 0, count: count)
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, count, off_t(offset)) }
            #expect(n == count)
            return buffer
        }
    }

    @Test("a read returns once its own bytes are here, while the rest still downloads")
    func readsStream() async throws {
        let h = try await Harness(remote: try await FaultInjectingRemote.inMemory(chunkSize: 16 * 1024))
        defer { h.close() }
        let content = pattern(1_000_000, seed: 4)
        try await h.running {
            try await h.remote.otherDevice.createFile("big.bin", content: content)
            let ino = try await h.appeared("/big.bin")
            let gate = h.remote.holdDownloads(afterBytes: 128 * 1024)
            let opened = try await within(.seconds(10), "open of a placeholder whose first bytes are here") {
                try await h.fs.open(ino, flags: O_RDONLY)
            }
            let head = try await within(.seconds(10), "a read of bytes already downloaded") {
                try await h.readRange(opened.handle, offset: 0, size: 64 * 1024)
            }
            #expect(sha(head) == sha(Array(content[..<(64 * 1024)])))
            #expect(try h.xattr(ino, "user.ubiq.isDownloading") == "1")
            let percent = try #require(Int(try h.xattr(ino, "user.ubiq.percentDownloaded") ?? ""))
            #expect((1..<100).contains(percent))
            #expect(try h.downloadingStatus(ino) == "notDownloaded")
            gate.open()
            let tail = try await h.readRange(opened.handle, offset: 900_000, size: 100_000)
            #expect(sha(tail) == sha(Array(content[900_000...])))
            h.fs.release(opened.handle)
            try await eventually("the download to finish") { try h.downloadingStatus(ino) == "current" }
            #expect(try h.xattr(ino, "user.ubiq.isDownloading") == "0")
        }
    }

    @Test("a remote content change makes a clean cached copy stale; the next open reads the new content", arguments: ServerSetup.allCases)
    func remoteChangeMakesStale(_ server: ServerSetup) async throws {
        let h = try await Harness(server)
        defer { h.close() }
        let v1 = pattern(10_000, seed: 1)
        let v2 = pattern(25_000, seed: 2)
        try await h.running {
            let remote = try await h.remote.otherDevice.createFile("notes.txt", content: v1)
            let ino = try await h.appeared("/notes.txt")
            #expect(sha(try await h.read(ino)) == sha(v1))
            try await eventually("v1 to be current") { try h.downloadingStatus(ino) == "current" }

            let updated = try await h.remote.otherDevice.updateContent(remote.id, to: v2)
            try await eventually("the change to make the copy stale") { try h.downloadingStatus(ino) == "downloaded" }
            #expect(try h.fs.attributes(ino).size == Int64(v2.count), "the placeholder shows the new size at once")
            #expect(try h.xattr(ino, "user.ubiq.revision") == updated.revision.rawValue)
            #expect(h.observer.invalidations.contains(.inode(ino)), "the kernel is told to drop its cache")

            #expect(sha(try await h.read(ino)) == sha(v2))
            try await eventually("v2 to be current") { try h.downloadingStatus(ino) == "current" }
            #expect(sha(try await h.read(ino)) == sha(v2))
        }
    }

    @Test(
        "a stale file that is being refreshed: a read past the first bytes waits for the new bytes"
    )
    func staleRefreshReadWaits() async throws {
        let h = try await Harness(remote: try await FaultInjectingRemote.inMemory(chunkSize: 16 * 1024))
        defer { h.close() }
        let v1 = pattern(300_000, seed: 1)
        let v2 = pattern(300_000, seed: 2)
        try await h.running {
            let remote = try await h.remote.otherDevice.createFile("big.txt", content: v1)
            let ino = try await h.appeared("/big.txt")
            #expect(sha(try await h.read(ino)) == sha(v1))
            try await eventually("v1 to be current") { try h.downloadingStatus(ino) == "current" }
            try await h.remote.otherDevice.updateContent(remote.id, to: v2)
            try await eventually("the copy to be stale") { try h.downloadingStatus(ino) == "downloaded" }

            let gate = h.remote.holdDownloads(afterBytes: 64 * 1024)
            let opened = try await within(.seconds(10), "open of a stale file") { try await h.fs.open(ino, flags: O_RDONLY) }
            // The read may wait for the held bytes (correct) or return at once (then its bytes
            // must already be the new ones). Give an early return a moment, then release the rest.
            let returned = Mutex(false)
            let reader = Task {
                defer { returned.withLock { $0 = true } }
                return try await h.readRange(opened.handle, offset: 200_000, size: 4096)
            }
            try? await eventually(timeout: .seconds(1), "the read to return early") { returned.withLock { $0 } }
            gate.open()
            let bytes = try await reader.value
            h.fs.release(opened.handle)
            #expect(sha(bytes) == sha(Array(v2[200_000..<204_096])), "read returned \(bytes.prefix(8))… instead of the new content")
        }
    }

    @Test("a remote change that arrives while the file is open for writing applies when the writer closes without writing")
    func remoteChangeWhileOpenForWriting() async throws {
        let h = try await Harness()
        defer { h.close() }
        try await h.running {
            let remote = try await h.remote.otherDevice.createFile("f.txt", content: Array("one".utf8))
            let ino = try await h.appeared("/f.txt")
            #expect(try await h.read(ino) == Array("one".utf8))
            let writer = try await h.fs.open(ino, flags: O_RDWR)
            let updated = try await h.remote.otherDevice.updateContent(remote.id, to: Array("two two".utf8))
            try await eventually("the feed to pass the change") { try await h.caughtUp() }
            #expect(try h.xattr(ino, "user.ubiq.revision") != updated.revision.rawValue, "held back while open for writing")
            h.fs.release(writer.handle)
            #expect(try h.xattr(ino, "user.ubiq.revision") == updated.revision.rawValue, "applied at the close")
            #expect(try h.fs.attributes(ino).size == 7)
            #expect(try await h.read(ino) == Array("two two".utf8))
            #expect(try h.outbox().isEmpty)
        }
    }

    @Test("a remote change held back for a writer is not forgotten when the daemon dies with the file open")
    func remoteChangeHeldForAWriterSurvivesACrash() async throws {
        let first = try await Harness()
        defer { first.close() }
        let (ino, updated) = try await first.running {
            let remote = try await first.remote.otherDevice.createFile("f.txt", content: Array("one".utf8))
            let ino = try await first.appeared("/f.txt")
            _ = try await first.fs.open(ino, flags: O_RDWR)  // never closed: the daemon dies
            let updated = try await first.remote.otherDevice.updateContent(remote.id, to: Array("two two".utf8))
            try await eventually("the feed to pass the change") { try await first.caughtUp() }
            #expect(try first.xattr(ino, "user.ubiq.revision") != updated.revision.rawValue, "held back while open for writing")
            return (ino, updated)
        }
        let h = try await first.restarted()
        try await h.running([.outbox]) {
            // The feed has passed the change: only what was kept can bring it.
            try await eventually("the change to apply at the start") { try h.xattr(ino, "user.ubiq.revision") == updated.revision.rawValue }
            #expect(try h.fs.attributes(ino).size == 7)
        }
    }

    @Test("a reader of a stale copy keeps its version; an open made meanwhile reads the new one, bypassing the page cache")
    func staleCopyKeptByItsReader() async throws {
        let h = try await Harness()
        defer { h.close() }
        let v1 = pattern(40_000, seed: 1)
        let v2 = pattern(15_000, seed: 2)
        try await h.running {
            let remote = try await h.remote.otherDevice.createFile("log.txt", content: v1)
            let ino = try await h.appeared("/log.txt")
            #expect(sha(try await h.read(ino)) == sha(v1))
            try await eventually("v1 to be current") { try h.downloadingStatus(ino) == "current" }
            let old = try await h.fs.open(ino, flags: O_RDONLY)
            #expect(try await h.readRange(old.handle, offset: 0, size: 4096) == Array(v1.prefix(4096)))

            try await h.remote.otherDevice.updateContent(remote.id, to: v2)
            try await eventually("the copy to be stale") { try h.downloadingStatus(ino) == "downloaded" }
            let new = try await within(.seconds(10), "open of a stale file held open") { try await h.fs.open(ino, flags: O_RDONLY) }
            #expect(new.directIO, "the old reader fills the inode's page cache with v1")
            #expect(!new.keepCache)
            #expect(sha(try await h.readAll(new.handle, size: 1 << 20)) == sha(v2), "the new open reads the new version")
            #expect(sha(try await h.readAll(old.handle, size: 1 << 20)) == sha(v1), "the old descriptor reads all of its version")
            try await eventually("v2 to be current") { try h.downloadingStatus(ino) == "current" }
            h.fs.release(old.handle)
            h.fs.release(new.handle)

            let after = try #require(try h.fs.openIfLocal(ino, flags: O_RDONLY))
            #expect(!after.keepCache && !after.directIO, "the first open after the old reader drops the pages it left")
            h.fs.release(after.handle)
            let later = try #require(try h.fs.openIfLocal(ino, flags: O_RDONLY))
            #expect(later.keepCache && !later.directIO)
            #expect(sha(try await h.readAll(later.handle, size: 1 << 20)) == sha(v2))
            h.fs.release(later.handle)
        }
    }

    @Test("an open that read the placeholder before its download completed holds a whole copy: a later version does not leak into it")
    func openRacingTheDownloadsEndKeepsItsVersion() async throws {
        let h = try await Harness()
        defer { h.close() }
        let v1 = pattern(40_000, seed: 3)
        let v2 = pattern(60_000, seed: 4)
        try await h.running {
            let remote = try await h.remote.otherDevice.createFile("held.bin", content: v1)
            let ino = try await h.appeared("/held.bin")
            // The open's read of the row, made before the download ends...
            let readBefore = try #require(try h.local(ino))
            #expect(readBefore.content == .placeholder)
            #expect(sha(try await h.read(ino)) == sha(v1))
            try await eventually("v1 to be current") { try h.downloadingStatus(ino) == "current" }
            // ...and its handle registered after it: no download was left to tell it. Its first
            // reads were answered from the download's landed bytes, which says nothing either.
            let old = try #require(try h.fs.finishOpen(readBefore, flags: O_RDONLY, wasLocal: false))

            try await h.remote.otherDevice.updateContent(remote.id, to: v2)
            try await eventually("the copy to be stale") { try h.downloadingStatus(ino) == "downloaded" }
            let new = try await within(.seconds(10), "open of a stale file held open") { try await h.fs.open(ino, flags: O_RDONLY) }
            #expect(new.directIO, "the old reader's pages of v1 must not be shared with the new open")
            #expect(sha(try await h.readAll(new.handle, size: 1 << 20)) == sha(v2))
            #expect(sha(try await h.readAll(old.handle, size: 1 << 20)) == sha(v1), "the old descriptor reads all of its version")
            h.fs.release(old.handle)
            h.fs.release(new.handle)
        }
    }

    @Test("a reader following a download whose version is replaced midway fails with EIO, never reads the other version")
    func followedVersionReplaced() async throws {
        let h = try await Harness(remote: try await FaultInjectingRemote.inMemory(chunkSize: 16 * 1024))
        defer { h.close() }
        let v1 = pattern(300_000, seed: 1)
        let v2 = pattern(300_000, seed: 2)
        try await h.running {
            let remote = try await h.remote.otherDevice.createFile("big.bin", content: v1)
            let ino = try await h.appeared("/big.bin")
            let gate = h.remote.holdDownloads(afterBytes: 64 * 1024)
            let opened = try await within(.seconds(10), "open of a placeholder") { try await h.fs.open(ino, flags: O_RDONLY) }
            #expect(try await h.readRange(opened.handle, offset: 0, size: 4096) == Array(v1.prefix(4096)))
            let updated = try await h.remote.otherDevice.updateContent(remote.id, to: v2)
            try await eventually("the new version to arrive") { try h.xattr(ino, "user.ubiq.revision") == updated.revision.rawValue }
            gate.open()
            // Opened while the old reader is: v2 goes into a file of its own, and the new
            // open bypasses the inode's pages, which the old reader fills with v1.
            let new = try await within(.seconds(10), "open of the new version") { try await h.fs.open(ino, flags: O_RDONLY) }
            #expect(new.directIO, "the old reader's pages must not be shared with the new version's")
            #expect(sha(try await h.readAll(new.handle, size: 1 << 20)) == sha(v2))
            await #expect(throws: FSError.io) { try await h.readRange(opened.handle, offset: 200_000, size: 4096) }
            h.fs.release(opened.handle)
            h.fs.release(new.handle)
            #expect(sha(try await h.read(ino)) == sha(v2))
        }
    }

    @Test("a download refilling a placeholder's file unlinks it under readers of another version; its completion marks only the readers of the file it wrote")
    func descriptorsKeepTheFileTheyOpened() throws {
        let files = OpenFiles()
        let folder = try TempDirectory("ubiq-refill")
        defer { folder.remove() }
        let path = folder.path + "/7"
        let v1 = ContentDigest.of(Array("one".utf8))
        let v2 = ContentDigest.of(Array("two".utf8))
        func reader(_ digest: ContentDigest) throws -> UInt64 {
            let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            try #require(fd >= 0)
            return files.open(OpenFiles.Handle(ino: 7, fd: fd, writable: false, excluded: false, digest: digest)).handle
        }
        let ofV1 = try reader(v1)
        #expect(!files.willRefill(7, for: v1), "readers of the version being fetched share its file")
        #expect(files.willRefill(7, for: v2), "a reader of another version keeps the old file")
        unlink(path)
        let ofV2 = try reader(v2)
        #expect(files.handle(ofV1)?.oldCopy == true)
        let newFD = try #require(files.handle(ofV2)).fd
        let newFile = try #require(FileIdentity(of: newFD))
        files.downloadCompleted(7, digest: v2, file: newFile)
        #expect(files.handle(ofV2)?.knownLocal == true)
        // v1 completing into the file its reader holds (cancelled while its check ran).
        let oldFD = try #require(files.handle(ofV1)).fd
        let oldFile = try #require(FileIdentity(of: oldFD))
        #expect(oldFile != newFile)
        files.downloadCompleted(7, digest: v1, file: newFile)
        #expect(files.handle(ofV1)?.knownLocal == false, "a download into another file says nothing of this one")
        files.downloadCompleted(7, digest: v1, file: oldFile)
        #expect(files.handle(ofV1)?.knownLocal == true)
        for handle in [ofV1, ofV2] {
            if let h = files.takeHandle(handle) { close(h.fd) }
        }
    }

    @Test("evicting a folder evicts the closed files below it and keeps an open one (EBUSY); a write through the open one keeps the rest of its content")
    func folderEvictionSparesOpenFiles() async throws {
        let h = try await Harness()
        defer { h.close() }
        try await h.running {
            let folder = try await h.remote.otherDevice.createFolder("d")
            let kept = try await h.remote.otherDevice.createFile("open.txt", in: folder.id, content: Array("0123456789".utf8))
            try await h.remote.otherDevice.createFile("closed.txt", in: folder.id, content: Array("closed".utf8))
            let dir = try await h.appeared("/d")
            let openIno = try await h.appeared("/d/open.txt")
            let closedIno = try await h.appeared("/d/closed.txt")
            #expect(try await h.read(openIno) == Array("0123456789".utf8))
            #expect(try await h.read(closedIno) == Array("closed".utf8))
            // A read returns once the bytes are in; the download is recorded a moment later.
            try await eventually("both downloads to be recorded") {
                try h.downloadingStatus(openIno) == "current" && h.downloadingStatus(closedIno) == "current"
            }
            let writer = try await h.fs.open(openIno, flags: O_RDWR)
            #expect(errnoOf { try h.fs.setXattr(dir, name: "user.ubiq.downloadingStatus", value: n("notDownloaded"), create: false, replace: false) } == EBUSY)
            #expect(try h.downloadingStatus(closedIno) == "notDownloaded")
            #expect(try h.downloadingStatus(openIno) == "current")
            _ = try h.fs.write(writer.handle, offset: 2, data: Array("ab".utf8))
            h.fs.release(writer.handle)
            #expect(try await h.read(openIno) == Array("01ab456789".utf8))
            try await eventually("the edit on the server") { try await h.remote.content(of: kept.id) == Array("01ab456789".utf8) }
        }
    }

    /// The kernel names the offset of an appending write from the size it last heard of, which
    /// is older than the version an open that waited for a download brought in.
    @Test("an appending write goes to the end of the file the daemon holds, whatever offset it names; written-back pages stay in place")
    func anAppendGoesToTheEndTheDaemonHolds() async throws {
        let h = try await Harness()
        defer { h.close() }
        try await h.running {
            let file = try await h.remote.otherDevice.createFile("log", content: Array("one\ntwo\n".utf8))
            let ino = try await h.appeared("/log")
            let appending = try await h.fs.open(ino, flags: O_WRONLY | O_APPEND)
            #expect(try h.fs.write(appending.handle, offset: 4, data: Array("three\n".utf8)) == 6)
            #expect(try h.fs.attributes(ino).size == 14)
            // A shared mapping's dirty page, written back through this handle, stays in place.
            #expect(try h.fs.write(appending.handle, offset: 0, data: Array("ONE".utf8), fromPages: true) == 3)
            h.fs.release(appending.handle)
            #expect(try await h.read(ino) == Array("ONE\ntwo\nthree\n".utf8))
            try await eventually("the append on the server") { try await h.remote.content(of: file.id) == Array("ONE\ntwo\nthree\n".utf8) }
        }
    }

    @Test("writing current to downloadingStatus downloads; notDownloaded evicts back to a placeholder")
    func downloadAndEvictThroughXattrs() async throws {
        let h = try await Harness()
        defer { h.close() }
        let content = pattern(50_000, seed: 5)
        try await h.running {
            try await h.remote.otherDevice.createFile("f.bin", content: content)
            let ino = try await h.appeared("/f.bin")
            try h.fs.setXattr(ino, name: "user.ubiq.downloadingStatus", value: n("current"), create: false, replace: false)
            try await eventually("the download to finish") { try h.downloadingStatus(ino) == "current" }
            #expect(try h.fs.attributes(ino).blocks > 0)
            try h.fs.setXattr(ino, name: "user.ubiq.downloadingStatus", value: n("notDownloaded"), create: false, replace: false)
            #expect(try h.downloadingStatus(ino) == "notDownloaded")
            #expect(try h.fs.attributes(ino).blocks == 0)
            #expect(try h.fs.attributes(ino).size == Int64(content.count))
            #expect(!h.engine.cache.exists(ino))
            #expect(sha(try await h.read(ino)) == sha(content))
        }
    }

    @Test("remote renames, moves and deletes show up in the mount", arguments: ServerSetup.allCases)
    func remoteTreeChanges(_ server: ServerSetup) async throws {
        let h = try await Harness(server)
        defer { h.close() }
        try await h.running {
            let folder = try await h.remote.otherDevice.createFolder("folder")
            let file = try await h.remote.otherDevice.createFile("a.txt", content: Array("a".utf8))
            try await eventually("the items to appear") { try h.ino("/folder") != nil && h.ino("/a.txt") != nil }
            let ino = try h.requireIno("/a.txt")
            try await h.remote.otherDevice.move(file.id, to: "b.txt", parent: folder.id)
            try await eventually("the move to show") { try h.ino("/folder/b.txt") != nil }
            #expect(try h.ino("/a.txt") == nil)
            #expect(try h.requireIno("/folder/b.txt") == ino, "a moved item keeps its inode")
            try await h.remote.otherDevice.delete(folder.id, recursive: true)
            try await eventually("the delete to show") { try h.ino("/folder") == nil }
            #expect(try h.children().isEmpty)
            #expect(try h.local(ino) == nil)
        }
    }
}

/// What an asynchronous answer delivered, once.
final class ReadAnswer: Sendable {
    let state = Mutex<FileSystem.ReadResult??>(nil)
    func set(_ result: FileSystem.ReadResult?) { state.withLock { $0 = .some(result) } }
    var value: FileSystem.ReadResult?? { state.withLock { $0 } }
}

final class Answer: Sendable {
    let state = Mutex<FileSystem.Opened??>(nil)
    func set(_ opened: FileSystem.Opened?) { state.withLock { $0 = .some(opened) } }
    var value: FileSystem.Opened?? { state.withLock { $0 } }

    /// A first sync tells each item it brings by its path, also an item whose folder was
    /// renamed after it was made (the log then lists it before its folder) and one whose name
    /// another device gave up in the same catch-up.
    @Test func aFirstSyncTellsEveryItemByItsPath() async throws {
        let h = try await Harness()
        defer { h.close() }
        let other = h.remote.otherDevice
        let a = try await other.createFolder("A")
        let b = try await other.createFolder("B", in: a.id)
        try await other.createFile("f.txt", in: b.id, content: [1])
        let c = try await other.createFolder("C")
        try await other.createFile("g.txt", in: c.id, content: [2])
        try await other.move(a.id, to: "A2")
        try await other.createFile("h.txt", in: a.id, content: [3])
        try await h.running([.changeFeed]) {
            try await eventually("the first sync") { try await h.caughtUp() }
        }
        let told = Set(h.observer.events.filter { $0.kind == .created }.compactMap(\.path))
        #expect(told == ["/A2", "/A2/B", "/A2/B/f.txt", "/A2/h.txt", "/C", "/C/g.txt"], "\(told)")
    }
}
