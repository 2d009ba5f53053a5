import Foundation
import ItemModel
import NIOCore
import ServerStorage
import Testing
import TestSupport
@testable import SyncServer

/// The archive is checked by another implementation: Python's zipfile reads it, tests every
/// member's CRC and gives back each member's bytes.
@Suite struct ZipStreamTests {
    /// Each member's name and the SHA-256 of its bytes, as Python's zipfile reads them from the
    /// archive (after its own CRC check of every member).
    static func unpacked(_ archive: Data) async throws -> [String: String] {
        let dir = try TempDirectory("ubiq-zip")
        defer { dir.remove() }
        let path = dir.path + "/a.zip"
        try archive.write(to: URL(fileURLWithPath: path))
        let script = """
            import hashlib, json, sys, zipfile
            z = zipfile.ZipFile(sys.argv[1])
            bad = z.testzip()
            if bad: sys.exit("bad CRC: " + bad)
            print(json.dumps({i.filename: hashlib.sha256(z.read(i)).hexdigest() for i in z.infolist()}))
            """
        let r = try await run("/usr/bin/env", ["python3", "-c", script, path])
        guard r.status == 0 else { throw TestSupportError("python3 zipfile: \(r.stderr)") }
        return try JSONDecoder().decode([String: String].self, from: Data(r.stdout.utf8))
    }

    static func archive(_ files: [String: [UInt8]], zip64Threshold: Int64 = 0xFFFF_FFFF) async throws -> Data {
        let blobs = InMemoryBlobStore()
        var members: [ZipStream.Member] = []
        for (name, bytes) in files.sorted(by: { $0.key < $1.key }) {
            let writer = try await blobs.makeWriter()
            try await writer.write(ByteBuffer(bytes: bytes))
            let (digest, size) = try await writer.commit(expecting: nil)
            members.append(.init(name: name, size: size, modified: WallClock.now(), digest: digest))
        }
        var out = Data()
        var stream = ZipStream()
        stream.zip64Threshold = zip64Threshold
        try await stream.write(members, open: { try await blobs.openReader($0) }) { chunk in out.append(contentsOf: chunk.readableBytesView) }
        return out
    }

    static let files: [String: [UInt8]] = [
        "notes.md": Array("# notes\n".utf8),
        "day 1/photo ü.jpg": (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) },
        "empty.txt": [],
        "☃/deep/a.bin": [UInt8](repeating: 7, count: 2_000_001),
    ]

    @Test("another zip reader unpacks every member with its name and bytes, and finds every CRC right")
    func unpacks() async throws {
        let unpacked = try await Self.unpacked(try await Self.archive(Self.files))
        #expect(unpacked == Self.files.mapValues { sha256(Data($0)).hex })
    }

    @Test("with the ZIP64 records every size and offset needs past 32 bits (forced here by a low bound), it still unpacks")
    func unpacksWithZip64Records() async throws {
        let unpacked = try await Self.unpacked(try await Self.archive(Self.files, zip64Threshold: 1))
        #expect(unpacked == Self.files.mapValues { sha256(Data($0)).hex })
    }

    @Test("CRC-32 of the standard check string is 0xCBF43926")
    func crc() {
        var crc = CRC32()
        Array("123456789".utf8).withUnsafeBytes { crc.update($0) }
        #expect(crc.value == 0xCBF4_3926)
    }
}
