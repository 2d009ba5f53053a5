import ItemModel
import LocalState
import Logging
import ServiceLifecycle

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
        case waitsForWriter
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
        // Waiting for a writer: looked at again whenever the outbox is read, since a release or
        // fsync may have saved the file meanwhile (skipping them for the whole pass made a file
        // closed during a long upload wait for that upload).
        var waitingForWriters: Set<Int64> = []
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
                case .waitsForWriter: waitingForWriters.insert(seq)
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
                        batch = try store.read { r in try r.outbox(limit: 100 + skipped.count + waitingForWriters.count + inFlight.count) }
                            .filter { $0.notBefore <= now && !skipped.contains($0.seq) && inFlight[$0.seq] == nil }
                            .filter { !waitingForWriters.contains($0.seq) || openFiles.uploadableGeneration($0.ino) != nil }
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
                    tasks.addTask { Finished(small: small, results: group.count > 1 ? await self.sendBatch(group) : await self.sendOneByOne(group, into: [])) }
                } else if running == 0 {
                    settle(await sendOneByOne([batch.removeFirst()], into: []))
                } else {
                    // The window is full, or the next entry must go alone: wait for a slot.
                    _ = await waitForOne()
                }
            }
            // Offline or cancelled: let what is in flight finish and record how it went.
            while await waitForOne() {}
        }
        applyHeldChanges(onlySettled: true)
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

    func deferEntry(_ seq: Int64, ino: Int64?, why: String, delay: Duration, offline: Bool) {
        let until = Self.now() + Int64(delay.components.seconds) * 1_000_000_000 + delay.components.attoseconds / 1_000_000_000
        let failed = try? store.write { w -> String? in
            try w.deferOp(seq, error: why, until: until)
            guard !offline, let ino, var item = try w.reader.item(ino) else { return nil }
            let again = item.uploadError == why
            item.uploadError = why
            try w.update(item)
            // Once per reason, not at every retry of a wait.
            return again ? nil : try w.reader.path(of: ino)
        }
        if let failed { observer.event(MountEvent(.uploadFailed, path: failed, detail: why)) }
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
