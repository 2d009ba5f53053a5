import Foundation
import ItemModel
import LocalState
import SyncAPI

/// New small files travel in batches: `POST …/batch` carries up to `SyncProtocol.maxBatchItems`
/// creates with their content inline, and the answer is recorded in one local transaction.
/// Anything out of the ordinary about one of them (the server refused it, it grew, it changed
/// while being read) sends that one alone afterwards, through the path that handles it.
extension SyncEngine {
    /// How an outbox entry may travel.
    enum UploadShape: Equatable {
        /// It waits for the entries before it (not an upload, or its folder is not on the server yet).
        case dependent
        /// An upload on its own in the window.
        case single
        /// A new file small enough to go inline: it may share a batch with its neighbours.
        case smallCreate
    }

    /// The entry's shape and its item's server identity; `dependent` while a single upload of
    /// that identity (`busy`) is in flight.
    func uploadShape(_ entry: OutboxEntry, busy: Set<ItemID>) throws -> (UploadShape, ItemID?) {
        try store.read { r in
            guard let item = try r.item(entry.ino) else { return (.dependent, nil) }
            return (busy.contains(item.itemID) ? .dependent : try Self.uploadShape(entry, of: item, r), item.itemID)
        }
    }

    /// `item`: the entry's row, as the caller read it (nil when gone).
    static func uploadShape(_ entry: OutboxEntry, of item: LocalItem?, _ r: LocalReader) throws -> UploadShape {
        guard entry.op == .content, let item, let parent = item.parent else { return .dependent }
        if parent != LocalItem.rootIno, try r.item(parent)?.revision == nil { return .dependent }
        let small = item.kind == .file && item.revision == nil && item.size <= Int64(SyncProtocol.maxInlineContent)
        return small && !item.contentOnlyOnServer ? .smallCreate : .single
    }

    /// How many of the entries after `first` (the head of `queue`) may join its batch: the run
    /// of small creates that follows it, within the batch's limits, none of them a file already
    /// in flight (`busy`) or twice in the run.
    func smallCreatesFollowing(_ first: OutboxEntry, in queue: [OutboxEntry], skipping busy: Set<Int64>) throws -> Int {
        try store.read { r in
            var inos: Set<Int64> = [first.ino]
            var bytes = try r.item(first.ino)?.size ?? 0
            var count = 0
            for entry in queue.prefix(SyncProtocol.maxBatchItems - 1) {
                guard !busy.contains(entry.ino), !inos.contains(entry.ino) else { break }
                let item = try r.item(entry.ino)
                guard try Self.uploadShape(entry, of: item, r) == .smallCreate, let size = item?.size,
                      bytes + size <= Int64(SyncProtocol.maxBatchContent)
                else { break }
                inos.insert(entry.ino)
                bytes += size
                count += 1
            }
            return count
        }
    }

    /// One new small file, read and ready to go up.
    struct PreparedCreate {
        var entry: OutboxEntry
        var item: LocalItem
        var generation: UInt64
        var digest: ContentDigest
        var request: CreateItemRequest
    }

    /// Sends `entries` (small creates, see `smallCreatesFollowing`) in one request.
    func sendBatch(_ entries: [OutboxEntry]) async -> [EntryResult] {
        var results: [EntryResult] = []
        var alone: [OutboxEntry] = []
        var prepared: [PreparedCreate] = []
        do {
            // Read again, as a single upload does: an entry may be gone, or its file changed.
            let current = try store.read { r in
                try entries.map { e -> (OutboxEntry?, LocalItem?, ItemID?) in
                    guard let entry = try r.outboxEntry(e.seq) else { return (nil, nil, nil) }
                    let row = try r.item(entry.ino)
                    guard try Self.uploadShape(entry, of: row, r) == .smallCreate, let item = row,
                          item.content == .dirty, try !r.isExcluded(item.ino), let parent = item.parent
                    else { return (entry, nil, nil) }
                    let parentID = parent == LocalItem.rootIno ? ItemID.root : try r.item(parent)?.itemID
                    return (entry, item, parentID)
                }
            }
            // Waiting for a writer (see `sendGuardingLoops`): not marked started, so that the writer's close joins
            // its entry. (Checked again, race-free, below.)
            var waitingNow: Set<Int> = []
            for (index, e) in current.enumerated() {
                guard let entry = e.0, openFiles.uploadableGeneration(entry.ino) == nil else { continue }
                waitingNow.insert(index)
                results.append((entry.seq, entry.ino, .waitsForWriter))
            }
            // Marked before the files are read, as a single upload does: a close from now on
            // queues a new entry instead of joining one whose snapshot is already taken.
            try store.write { w in
                for (index, (entry, _, _)) in current.enumerated() where !waitingNow.contains(index) {
                    if let entry { try w.markStarted(entry.seq) }
                }
            }
            var contentBytes = 0
            for (index, (entry, item, parentID)) in current.enumerated() where !waitingNow.contains(index) {
                guard let entry else {
                    results.append((entries[index].seq, entries[index].ino, nil))
                    continue
                }
                guard let item, let parentID else {
                    alone.append(entry)
                    continue
                }
                guard let generation = openFiles.uploadableGeneration(item.ino) else {
                    results.append((entry.seq, entry.ino, .waitsForWriter))
                    continue
                }
                // A snapshot in memory, never the live file (see uploadSnapshot).
                guard let bytes = try cache.readWhole(item.ino, limit: SyncProtocol.maxInlineContent),
                      contentBytes + bytes.count <= SyncProtocol.maxBatchContent
                else {
                    alone.append(entry)
                    continue
                }
                contentBytes += bytes.count
                let digest = ContentDigest.of(bytes)
                prepared.append(PreparedCreate(
                    entry: entry, item: item, generation: generation, digest: digest,
                    request: Self.createRequest(item, parentID: parentID, digest: digest, size: Int64(bytes.count), content: Data(bytes), device: savingDevice)))
            }
        } catch {
            // The local database or cache failed: each goes alone and meets the error there.
            return await sendOneByOne(entries.filter { e in !results.contains { $0.seq == e.seq } }, into: results)
        }
        // Changed while being read: the single path snapshots it again.
        let (unchanged, changed) = prepared.partitioned { p in openFiles.writeGeneration(p.item.ino) == p.generation }
        alone += changed.map(\.entry)
        prepared = unchanged
        if prepared.isEmpty { return await sendOneByOne(alone, into: results) }

        let inos = prepared.map(\.item.ino)
        openFiles.startedUploading(inos)
        let answers: [Result<ItemMetadata, RemoteError>]
        do {
            defer { openFiles.finishedUploading(inos) }
            let sent = prepared
            let starting = try store.write { w in
                try sent.map { p in
                    try w.noteContentSent(p.item.ino, itemID: p.item.itemID, digest: p.digest)
                    try w.noteCreateSent(p.item.ino, parentID: p.request.parentID, name: p.item.name)
                    return try w.reader.path(of: p.item.ino)
                }
            }
            for path in starting { observer.event(MountEvent(.uploadStarted, path: path)) }
            answers = try await remote.createItems(prepared.map(\.request))
        } catch let error as RemoteError where error.meansOffline {
            let later = Outcome.later(describe(error), after: .seconds(1), offline: true)
            return results + prepared.map { ($0.entry.seq, $0.entry.ino, later) } + alone.map { ($0.seq, $0.ino, nil) }
        } catch {
            // The batch as a whole was refused: each file goes alone and meets its own answer.
            return await sendOneByOne(prepared.map(\.entry) + alone, into: results)
        }

        var created: [(PreparedCreate, ItemMetadata)] = []
        for (p, answer) in zip(prepared, answers) {
            switch answer {
            case .success(let item): created.append((p, item))
            case .failure: alone.append(p.entry)  // sent again alone, where each refusal is handled
            }
        }
        do {
            // The events' paths are read in the same transaction: one, not one per file.
            let (followUps, paths) = try store.write { w in
                let queued = try created.reduce(false) { queued, c in
                    try recordUpload(c.0.item, result: c.1, digest: c.0.digest, size: c.0.request.size ?? 0,
                                     generation: c.0.generation, seq: c.0.entry.seq, w) || queued
                }
                return (queued, created.map { c in try? w.reader.path(of: c.0.item.ino) })
            }
            if followUps { outboxSignal.yield() }
            setConnected(true, error: nil)
            for ((p, _), path) in zip(created, paths) {
                results.append((p.entry.seq, p.entry.ino, .done))
                observer.event(MountEvent(.uploaded, path: path, bytes: p.request.size ?? 0))
            }
        } catch {
            // Not recorded: they stay queued and go again (the server answers a retried create
            // with the item it made).
            let later = Outcome.later("\(error)", after: .seconds(5), offline: false)
            results += created.map { ($0.0.entry.seq, $0.0.entry.ino, later) }
        }
        return await sendOneByOne(alone, into: results)
    }

    /// The create of a new file as it goes up, alone or in a batch.
    /// `device`: the device that saved the content; nil for content this device did not make.
    static func createRequest(_ item: LocalItem, parentID: ItemID, digest: ContentDigest, size: Int64, content: Data?, device: String?) -> CreateItemRequest {
        CreateItemRequest(
            parentID: parentID, name: item.name, kind: .file, digest: digest, size: size, mode: item.mode,
            created: item.created, modified: item.modified, xattrs: item.xattrs.isEmpty ? nil : item.xattrs,
            id: item.itemID, content: content, device: device)
    }

    /// The single path, one after another: for an entry that goes alone, and for those a batch
    /// could not carry. Each is read again first: sent or dropped meanwhile (an earlier entry's
    /// handling may do either), or updated (a deletion's base revision).
    func sendOneByOne(_ entries: [OutboxEntry], into results: [EntryResult]) async -> [EntryResult] {
        var results = results
        for entry in entries {
            guard let current = try? store.read({ try $0.outboxEntry(entry.seq) }) else {
                results.append((entry.seq, entry.ino, nil))
                continue
            }
            results.append((current.seq, current.ino, await sendRetryingAtOnce(current)))
        }
        return results
    }
}
