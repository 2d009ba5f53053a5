import Foundation
import ItemModel
import NIOCore
import ServerStorage
import Synchronization

/// Blobs in a dictionary: a second `BlobStore` for the conformance suite and for unit tests.
public final class InMemoryBlobStore: BlobStore, Sendable {
    struct Stored {
        var bytes: [UInt8]
        var written: Timestamp
    }

    let blobs = Mutex<[ContentDigest: Stored]>([:])

    public init() {}

    public func makeWriter() async throws -> any BlobWriter { Writer(store: self) }

    public func size(of digest: ContentDigest) async throws -> Int64? {
        if digest == .empty { return 0 }
        return blobs.withLock { $0[digest].map { Int64($0.bytes.count) } }
    }

    public func openReader(_ digest: ContentDigest) async throws -> any BlobReader {
        let bytes = digest == .empty ? [] : blobs.withLock { $0[digest]?.bytes }
        guard let bytes else { throw BlobStoreError.notFound(digest) }
        return DataBlobReader(Data(bytes))
    }

    public var count: Int { blobs.withLock { $0.count } }

    /// Another store holding the same blobs as this one now.
    public func copy() -> InMemoryBlobStore {
        let copy = InMemoryBlobStore()
        copy.blobs.withLock { $0 = blobs.withLock { $0 } }
        return copy
    }

    public func digests(writtenBefore cutoff: Timestamp) async throws -> [ContentDigest] {
        blobs.withLock { $0.filter { $0.value.written < cutoff }.map(\.key) }
    }

    public func remove(_ digest: ContentDigest) async throws {
        _ = blobs.withLock { $0.removeValue(forKey: digest) }
    }

    final class Writer: BlobWriter {
        let store: InMemoryBlobStore
        var bytes: [UInt8] = []
        var bytesWritten: Int64 { Int64(bytes.count) }
        init(store: InMemoryBlobStore) { self.store = store }

        func write(_ buffer: ByteBuffer) async throws { bytes.append(contentsOf: buffer.readableBytesView) }

        func commit(expecting expected: ContentDigest?) async throws -> (digest: ContentDigest, size: Int64) {
            let digest = ContentDigest.of(bytes)
            if let expected, expected != digest { throw BlobStoreError.digestMismatch(declared: expected, actual: digest) }
            store.blobs.withLock { $0[digest] = Stored(bytes: bytes, written: WallClock.now()) }
            return (digest, Int64(bytes.count))
        }

        func abort() async { bytes = [] }
    }
}
