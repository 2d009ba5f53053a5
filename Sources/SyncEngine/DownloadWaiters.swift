import CacheFiles
import Foundation
import ItemModel
import LocalState
import Synchronization

extension Downloads {
    /// Where the bytes of `count` from `offset` (clamped to the file) stand in a running
    /// download of `digest`, in one look at the table: readers behind the download's front are
    /// answered without waiting and without the database, and those ahead of it wait for it.
    public func position(_ ino: Int64, digest: ContentDigest, from offset: Int64, count: Int) -> ReadPosition {
        state.withLock { s in
            guard let a = s.active[ino], a.digest == digest else { return .notRunning }
            let range = offset..<(offset + Int64(count))
            return a.ranges.contains(range.clamped(to: 0..<a.size)) ? .landed(size: a.size) : .ahead
        }
    }

    /// Waits for the bytes of `count` from `offset` when a download of `digest` runs; false
    /// (at once) when none does. Throws when that download fails or is cancelled.
    public func waitIfRunning(_ ino: Int64, digest: ContentDigest, from offset: Int64, count: Int) async throws -> Bool {
        try await waitIfRunning(offset..<(offset + Int64(count)), of: ino, digest: digest)
    }

    /// `addWaiter`, awaited: true once `range` has landed, false at once when no download (of
    /// `digest`, when given) runs.
    func waitIfRunning(_ range: Range<Int64>, of ino: Int64, digest: ContentDigest?) async throws -> Bool {
        try await withCheckedThrowingContinuation { (c: CheckedContinuation<Bool, Error>) in
            let registered = addWaiter(range, of: ino, digest: digest) { _, error in
                if let error { c.resume(throwing: error) } else { c.resume(returning: true) }
            }
            switch registered {
            case .notRunning: c.resume(returning: false)
            case .landed: c.resume(returning: true)
            case .waiting: break
            }
        }
    }

    /// Returns once `range` of the file is in the cache file (or throws why it never will be).
    public func wait(for range: Range<Int64>, of item: LocalItem) async throws {
        start(item)
        try await wait(for: range, ofRunning: item.ino)
    }

    /// Returns once `range` has landed; at once when no download of the file runs.
    func wait(for range: Range<Int64>, ofRunning ino: Int64) async throws {
        // Not downloading: either finished (the caller re-checks the item) or never started.
        _ = try await waitIfRunning(range, of: ino, digest: nil)
    }

    /// What `addWaiter` did.
    enum Registration {
        /// No download of that version runs: `resume` will not be called.
        case notRunning
        /// The range has landed already: `resume` will not be called.
        case landed(size: Int64)
        /// `resume` will be called once, with the file's size and nil when the range landed,
        /// else with why it never will.
        case waiting
    }

    /// Registers `resume` for `range` (clamped to the file) of the running download of `ino`,
    /// of `digest` when given. A reader far ahead of the sequential stream gets a fetch of its
    /// own, so a seek does not wait for the whole prefix.
    func addWaiter(_ range: Range<Int64>, of ino: Int64, digest: ContentDigest?, resume: @escaping @Sendable (Int64, Error?) -> Void) -> Registration {
        let (registration, priority) = state.withLock { s -> (Registration, (ContentDigest, Range<Int64>, UInt64)?) in
            guard var active = s.active[ino], digest == nil || active.digest == digest else { return (.notRunning, nil) }
            let clamped = range.clamped(to: 0..<active.size)
            if active.ranges.contains(clamped) { return (.landed(size: active.size), nil) }
            let size = active.size
            active.waiters.append(Waiter(range: clamped) { error in resume(size, error) })
            var priority: (ContentDigest, Range<Int64>, UInt64)?
            let streamed = active.ranges.ranges.first.map { $0.lowerBound == 0 ? $0.upperBound : 0 } ?? 0
            if clamped.lowerBound > streamed + Self.priorityDistance,
               !active.priorityFetches.contains(where: { $0.contains(clamped.lowerBound) }) {
                let start = clamped.lowerBound & ~((1 << 20) - 1)
                let fetch = start..<min(active.size, start + Self.priorityLength)
                active.priorityFetches.append(fetch)
                priority = (active.digest, fetch, active.generation)
            }
            s.active[ino] = active
            return (.waiting, priority)
        }
        if let (digest, fetch, generation) = priority {
            Task { await self.runPriority(ino: ino, digest: digest, range: fetch, generation: generation) }
        }
        return registration
    }

    /// For an open or a read ahead of the running download of `digest`, with no task waiting:
    /// false at once when none runs. Else `done` gets the file's size once the bytes of
    /// `count` from `offset` have landed (at once, on this thread, when they have; otherwise
    /// on the thread that landed them), or nil when the download failed or was cancelled
    /// first.
    public func whenLanded(_ ino: Int64, digest: ContentDigest, from offset: Int64, count: Int, _ done: @escaping @Sendable (Int64?) -> Void) -> Bool {
        let registered = addWaiter(offset..<(offset + Int64(count)), of: ino, digest: digest) { size, error in
            // Landed: at once, on the landing thread (the point of this call). Not landed:
            // on a thread of its own, since a cancel may come from inside a transaction or
            // a writer's lock, and the caller then releases a handle and starts a task.
            if error == nil { done(size) } else { DispatchQueue.global().async { done(nil) } }
        }
        switch registered {
        case .notRunning: return false
        case .landed(let size): done(size)
        case .waiting: break
        }
        return true
    }

    func landed(_ ino: Int64, _ range: Range<Int64>) {
        let (ready, progress) = state.withLock { s -> ([Waiter], MountEvent?) in
            guard var active = s.active[ino] else { return ([], nil) }
            active.ranges.insert(range)
            let (done, waiting) = active.waiters.partitioned { active.ranges.contains($0.range) }
            active.waiters = waiting
            let progress = Self.progressDue(&active)
            s.active[ino] = active
            return (done, progress)
        }
        for w in ready { w.resume(nil) }
        if let progress { observer.event(progress) }
    }
}
