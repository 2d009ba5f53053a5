import Foundation
import ItemModel
import LocalState
import Logging
import ServiceLifecycle
import SyncAPI

extension SyncEngine {
    /// Sends queued local changes to the server, oldest first, for as long as the mount runs.
    public var outbox: some Service { OutboxService(engine: self) }

    enum Outcome {
        /// Sent (or nothing left to send): the entry is gone.
        case done
        /// Try again at once (the file changed while it was sent, or the base was rebased).
        case again
        /// Try again later; `offline` stops the whole pass.
        case later(String, after: Duration, offline: Bool)
        /// A writer has the file open and it was written since the last release or fsync of a
        /// writer: the content goes up once one saves it (which wakes the outbox), never a
        /// snapshot of what a writer may be halfway through (see `uploadableGeneration`).
        case heldForWriter
    }

    /// How the sending of one outbox entry ended; nil when it was gone before it was sent.
    typealias EntryResult = (seq: Int64, ino: Int64, outcome: Outcome?)

    /// One pass over the outbox: every entry that is due, in order. Returns when nothing is due
    /// or the server cannot be reached.
    ///
    /// Uploads of different files whose folders are already on the server are independent:
    /// up to `parallelUploads` requests carrying them are in flight at once, and a new one
    /// starts as soon as any finishes (a sliding window: a slow upload does not hold back the
    /// ones after it), since each spends most of its time waiting on round trips. New small
    /// files next to each other in the queue share one request (`sendBatch`): a folder of
    /// them copied in costs a request and a commit per batch, not per file. Any other entry
    /// waits until nothing is in flight and then goes alone, in its turn.
    func drainOutbox() async {
        guard await containerIsOurs() else { return }
        var skipped: Set<Int64> = []
        // Held for a writer: looked at again whenever the outbox is read, since a release or
        // fsync may have saved the file meanwhile (skipping them for the whole pass made a file
        // closed during a long upload wait for that upload).
        var held: Set<Int64> = []
        var batch: [OutboxEntry] = []
        var offline = false
        // Entries handed to a task: still in the database until their task removes them.
        // For a single upload also its server item: a safe save gives a file's identity to
        // another row (another ino) while the replaced file's upload may still be on its way,
        // and the saved file's upload waits for that answer, whose revision it goes up from.
        var inFlight: [Int64: (ino: Int64, id: ItemID?)] = [:]  // by seq
        var running = 0
        var smallRunning = 0

        func settle(_ results: [EntryResult]) {
            for (seq, ino, outcome) in results {
                inFlight[seq] = nil
                guard let outcome else { continue }
                switch outcome {
                case .done: applyHeldChange(of: ino)
                case .again: skipped.insert(seq)
                case .heldForWriter: held.insert(seq)
                case .later(let why, let delay, let isOffline):
                    deferEntry(seq, ino: ino, why: why, delay: delay, offline: isOffline)
                    skipped.insert(seq)
                    if isOffline {
                        offline = true
                        setConnected(false, error: why)
                    }
                }
            }
        }

        // A struct, not a tuple, for what each task returns: Swift 6.3.1 miscompiles some
        // task groups of tuples with `-O` (one of `(Int, Result<(digest:, size:), any Error>)`
        // handed back garbage, while `-Onone` was right), and the tests run a debug build.
        struct Finished: Sendable {
            let small: Bool
            let results: [EntryResult]
            /// Not an upload: `lookAgain` passed.
            var tick = false
        }
        // The timer of the pending tick, if any: a task of its own, so that it can be stopped
        // alone (cancelling the group would also cancel every upload added after).
        var tick: Task<Void, Never>?
        await withTaskGroup(of: Finished.self) { tasks in
            /// Waits until an upload in flight finishes, or `lookAgain` passes while one is in
            /// flight (then the caller reads the outbox again: a file closed meanwhile must not
            /// wait for a long upload to end). False when nothing is left to wait for.
            func waitForOne() async -> Bool {
                if running > 0 && tick == nil {
                    let timer = Task { _ = try? await Task.sleep(for: Self.lookAgain) }
                    tick = timer
                    tasks.addTask {
                        await timer.value
                        return Finished(small: false, results: [], tick: true)
                    }
                } else if running == 0 {
                    tick?.cancel()  // only the tick is left: no need to sit out its sleep
                }
                guard let finished = await tasks.next() else { return false }
                if finished.tick {
                    tick = nil
                    return true
                }
                running -= 1
                if finished.small { smallRunning -= 1 }
                settle(finished.results)
                return true
            }
            // A connection lost meanwhile may come back to another container: checked again
            // before the next pass sends anything (`setConnected`).
            while !Task.isCancelled && !offline && state.withLock({ $0.containerVerified }) {
                if batch.isEmpty {
                    // A batch per read: a queue of thousands is read once per hundred entries,
                    // not once per entry.
                    do {
                        let now = Self.now()
                        batch = try store.read { r in try r.outbox(limit: 100 + skipped.count + held.count + inFlight.count) }
                            .filter { $0.notBefore <= now && !skipped.contains($0.seq) && inFlight[$0.seq] == nil }
                            .filter { !held.contains($0.seq) || uploadableGeneration($0.ino) != nil }
                    } catch {
                        logger.error("cannot read the outbox", metadata: ["error": "\(error)"])
                        break
                    }
                    if batch.isEmpty {
                        // Nothing new: wait for one in flight (it may queue more), or stop.
                        if await waitForOne() { continue }
                        break
                    }
                }
                let next = batch[0]
                // A full window can only wait for a slot: no need to ask about the next entry.
                let (shape, itemID) = running < Self.parallelUploads && next.op == .content && !inFlight.values.contains { $0.ino == next.ino }
                    ? (try? uploadShape(next, busy: Set(inFlight.values.compactMap(\.id)))) ?? (.dependent, nil) : (.dependent, nil)
                if shape == .smallCreate && smallRunning >= Self.parallelBatches {
                    // New small files queue up behind the batches in flight and leave together
                    // once one is answered: read the outbox again then, to take them all.
                    _ = await waitForOne()
                    batch = []
                    continue
                }
                if shape != .dependent {
                    var group = [batch.removeFirst()]
                    if shape == .smallCreate {
                        let more = (try? smallCreatesFollowing(group[0], in: batch, skipping: Set(inFlight.values.map(\.ino)))) ?? 0
                        group += batch.prefix(more)
                        batch.removeFirst(more)
                    }
                    for entry in group { inFlight[entry.seq] = (entry.ino, shape == .single ? itemID : nil) }
                    running += 1
                    let small = shape == .smallCreate
                    if small { smallRunning += 1 }
                    tasks.addTask { Finished(small: small, results: group.count > 1 ? await self.sendBatch(group) : await self.sendAlone(group, into: [])) }
                } else if running == 0 {
                    settle(await sendAlone([batch.removeFirst()], into: []))
                } else {
                    // The window is full, or the next entry must go alone: wait for a slot.
                    _ = await waitForOne()
                }
            }
            // Offline or cancelled: let what is in flight finish and record how it went.
            while await waitForOne() {}
        }
    }

    /// While uploads are in flight, the outbox is read again this often: entries queued since
    /// (a file saved during a long upload) start in the free slots of the window.
    static let lookAgain: Duration = .milliseconds(100)

    /// Six requests at a time: enough to hide round trips on a fast link, few enough not to
    /// starve the mount's other work on a small machine.
    static let parallelUploads = 6

    /// Requests carrying new small files in flight at once: one. While it is answered the files
    /// a `cp -r` keeps closing collect in the outbox, and the next request takes them all (up to
    /// `SyncProtocol.maxBatchItems`). With six, every close went up in a request of its own or
    /// of two or three, and each request costs a commit, a push to every device and an echo
    /// here, which, on a small machine, is CPU the copy itself was waiting for. (Two measured
    /// the same as one.)
    static let parallelBatches = 1

    static let dedupThreshold: Int64 = 1 << 20

    func runToCompletion(_ entry: OutboxEntry) async -> Outcome {
        var outcome = await run(entry)
        var rounds = 0
        while case .again = outcome, rounds < 10 {
            rounds += 1
            outcome = await run(entry)
        }
        return outcome
    }

    func deferEntry(_ seq: Int64, ino: Int64?, why: String, delay: Duration, offline: Bool) {
        let until = Self.now() + Int64(delay.components.seconds) * 1_000_000_000 + delay.components.attoseconds / 1_000_000_000
        try? store.write { w in
            try w.deferOp(seq, error: why, until: until)
            if !offline, let ino, var item = try w.reader.item(ino) {
                item.uploadError = why
                try w.update(item)
            }
        }
    }

    /// How many entries are being sent, each waiting for the next, up this call chain: a
    /// request may first send what it waits for (its folder's create, the move that frees its
    /// name), and that in turn what it waits for.
    @TaskLocal static var nesting = 0

    /// Deeper than any chain of waits a tree can make (a folder's create waits for its parent's,
    /// at most one per level), so only a loop of waits gets there. A loop this code does not
    /// break ran on one thread without end, its memory growing, and never let the process go;
    /// now it is an error the entry reports, and the entry is tried again later.
    static let maxNesting = 512
    public static let loopOfWaits = "requests wait on one another in a loop"

    func run(_ entry: OutboxEntry) async -> Outcome {
        // Before it is marked started, so that the writer's close joins this entry instead of
        // queueing another (sendContent checks again, race-free).
        if entry.op == .content && uploadableGeneration(entry.ino) == nil { return .heldForWriter }
        guard Self.nesting < Self.maxNesting else {
            logger.error("\(Self.loopOfWaits)", metadata: ["item.ino": "\(entry.ino)", "op": "\(entry.op)"])
            observer.event(MountEvent(kind: "uploadError", path: try? store.read { try $0.path(of: entry.ino) }, detail: Self.loopOfWaits))
            return .later(Self.loopOfWaits, after: .seconds(1), offline: false)
        }
        return await Self.$nesting.withValue(Self.nesting + 1) { await runNested(entry) }
    }

    private func runNested(_ entry: OutboxEntry) async -> Outcome {
        state.withLock { _ = $0.uploading.insert(entry.ino) }
        defer { state.withLock { s in s.uploading.remove(entry.ino); s.uploadProgress[entry.ino] = nil } }
        do {
            try store.write { w in try w.markStarted(entry.seq) }
            let outcome = try await send(entry)
            // An upload's entry goes in the transaction that records its result; others here.
            if case .done = outcome, try store.read({ try $0.outboxEntry(entry.seq) }) != nil {
                try store.write { w in try w.dequeue(entry.seq) }
            }
            return outcome
        } catch let error as RemoteError {
            return error.meansOffline
                ? .later(describe(error), after: .seconds(1), offline: true)
                : .later(describe(error), after: .seconds(5), offline: false)
        } catch {
            return .later("\(error)", after: .seconds(5), offline: false)
        }
    }

    func send(_ entry: OutboxEntry) async throws -> Outcome {
        if entry.op == .delete { return try await sendDelete(entry) }
        guard let item = try store.read({ try $0.item(entry.ino) }) else { return .done }
        if try store.read({ try $0.isExcluded(item.ino) }) { return .done }
        // A child goes up after its folder: send the folder's own create first.
        guard let parentID = try await parentOnServer(item) else {
            return .later("waiting for its folder to reach the server", after: .seconds(1), offline: false)
        }
        switch entry.op {
        case .createFolder:
            if item.revision != nil { return .done }
            let created: ItemMetadata
            do {
                try store.write { w in try w.noteCreateSent(item.ino, parentID: parentID, name: item.name) }
                created = try await remote.createItem(CreateItemRequest(
                    parentID: parentID, name: item.name, kind: .folder, mode: item.mode, created: item.created,
                    modified: item.modified, xattrs: item.xattrs.isEmpty ? nil : item.xattrs, id: item.itemID))
            } catch let RemoteError.refused(code, _, current) where code == .nameExists {
                return try await nameTaken(by: current, for: item.ino)
            } catch let RemoteError.refused(code, _, _) where code == .itemIDTaken {
                return try await adoptLostCreate(item, parentID: parentID)
            }
            // The answer and what changed while it was in flight, in one transaction.
            let followUps = try store.write { w in
                try adoptMetadata(item.ino, created, w)
                try w.forgetSentContents(of: item.ino)
                return try followUpCreate(item, created, w)
            }
            if followUps { outboxSignal.yield() }
            return .done
        case .content:
            return try await sendContent(item, parentID: parentID, seq: entry.seq)
        case .move, .attributes, .xattrs:
            guard let base = item.revision else { return .done }  // its create carries everything
            do {
                let result: ItemMetadata
                switch entry.op {
                case .move: result = try await remote.updateItem(item.itemID, UpdateItemRequest(baseRevision: base, name: item.name, parentID: parentID))
                case .attributes: result = try await remote.updateItem(item.itemID, UpdateItemRequest(baseRevision: base, mode: item.mode, modified: item.modified))
                default: result = try await remote.setXattrs(item.itemID, SetXattrsRequest(baseRevision: base, xattrs: item.xattrs))
                }
                return try adoptMetadata(item.ino, result, sentFrom: base)
            } catch let RemoteError.refused(code, _, current) where code == .revisionConflict && current != nil {
                let current = current!
                // A file whose own edit is not on the server yet, while the server's content
                // moved on from that edit's base: a conflict of content. Rebasing would make the
                // server's revision the edit's base too, and the edit would then go up over the
                // other device's version. The rename or chmod waits with the edit.
                let row = try store.read { try $0.item(item.ino) }
                if let row, row.kind == .file, row.content == .dirty, current.digest != row.serverDigest {
                    return Self.contentConflict(current)
                }
                // Metadata changes apply on top of whatever changed meanwhile: rebase and resend.
                try rebase(item.ino, on: current)
                return .again
            } catch let RemoteError.refused(code, _, current) where code == .nameExists {
                return try await nameTaken(by: current, for: item.ino)
            } catch let RemoteError.refused(code, _, _) where code == .itemNotFound {
                return try resurrectLocal(item.ino)
            } catch let RemoteError.refused(code, _, _) where code == .invalidMove && entry.op == .move {
                return try await keepServerFolder(item)
            }
        case .delete:
            return .done
        }
    }

    func parentOnServer(_ item: LocalItem) async throws -> ItemID? {
        guard let parentIno = item.parent else { return .root }
        if parentIno == LocalItem.rootIno { return .root }
        guard let parent = try store.read({ try $0.item(parentIno) }) else { return nil }
        if parent.revision != nil { return parent.itemID }
        let pending = try store.read { r in try r.queuedEntry(.createFolder, of: parentIno) }
        guard let pending, pending.notBefore <= Self.now() else { return nil }
        // To completion: a create that first had to move a name's holder aside goes at once.
        let outcome = await runToCompletion(pending)
        guard case .done = outcome else { return nil }
        return try store.read { try $0.item(parentIno) }.flatMap { $0.revision != nil ? $0.itemID : nil }
    }

    func sendContent(_ item: LocalItem, parentID: ItemID, seq: Int64) async throws -> Outcome {
        if item.content != .dirty && item.revision != nil { return .done }
        // A write after this (a writer that opens and truncates) changes the generation, and
        // the snapshot is then not sent.
        guard let generation = uploadableGeneration(item.ino) else { return .heldForWriter }
        // Upload a snapshot, never the live cache file: a writer (truncate, another open) may
        // change it at any moment, and what goes up must be one whole version. A small file's
        // snapshot is a copy in memory, sent inline with its create or update (one request);
        // a larger one's is a private copy of the file, uploaded as a blob first.
        let digest: ContentDigest
        let size: Int64
        var inline: Data?
        if let bytes = try cache.readWhole(item.ino, limit: SyncProtocol.maxInlineContent) {
            digest = ContentDigest.of(bytes)
            size = Int64(bytes.count)
            inline = Data(bytes)
        } else {
            let path = try cache.snapshot(item.ino)
            defer { unlink(path) }
            (digest, size) = try Self.hashFile(path)
            state.withLock { $0.uploadProgress[item.ino] = (0, size) }
            // Asking first saves sending content the server has; below 1 MiB sending it costs
            // about what the question does, so smaller files skip the round trip.
            let needed = size < Self.dedupThreshold ? true : try await !remote.hasBlob(digest)
            if needed {
                do {
                    try await remote.uploadBlob(digest, size: size, fromFile: path)
                } catch let RemoteError.refused(code, _, _) where code == .digestMismatch {
                    return .again  // changed while it was being sent: never store a mix
                }
            }
        }
        state.withLock { $0.uploadProgress[item.ino] = (size, size) }
        guard writeGeneration(item.ino) == generation else { return .again }
        var result: ItemMetadata
        do {
            try store.write { w in
                try w.noteContentSent(item.ino, digest: digest)
                if item.revision == nil { try w.noteCreateSent(item.ino, parentID: parentID, name: item.name) }
            }
            if let base = item.revision {
                result = try await remote.updateContent(item.itemID, UpdateContentRequest(
                    baseRevision: base, digest: digest, size: size, modified: item.modified, content: inline))
            } else {
                result = try await remote.createItem(Self.createRequest(item, parentID: parentID, digest: digest, size: size, content: inline))
            }
        } catch let RemoteError.refused(code, _, current) where code == .revisionConflict && current != nil {
            let current = current!
            if current.digest == digest {
                // Our own upload, whose answer was lost: it is on the server already.
                result = current
                return try finishUpload(item, result: result, digest: digest, size: size, generation: generation, seq: seq)
            }
            if current.digest == item.serverDigest {
                // Only metadata changed on the server (a rename, a chmod): both apply.
                try rebase(item.ino, on: current, keepContent: true)
                return .again
            }
            if let theirs = current.digest, try store.read({ try $0.sentContentDigests(of: item.ino) }).contains(theirs) {
                // An earlier version from here, whose answer was lost (the daemon died after the
                // server stored it): not another device's edit. Go up from it.
                try rebase(item.ino, on: current, keepContent: true)
                try store.write { w in
                    guard var row = try w.reader.item(item.ino) else { return }
                    row.serverDigest = theirs
                    try w.update(row)
                }
                return .again
            }
            // The content changed on the server too: never overwrite it. Until conflict
            // versions exist, the upload waits here with the reason in uploadingError.
            return Self.contentConflict(current)
        } catch let RemoteError.refused(code, _, current) where code == .nameExists {
            return try await nameTaken(by: current, for: item.ino)
        } catch let RemoteError.refused(code, _, _) where code == .itemIDTaken {
            return try await adoptLostCreate(item, parentID: parentID)
        } catch let RemoteError.refused(code, _, _) where code == .itemNotFound {
            return try resurrectLocal(item.ino)
        }
        return try finishUpload(item, result: result, digest: digest, size: size, generation: generation, seq: seq)
    }

    /// A create refused because its item ID is taken: this device's earlier create of the item
    /// landed, its answer was lost (a crash, a dropped connection), and the item changed here
    /// since (renamed, or written), so the retry is not the same create and the server does
    /// not answer it with the item. IDs are random and only their creator sends them: the
    /// server's item is that create. The row takes its revision, and what differs goes up as
    /// the changes of an existing item. (Giving the row a new identity instead made it a
    /// conflicted copy of itself, and the server's item never showed here.)
    ///
    /// A file whose server content is none that this device sent in a create was changed by
    /// another device meanwhile: a conflict of content, which never overwrites it.
    func adoptLostCreate(_ item: LocalItem, parentID: ItemID) async throws -> Outcome {
        let current: ItemMetadata
        do {
            current = try await remote.item(item.itemID)
        } catch let RemoteError.refused(code, _, _) where code == .itemNotFound {
            return try resurrectLocal(item.ino)  // created and deleted since: the ID stays taken
        }
        if item.kind == .file, try !store.read({ try $0.sentContentDigests(of: item.ino) }).contains(current.digest ?? .empty) {
            return Self.contentConflict(current)
        }
        let moved = try store.write { w -> [KernelInvalidation] in
            guard var row = try w.reader.item(item.ino), row.itemID == current.id, row.revision == nil else { return [] }
            row.revision = current.revision
            row.serverDigest = current.digest
            // The create is on the server: the error its lost answers left is no longer true.
            row.uploadError = nil
            var localParentID = try row.parent.flatMap { try w.reader.item($0)?.itemID }
            var invalidations: [KernelInvalidation] = []
            if let oldParent = row.parent, let oldParentID = localParentID,
               let place = try serverPlaceToTake(row, parentID: oldParentID, current, w) {
                // Moved by another device after the create landed, and not here since: its
                // place stands (sending this device's back would undo that move).
                invalidations = [.entry(parent: oldParent, name: row.name), .inode(oldParent), .inode(place.parent),
                                 .entry(parent: place.parent, name: place.name), .inode(row.ino)]
                row.parent = place.parent
                row.name = place.name
                localParentID = current.parentID
            }
            try w.update(row)
            try w.forgetSentContents(of: row.ino)
            if row.name != current.name || localParentID != current.parentID { try w.enqueue(.move, ino: row.ino) }
            if row.mode != current.mode || row.modified != current.modified { try w.enqueue(.attributes, ino: row.ino) }
            if row.xattrs != current.xattrs { try w.enqueue(.xattrs, ino: row.ino) }
            return invalidations
        }
        if !moved.isEmpty { observer.invalidate(moved) }
        outboxSignal.yield()
        return .again
    }

    /// The server's place (local folder, name) for an item whose lost create is being adopted,
    /// when it should be taken: the server's place is not where the first create put it
    /// (another device moved the item since), while the row still is (nothing moved it here).
    /// A rename here since goes up instead, as a rename here does against any other device's.
    /// Nil also when the folder is not here or the name is taken in it.
    /// `parentID`: the server id of the row's folder.
    func serverPlaceToTake(_ row: LocalItem, parentID: ItemID, _ current: ItemMetadata, _ w: LocalWriter) throws -> (parent: Int64, name: String)? {
        guard let first = try w.reader.firstCreatePlace(of: row.ino), let serverParentID = current.parentID,
              SentPlace(parentID: serverParentID, name: current.name) != first,
              SentPlace(parentID: parentID, name: row.name) == first,
              let parent = try w.reader.item(id: serverParentID), parent.kind == .folder
        else { return nil }
        if let clash = try w.reader.child(of: parent.ino, named: current.name), clash.ino != row.ino { return nil }
        // Never into itself or below itself here (a local move waiting on this create): that
        // would cut both out of the tree. Its own rename goes up then, as before.
        if try w.reader.isWithin(parent.ino, row.ino) { return nil }
        return (parent.ino, current.name)
    }

    /// Records a successful upload, in one transaction with what changed while it was in
    /// flight and the removal of its entry `seq`: one commit per uploaded file, not three.
    func finishUpload(_ item: LocalItem, result: ItemMetadata, digest: ContentDigest, size: Int64, generation: UInt64, seq: Int64) throws -> Outcome {
        let followUps = try store.write { w in
            try recordUpload(item, result: result, digest: digest, size: size, generation: generation, seq: seq, w)
        }
        if followUps { outboxSignal.yield() }
        setConnected(true, error: nil)
        observer.event(MountEvent(kind: "uploaded", path: try store.read { try $0.path(of: item.ino) }))
        return .done
    }

    /// An upload's result, inside the caller's transaction, unless the item changed identity
    /// meanwhile (a safe save gave it another item's id): then what went up belongs to nobody
    /// and is removed, and the content goes up again under the new identity. True when
    /// something more was queued.
    func recordUpload(_ item: LocalItem, result: ItemMetadata, digest: ContentDigest, size: Int64, generation: UInt64, seq: Int64, _ w: LocalWriter) throws -> Bool {
        try w.dequeue(seq)
        try w.forgetSentContents(of: item.ino)
        guard var row = try w.reader.item(item.ino) else {
            try w.updatePendingDelete(of: result.id, revision: result.revision)
            try passToSuccessor(result, sentFrom: item.revision, w)
            return item.revision == nil ? try followUpCreate(item, result, w) : false
        }
        guard row.itemID == result.id else {
            if try w.reader.hasPendingDelete(of: result.id) {
                try w.updatePendingDelete(of: result.id, revision: result.revision)
            } else {
                try w.enqueue(.delete, ino: item.ino, itemID: result.id, revision: result.revision)
            }
            try w.enqueue(.content, ino: item.ino)
            return true
        }
        row.revision = result.revision
        row.serverDigest = digest
        row.uploadError = nil
        try settleXattrChanges(row, heldByServer: result, w)
        let clean = state.withLock { s in
            guard s.generation(of: item.ino) == generation && row.content == .dirty else { return false }
            if s.openForWriting[item.ino] != nil { s.cleanedWhileOpen.insert(item.ino) }
            s.forgetGenerations(of: item.ino)
            return true
        }
        if clean { row.content = .current }
        row.cachedBytes = max(row.cachedBytes, size)
        try w.update(row)
        // Changed (or its generations forgotten by a close) during the upload: what is in the
        // cache now goes up too. A write's release queues that itself; this covers the rest,
        // so a dirty file is never left with nothing queued (a waiting entry is not doubled).
        var again = false
        if try !clean && row.content == .dirty && !w.reader.isExcluded(item.ino) {
            try w.enqueue(.content, ino: item.ino)
            again = true
        }
        let followUps = item.revision == nil ? try followUpCreate(item, result, w) : false
        return followUps || again
    }

    /// Two devices edited the same base and the server has the other one's: this device's
    /// change waits, retried every 30 s, with the reason in uploadingError.
    static func contentConflict(_ current: ItemMetadata) -> Outcome {
        .later("conflict: the server has a newer version (revision \(current.revision)); this device's edit is kept and not uploaded", after: .seconds(30), offline: false)
    }

    func sendDelete(_ entry: OutboxEntry) async throws -> Outcome {
        guard let id = entry.itemID else { return .done }
        let base: Revision
        if let revision = entry.revision {
            base = revision
        } else {
            // Deleted before its create was answered: delete whatever that create made.
            do {
                base = try await remote.item(id).revision
            } catch let RemoteError.refused(code, _, _) where code == .itemNotFound || code == .containerNotFound {
                return .done
            }
        }
        do {
            let tombstones = try await remote.deleteItem(id, base: base, recursive: false)
            try store.write { w in
                for t in tombstones { try w.addTombstone(t.id, revision: t.revision) }
            }
            return .done
        } catch let RemoteError.refused(code, _, _) where code == .itemNotFound {
            return .done
        } catch let RemoteError.refused(code, _, current) where code == .revisionConflict || code == .folderNotEmpty {
            // Edit (or a new child) versus delete: the edit wins and the item comes back.
            let item: ItemMetadata
            if let current { item = current } else { item = try await remote.item(id) }
            let (inval, pinnedToFetch) = try store.write { w -> ([KernelInvalidation], Bool) in
                var out: [KernelInvalidation] = []
                var events: [MountEvent] = []
                var pinnedToFetch = false
                // Gone from the queue first, or the feed's rule "a deletion is on its way" would
                // keep the item away.
                try w.dequeue(entry.seq)
                try applyLocked(ItemChange(cursor: .start, kind: .upsert, item: item), w, &out, &events, &pinnedToFetch)
                return (out, pinnedToFetch)
            }
            observer.invalidate(inval)
            if pinnedToFetch { maintenanceSignal.yield() }
            observer.event(MountEvent(kind: "conflict", path: item.name, detail: "changed on the server while deleted here; restored"))
            return .done
        }
    }

    /// A create went up with the item's name and place at that moment. If the item was renamed,
    /// moved or deleted while the request was in flight, send that too: the local rename or
    /// delete found no server item to change then.
    /// Inside a transaction; true when something was queued.
    func followUpCreate(_ sent: LocalItem, _ created: ItemMetadata, _ w: LocalWriter) throws -> Bool {
        guard let row = try w.reader.item(sent.ino), row.itemID == created.id else {
            // Deleted meanwhile: its deletion is queued already (see FileSystem.deleteRow).
            if try !w.reader.hasPendingDelete(of: created.id) {
                try w.enqueue(.delete, ino: sent.ino, itemID: created.id, revision: created.revision)
                return true
            }
            return false
        }
        var queued = false
        if row.name != sent.name || row.parent != sent.parent { try w.enqueue(.move, ino: sent.ino); queued = true }
        if row.mode != sent.mode || row.modified != sent.modified { try w.enqueue(.attributes, ino: sent.ino); queued = true }
        if row.xattrs != sent.xattrs { try w.enqueue(.xattrs, ino: sent.ino); queued = true }
        return queued
    }

    /// Records the server's answer: the new revision (and nothing that would undo local edits made since).
    @discardableResult
    func adoptMetadata(_ ino: Int64, _ result: ItemMetadata, sentFrom: Revision? = nil) throws -> Outcome {
        try store.write { w in try adoptMetadata(ino, result, sentFrom: sentFrom, w) }
        return .done
    }

    func adoptMetadata(_ ino: Int64, _ result: ItemMetadata, sentFrom: Revision? = nil, _ w: LocalWriter) throws {
        guard var row = try w.reader.item(ino) else {
            try w.updatePendingDelete(of: result.id, revision: result.revision)
            try passToSuccessor(result, sentFrom: sentFrom, w)
            return
        }
        guard row.itemID == result.id else { return }
        row.revision = result.revision
        try settleXattrChanges(row, heldByServer: result, w)
        try takeServerContent(&row, from: result, keepModified: try w.reader.queuedOps(for: ino).contains(.attributes))
        row.uploadError = nil
        try w.update(row)
    }

    /// A safe save gave the item's identity to another row (see `FileSystem.rename`) while a
    /// request about the replaced file was in flight: that row took the revision the request
    /// was sent from, and takes the one it made now. Otherwise the save would go up from the
    /// older revision and the server would refuse it as a conflict with this device's own edit.
    func passToSuccessor(_ result: ItemMetadata, sentFrom base: Revision?, _ w: LocalWriter) throws {
        guard let base, var successor = try w.reader.item(id: result.id), successor.revision == base else { return }
        successor.revision = result.revision
        successor.serverDigest = result.digest
        try w.update(successor)
    }

    /// Attributes the server now holds as this device does are no longer changes of ours.
    func settleXattrChanges(_ row: LocalItem, heldByServer result: ItemMetadata, _ w: LocalWriter) throws {
        let changed = try w.reader.xattrChanges(of: row.ino)
        if !changed.isEmpty { try w.settleXattrChanges(row.ino, changed.filter { row.xattrs[$0] == result.xattrs[$0] }) }
    }

    static func mergeXattrs(server: [String: Data], local: [String: Data], changedHere: Set<String>) -> [String: Data] {
        var merged = server
        for name in changedHere { merged[name] = local[name] }
        return merged
    }

    /// The server refused this folder's move as a move below itself: another device moved the
    /// folder it was moving into below it first. That move stands (the server's order decides),
    /// so the item goes back to its server folder here, keeping a new name of its own, which
    /// goes up as a rename. The change that the feed held for the other folder (it would have
    /// put both out of the tree) applies then.
    func keepServerFolder(_ item: LocalItem) async throws -> Outcome {
        let current = try await remote.item(item.itemID)
        try rebase(item.ino, on: current, takeServerFolder: true)
        observer.event(MountEvent(
            kind: "conflict", path: try store.read { try $0.path(of: item.ino) },
            detail: "another device moved the folder it was moving into below it first; kept in its folder"))
        applyHeldChanges()
        return .again
    }

    /// `takeServerFolder`: the server's folder wins even over a queued local move, whose name
    /// still goes up (`keepServerFolder`).
    func rebase(_ ino: Int64, on current: ItemMetadata, keepContent: Bool = false, takeServerFolder: Bool = false) throws {
        let inval = try store.write { w -> [KernelInvalidation] in
            guard var item = try w.reader.item(ino) else { return [] }
            var out: [KernelInvalidation] = [.inode(ino)]
            // What changed on the server applies here too, except what a local change still
            // queued will send (the feed skipped those changes while this one waited). The
            // server's name and place win unless a local move is queued; its mode unless a
            // local chmod or touch is; its attributes unless a local change of them is.
            let queued = try w.reader.queuedOps(for: ino)
            let localMove = queued.contains(.move)
            if !queued.contains(.attributes) { item.mode = current.mode }
            if !queued.contains(.xattrs) {
                item.xattrs = current.xattrs
            } else {
                // Name by name: ours for the names changed here and not yet on the server, the
                // server's for every other, so that another device's change of another
                // attribute is kept (a queued send with no such name left sends the server's).
                item.xattrs = Self.mergeXattrs(server: current.xattrs, local: item.xattrs, changedHere: try w.reader.xattrChanges(of: ino))
            }
            // Never below itself here (a local move of a folder above it still queued): that
            // would put both out of the tree.
            if !localMove || takeServerFolder, let parentID = current.parentID, let parent = try w.reader.item(id: parentID),
               try !w.reader.isWithin(parent.ino, ino) {
                let name = localMove ? item.name : current.name
                if try w.reader.child(of: parent.ino, named: name).map({ $0.ino == ino }) ?? true {
                    if let old = item.parent { out.append(.entry(parent: old, name: item.name)) }
                    item.parent = parent.ino
                    item.name = name
                    out.append(.entry(parent: parent.ino, name: name))
                }
            }
            item.revision = current.revision
            // The server's content, unless this row's own is what goes up next: the digest,
            // and the size that a download of it fetches (an older size failed its check).
            if !keepContent { takeServerContent(&item, from: current, keepModified: queued.contains(.attributes)) }
            try w.update(item)
            return out
        }
        observer.invalidate(inval)
    }

    /// The server still has an item under the name because our own deletion of it is queued
    /// behind this request (a safe save replaced it): send that deletion first.
    /// Likewise when the item in the way is one of ours with a queued move away from the name.
    func sendPendingDelete(of id: ItemID?, for ino: Int64) async throws -> Bool {
        guard let id else { return false }
        if let entry = try store.read({ try $0.queuedDelete(of: id) }) {
            if case .done = await run(entry) { return true }
            return false
        }
        guard let blocker = try store.read({ try $0.item(id: id) }),
              let move = try store.read({ try $0.queuedEntry(.move, of: blocker.ino, dueBy: Self.now()) })
        else { return false }
        // To completion: a move that first had to break a cycle (see `waitingMoves`) is sent
        // again at once, and the name it frees serves the waiting request now, not a second later.
        let sent = await Self.$waitingMoves.withValue(Self.waitingMoves.union([ino])) { await runToCompletion(move) }
        if case .done = sent { return true }
        return false
    }

    /// Items whose moves wait, up the call chain, for the move being sent now to free a name.
    /// A move whose name is held by one of them closes a cycle (names swapped locally, as in
    /// `mv a t; mv b a; mv t b`): each item's queued move carries only its final name, so
    /// sending one to free the other's would never end. It was a livelock: two moves sent each
    /// other thousands of times a second and the outbox behind them never drained.
    @TaskLocal static var waitingMoves: Set<Int64> = []

    /// Breaks a cycle of moves: the holder of the name, one of ours whose move waits up the
    /// chain, goes to a temporary name in its folder on the server. That frees the name at once;
    /// the holder's own move stays queued and takes its final name when its turn comes back.
    /// The holder, not the item asking: the holder is on the server for certain (it holds the
    /// name), while the asker may be a new folder whose create is what the cycle waits for.
    func moveAsideOnServer(_ holder: LocalItem, _ current: ItemMetadata) async throws -> Outcome {
        guard let parentID = current.parentID else {
            return .later("waiting for a swapped name to be freed", after: .milliseconds(100), offline: false)
        }
        let result = try await remote.updateItem(
            holder.itemID, UpdateItemRequest(baseRevision: current.revision, name: ConflictNaming.movingName(holder.itemID), parentID: parentID))
        try adoptMetadata(holder.ino, result)
        return .again
    }

    /// The server refused a name because another item holds it there. If that item is one of
    /// ours, our own queued change will free the name: send it (or wait for it). Only an item
    /// this device does not know (another device's) makes this one a conflicted copy.
    func nameTaken(by holder: ItemMetadata?, for ino: Int64) async throws -> Outcome {
        let mine = try holder.flatMap { h in try store.read { try $0.item(id: h.id) } }
        // A cycle: the holder's move waits up the chain for this one, or this request already
        // waits up the chain for the holder's move (the holder moves into this new folder, so
        // its move waits for this folder's create, which waits for its move).
        if let holder, let mine, Self.waitingMoves.contains(mine.ino) || Self.waitingMoves.contains(ino) {
            return try await moveAsideOnServer(mine, holder)
        }
        if try await sendPendingDelete(of: holder?.id, for: ino) { return .again }
        if let id = holder?.id {
            if let mine {
                let queued = try store.read { try $0.queuedOps(for: mine.ino) }.contains(.move)
                // The server holds a newer state of it than this device: another device moved
                // it there, and the feed has not brought that here yet. Sending this device's
                // older name would undo that move; the feed brings it, and makes room for this
                // item (a conflicted copy) if it still wants the name.
                let behind = mine.revision.map { holder?.revision.isNewer(than: $0) ?? false } ?? true
                if !queued && !behind {
                    try store.write { w in try w.enqueue(.move, ino: mine.ino) }
                    outboxSignal.yield()
                }
                return .later(behind ? "waiting for another device's change of the item that holds the name"
                                     : "waiting for a local rename to free the name", after: .milliseconds(100), offline: false)
            }
            if try store.read({ try $0.hasPendingDelete(of: id) || $0.tombstone(of: id) != nil }) {
                return .later("waiting for a local deletion to free the name", after: .milliseconds(100), offline: false)
            }
        }
        try renameAside(ino, from: holder?.name)
        return .again
    }

    /// Gives the item a conflicted-copy name, unless it has already left `refused`, the name
    /// the server refused: another device's item that arrived meanwhile (`makeRoom`) may have
    /// renamed it, and a second suffix would follow the first.
    func renameAside(_ ino: Int64, from refused: String?) throws {
        let inval = try store.write { w -> [KernelInvalidation] in
            guard var item = try w.reader.item(ino), let parent = item.parent else { return [] }
            if let refused, item.name != refused { return [] }
            let old = item.name
            item.name = ConflictNaming.conflictedCopyName(old, device: configuration.deviceName, at: Self.now())
            try w.update(item)
            if item.revision != nil { try w.enqueue(.move, ino: ino) }
            return [.entry(parent: parent, name: old), .entry(parent: parent, name: item.name)]
        }
        guard !inval.isEmpty else { return }
        observer.invalidate(inval)
        observer.event(MountEvent(kind: "conflict", path: nil, detail: "a name was taken on the server; kept as a conflicted copy"))
    }

    func resurrectLocal(_ ino: Int64) throws -> Outcome {
        try store.write { w in
            guard let item = try w.reader.item(ino) else { return }
            try resurrect(item, w)
        }
        return .again
    }

    /// A file that was open for writing when the daemon died has local changes and no queued
    /// upload. Its content may be half-written, so it is never uploaded on its own: it is kept
    /// here, reported in uploadingError, and goes up when it is saved (closed) again.
    ///
    /// So does a file whose queued upload an earlier close made (every close queues one) while
    /// a descriptor stayed open and went on writing: its cache file no longer has the size
    /// that close recorded. (Writes after it that kept the size cannot be told apart; the
    /// content as it is then goes up.)
    ///
    /// Once per engine: the daemon runs it before the mount serves (a file opened meanwhile is
    /// spared it), and the outbox service at its start, for whoever runs the engine without.
    public func recoverUnclosedWrites() {
        guard state.withLock({ s in
            defer { s.recoveredUnclosedWrites = true }
            return !s.recoveredUnclosedWrites
        }) else { return }
        do {
            try store.write { w in
                let grown = try w.reader.dirtyWithUploads().filter { item in cache.size(item.ino).map { $0 != item.size } ?? false }
                // A file open now was opened by this run (the mount may serve before this runs).
                for var item in try w.reader.dirtyWithoutOps().filter({ $0.uploadError == nil }) + grown where !isOpen(item.ino) {
                    if let size = cache.size(item.ino) {
                        item.size = size
                        item.cachedBytes = size
                    }
                    item.uploadError = "the mount stopped while this file was open for writing; it is kept on this device and uploaded when it is saved again"
                    try w.dropUploads(of: item.ino)
                    try w.update(item)
                }
            }
        } catch {
            logger.error("cannot check unclosed writes", metadata: ["error": "\(error)"])
        }
    }

    /// SHA-256 and size of a cache file, read in 1 MiB blocks.
    static func hashFile(_ path: String) throws -> (ContentDigest, Int64) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw EngineError.io("cannot read \(path)", errno) }
        defer { close(fd) }
        return try ContentCache.sha256(of: fd)
    }
}

struct OutboxService: Service {
    let engine: SyncEngine

    func run() async throws {
        engine.recoverUnclosedWrites()
        engine.applyHeldChanges()
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                // Deferred entries come due without a signal: look again every second.
                group.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: .seconds(1))
                        engine.outboxSignal.yield()
                    }
                }
                for await _ in engine.outboxSignals {
                    await engine.drainOutbox()
                }
                group.cancelAll()
            }
        }
    }
}
