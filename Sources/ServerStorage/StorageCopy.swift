import Foundation
import ItemModel
import NIOCore

/// Copies one server's storage into another (`ubiq-server migrate`) and checks the copy:
///
/// 1. Every content of the source's blob store goes to the target's, each checked against its
///    digest as it is committed there; one the target already holds at that size is skipped,
///    so a copy cut short can simply run again.
/// 2. Every content the metadata names (files, conflict versions, earlier versions, shares)
///    must then be in the target at the size the metadata says.
/// 3. The metadata goes in, in one transaction, into an empty store: all or nothing.
/// 4. The target's metadata is read back and compared with the source's, table by table,
///    byte for byte.
///
/// Contents go first so that no metadata ever names a content the target lacks. The source
/// must not change meanwhile: its server is stopped (the caller holds its data folder).
public enum StorageCopy {
    public struct Report: Sendable {
        public var dump: MetadataDump
        public var contentsCopied = 0
        public var bytesCopied: Int64 = 0
        /// Already in the target at their size (an earlier, interrupted run).
        public var contentsPresent = 0
    }

    /// How many contents travel at once.
    static let parallelCopies = 4
    static let chunkSize = 1 << 20

    public static func run(
        metadata source: any MetadataExporting, into target: any MetadataImporting & MetadataExporting,
        blobs sourceBlobs: any BlobStore, into targetBlobs: any BlobStore, progress: @Sendable (String) -> Void = { _ in }
    ) async throws -> Report {
        let dump = try await source.exportAll()
        var report = Report(dump: dump)
        // Every content the source holds, however recent.
        let digests = try await sourceBlobs.digests(writtenBefore: .max)
        progress("copying \(digests.count) contents")
        // What the target holds now, as the copy learned it: the check below asks the target
        // only about contents the source did not list.
        var atTarget: [ContentDigest: Int64] = [:]
        try await withThrowingTaskGroup(of: (digest: ContentDigest, copied: Bool, bytes: Int64).self) { group in
            var pending = digests[...]
            func startNext() {
                guard let digest = pending.popFirst() else { return }
                group.addTask { try await copy(digest, from: sourceBlobs, to: targetBlobs) }
            }
            for _ in 0..<parallelCopies { startNext() }
            while let outcome = try await group.next() {
                atTarget[outcome.digest] = outcome.bytes
                if outcome.copied {
                    report.contentsCopied += 1
                    report.bytesCopied += outcome.bytes
                } else {
                    report.contentsPresent += 1
                }
                startNext()
            }
        }
        var missing: [String] = []
        for (hex, size) in dump.namedContents.sorted(by: { $0.key < $1.key }) {
            let digest = try ContentDigest(hex: hex)
            let held: Int64? = if let known = atTarget[digest] { known } else { try await targetBlobs.size(of: digest) }
            if held != size { missing.append(hex) }
        }
        guard missing.isEmpty else {
            throw CopyFailed("\(missing.count) contents the metadata names are not in the source's blob store at their size (first: \(missing[0])); nothing was copied into the target's metadata")
        }
        progress("copying the metadata")
        try await target.importAll(dump)
        progress("comparing the copy with the source")
        if let table = try dump.firstDifference(from: try await target.exportAll()) {
            throw CopyFailed("the copy's \(table) differ from the source's")
        }
        return report
    }

    /// Copies one content unless the target has it at its size; true when it did.
    static func copy(_ digest: ContentDigest, from source: any BlobStore, to target: any BlobStore) async throws -> (digest: ContentDigest, copied: Bool, bytes: Int64) {
        let reader = try await source.openReader(digest)
        defer { reader.close() }
        let size = reader.size
        if try await target.size(of: digest) == size { return (digest, false, size) }
        let writer = try await target.makeWriter()
        do {
            try await reader.read(0..<size, chunkSize: chunkSize) { chunk in try await writer.write(chunk) }
            _ = try await writer.commit(expecting: digest)
        } catch {
            await writer.abort()
            throw CopyFailed("content \(digest.hex): \(error)")
        }
        return (digest, true, size)
    }
}

/// Why a copy stopped.
public struct CopyFailed: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}
