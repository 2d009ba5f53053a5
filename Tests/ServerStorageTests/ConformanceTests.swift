import Foundation
import ItemModel
import NIOCore
import ServerStorage
import TestSupport
import Testing

@Suite struct StorageConformanceTests {
    @Test(arguments: StorageConformance.all, StorageBackend.all)
    func conformance(_ check: StorageConformance, _ backend: StorageBackend) async throws {
        try await check.run(on: backend)
    }
}

@Suite struct FileBlobStoreTests {
    func files(in dir: String) -> [String] {
        (FileManager.default.enumerator(atPath: dir)?.allObjects as? [String] ?? []).sorted()
    }

    @Test func aRefusedOrAbortedBlobLeavesNoFile() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let store = try FileBlobStore(root: dir.path + "/blobs")
        let w = try await store.makeWriter()
        try await w.write(ByteBuffer(string: "abc"))
        await #expect(throws: BlobStoreError.self) { try await w.commit(expecting: .empty) }
        let w2 = try await store.makeWriter()
        try await w2.write(ByteBuffer(string: "def"))
        await w2.abort()
        #expect(files(in: dir.path + "/blobs") == ["tmp"])
    }

    @Test func aCommittedBlobIsInPlaceUnderItsDigest() async throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let store = try FileBlobStore(root: dir.path + "/blobs")
        let w = try await store.makeWriter()
        try await w.write(ByteBuffer(string: "hello"))
        let (digest, _) = try await w.commit(expecting: nil)
        let path = "\(dir.path)/blobs/\(digest.hex.prefix(2))/\(digest.hex)"
        #expect(FileManager.default.contents(atPath: path) == Data("hello".utf8))
        #expect(files(in: dir.path + "/blobs/tmp").isEmpty)
    }

    @Test func leftoversOfACrashedUploadAreDroppedAtStart() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        _ = try FileBlobStore(root: dir.path + "/blobs")
        _ = FileManager.default.createFile(atPath: dir.path + "/blobs/tmp/partial", contents: Data("half".utf8))
        _ = try FileBlobStore(root: dir.path + "/blobs")
        #expect(files(in: dir.path + "/blobs/tmp").isEmpty)
    }
}

@Suite struct CredentialsTests {
    @Test func passwordsVerifyAndSaltDiffers() throws {
        let h1 = try Credentials.hashPassword("correct horse")
        let h2 = try Credentials.hashPassword("correct horse")
        #expect(h1 != h2)
        #expect(Credentials.verifyPassword("correct horse", against: h1))
        #expect(!Credentials.verifyPassword("wrong", against: h1))
        #expect(!Credentials.verifyPassword("x", against: "garbage"))
    }

    @Test func tokensAreLongAndUnique() {
        let a = Credentials.newToken(), b = Credentials.newToken()
        #expect(a != b && a.count >= 43)
        #expect(Credentials.hashToken(a) == Credentials.hashToken(a) && Credentials.hashToken(a) != a)
    }
}

@Suite struct FullDiskTests {
    /// A full disk is the client's to wait out (507), never a server fault: out of inodes, a
    /// new blob cannot be made; out of space, the database cannot commit.
    @Test func aFullDiskIsRefusedAsSuch() async throws {
        let dir = try TempDirectory("ubiq-full")
        defer { dir.remove() }
        let mounted = try await run("/bin/mount", ["-t", "tmpfs", "-o", "size=4m,nr_inodes=64", "tmpfs", dir.path], timeout: .seconds(10))
        try #require(mounted.status == 0, "cannot mount a tmpfs: \(mounted.stderr)")
        defer { _ = umount2(dir.path, Int32(MNT_DETACH)) }
        let blobs = try FileBlobStore(root: dir.path + "/blobs")
        let metadata = try SQLiteMetadataStore(path: dir.path + "/metadata.sqlite")
        _ = try await metadata.addAccount(name: "before", passwordHash: "x")

        // Out of inodes.
        mkdir(dir.path + "/fill", 0o700)
        var files = 0
        while true {
            let fd = open(dir.path + "/fill/\(files)", O_CREAT | O_WRONLY, 0o600)
            if fd < 0 { break }
            close(fd)
            files += 1
        }
        #expect(errno == ENOSPC)
        await #expect(throws: BlobStoreError.noSpace) { _ = try await blobs.makeWriter() }

        // Out of space: the database's next pages have nowhere to go.
        let filler = open(dir.path + "/fill/0", O_WRONLY)
        let block = [UInt8](repeating: 7, count: 65_536)
        while write(filler, block, block.count) > 0 {}
        close(filler)
        var refusal: (any Error)?
        for i in 0..<1_000 {
            do {
                _ = try await metadata.addAccount(name: "account-\(i)", passwordHash: String(repeating: "h", count: 20_000))
            } catch {
                refusal = error
                break
            }
        }
        #expect(refusal as? StorageError == .diskFull, "\(String(describing: refusal))")
    }
}
