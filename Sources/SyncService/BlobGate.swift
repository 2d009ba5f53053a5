import ItemModel

/// One writer of a blob at a time, per digest: an upload between its commit and its grant, or
/// the collection of unreferenced blobs between its check that no account holds the blob and
/// its removal. Without it, a collection that checked just before an upload of the same
/// content renamed its file into place would remove that file after the upload's grant, and
/// the account would hold a blob that is gone.
actor BlobGate {
    private var busy: Set<ContentDigest> = []
    private var waiting: [ContentDigest: [CheckedContinuation<Void, Never>]] = [:]

    func holding<T: Sendable>(_ digest: ContentDigest, _ body: @Sendable () async throws -> T) async throws -> T {
        await acquire(digest)
        do {
            let result = try await body()
            release(digest)
            return result
        } catch {
            release(digest)
            throw error
        }
    }

    private func acquire(_ digest: ContentDigest) async {
        guard busy.contains(digest) else {
            busy.insert(digest)
            return
        }
        await withCheckedContinuation { waiting[digest, default: []].append($0) }
    }

    /// Hands the digest to the next waiter, who then holds it, or frees it.
    private func release(_ digest: ContentDigest) {
        guard var queue = waiting[digest], !queue.isEmpty else {
            busy.remove(digest)
            return
        }
        let next = queue.removeFirst()
        waiting[digest] = queue.isEmpty ? nil : queue
        next.resume()
    }
}
