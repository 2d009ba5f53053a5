// The VFS suite's harness: a FileSystem over a real SyncEngine, LocalStore and cache folder,
// talking to the server's own rules (SyncService) in process through TestSupport's
// FaultInjectingRemote. No FUSE, no HTTP.
//
// Rules:
//   - No sleeping and hoping: conditions are polled with `eventually` until a deadline.
//   - The engine's services run only inside `running(_:_:)`, which cancels them on the way out;
//     each service runs at most once per engine (its wake-up stream has one consumer).
//   - Every test closes its harness (`defer { h.close() }`): gates are opened and the temp
//     folder is removed.

import CacheFiles
import Foundation
import ItemModel
import LocalState
import Logging
import OpenFiles
import SyncAPI
import SyncClient
import SyncEngine
import Synchronization
import Testing
import TestSupport
import VFS

let rootIno = LocalItem.rootIno

/// The name bytes the kernel would pass.
func n(_ name: String) -> [UInt8] { Array(name.utf8) }

func sha(_ bytes: [UInt8]) -> ContentDigest { ContentDigest.of(bytes) }

/// Deterministic bytes of a given length, different per `seed`.
func pattern(_ count: Int, seed: UInt8 = 1) -> [UInt8] {
    (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed) &* 7 &+ ($0 >> 8)) }
}

/// Hears everything the engine tells the mount daemon.
final class RecordingObserver: MountObserver {
    let state = Mutex<(invalidations: [KernelInvalidation], events: [MountEvent])>(([], []))

    func invalidate(_ invalidations: [KernelInvalidation]) { state.withLock { $0.invalidations += invalidations } }
    func event(_ event: MountEvent, keep: Bool) { state.withLock { $0.events.append(event) } }

    var events: [MountEvent] { state.withLock { $0.events } }
    var invalidations: [KernelInvalidation] { state.withLock { $0.invalidations } }
}

extension MountEvent {
    /// This device's change met another's: settled by itself, or kept as a conflict version.
    var isConflict: Bool { kind == .reconciled || kind == .conflictAppeared }
}

/// STYLE 11: one suite, many setups. The local database as the daemon has it (a WAL file with
/// `synchronous = FULL`) and in memory; the semantics must not depend on it.
enum StoreSetup: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case sqliteFile, sqliteMemory
    var testDescription: String { rawValue }
}

/// Where the harness's server runs: `ubiq-server`'s rules in this process (`InMemoryServer`),
/// or a real `ubiq-server` reached over HTTP by `SyncHTTPClient`. A selection of the suite's
/// cases runs on both; fault injection wraps either.
enum ServerSetup: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case inProcess, liveServer
    var testDescription: String { rawValue }
}

// As the mount daemon (the composition root) declares it; this suite composes its own parts.
extension SyncHTTPClient: RemoteStore {}

/// One `ubiq-server` for the suite's live cases, started on first use, with one account; each
/// harness gets a container of its own. The server stops when this test process ends (its
/// standard input, which only this process holds, closes).
enum LiveServer {
    static let password = "vfs-suite-password"
    static let started = Task { () throws -> (server: ServerProcess, token: String) in
        let server = try await ServerProcess.start()
        try await server.addAccount("vfs", password: password)
        return (server, try await SyncHTTPClient.login(server: server.baseURL, user: "vfs", password: password).token)
    }

    /// The device's connection to a new container, and a second one for the test's view.
    static func connect() async throws -> FaultInjectingRemote {
        let (server, token) = try await started.value
        let container = try ContainerID("vfs-\(UUID().uuidString)")
        let device = SyncHTTPClient(baseURL: server.baseURL, token: token, container: container)
        let view = SyncHTTPClient(baseURL: server.baseURL, token: token, container: container)
        return FaultInjectingRemote(wrapping: device, server: ServerView(view))
    }
}

struct Harness: Sendable {
    enum EngineService: Hashable, Sendable {
        case changeFeed, outbox, maintenance, keyValues
    }

    let directory: TempDirectory
    let remote: FaultInjectingRemote
    let observer: RecordingObserver
    let store: LocalStore
    let engine: SyncEngine
    let fs: FileSystem

    /// - Parameter inMemoryDatabase: a private in-memory database instead of a WAL file with
    ///   `synchronous = FULL`; for long operation sequences, where an fsync per commit would
    ///   dominate (the machine may have two cores shared by every test running in parallel).
    init(_ setup: StoreSetup, cacheLimit: Int64? = nil) async throws {
        try await self.init(cacheLimit: cacheLimit, inMemoryDatabase: setup == .sqliteMemory)
    }

    init(_ server: ServerSetup) async throws {
        switch server {
        case .inProcess: try await self.init()
        case .liveServer: try await self.init(remote: LiveServer.connect())
        }
    }

    init(cacheLimit: Int64? = nil, remote: FaultInjectingRemote? = nil, inMemoryDatabase: Bool = false, directory: TempDirectory? = nil) async throws {
        self.directory = try directory ?? TempDirectory("ubiq-vfs")
        let remote = if let remote { remote } else { try await FaultInjectingRemote.inMemory() }
        self.remote = remote
        observer = RecordingObserver()
        store = inMemoryDatabase ? try LocalStore(inMemory: ()) : try LocalStore(path: self.directory.path + "/state.sqlite")
        // As after a first contact with the server: the identity token is known.
        if try store.read({ try $0.accountIdentity() }) == nil {
            let identity = try await remote.server.connection.whoami().identity
            try store.write { try $0.setAccountIdentity(identity) }
        }
        let cache = try ContentCache(directory: self.directory.path + "/content")
        let logger = Logger(label: "ubiq.vfs-tests") { _ in SwiftLogNoOpLogHandler() }
        let openFiles = OpenFiles()
        engine = SyncEngine(
            store: store, remote: remote, cache: cache, openFiles: openFiles,
            configuration: EngineConfiguration(deviceName: "test-device", cacheLimit: cacheLimit),
            observer: observer, logger: logger)
        fs = FileSystem(content: engine, openFiles: openFiles, store: store, cache: cache, logger: logger)
    }

    /// A new daemon on the same database, cache folder and server, as after a restart (or a
    /// crash: nothing is flushed or closed first). Stop this harness's services before.
    func restarted(cacheLimit: Int64? = nil) async throws -> Harness {
        try await Harness(cacheLimit: cacheLimit, remote: remote, directory: directory)
    }

    func close() {
        remote.releaseAll()
        directory.remove()
        // HTTP clients must be shut down before they go; the engine may still hold this one.
        if let device = remote.base as? SyncHTTPClient, let view = remote.server.connection as? SyncHTTPClient {
            Task {
                await device.shutdown()
                await view.shutdown()
            }
        }
    }

    /// Runs the given engine services around `body`, then cancels them.
    func running<T>(_ services: Set<EngineService> = [.changeFeed, .outbox, .maintenance], _ body: () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: Void.self) { group in
            let engine = self.engine
            for service in services {
                switch service {
                case .changeFeed: group.addTask { try await engine.changeFeed.run() }
                case .outbox: group.addTask { try await engine.outbox.run() }
                case .maintenance: group.addTask { try await engine.maintenance.run() }
                case .keyValues: group.addTask { try await engine.keyValueSender.run() }
                }
            }
            do {
                let result = try await body()
                group.cancelAll()
                return result
            } catch {
                group.cancelAll()
                // A call held at a gate does not end on cancellation, and the group waits for
                // every service: a failed test would hang instead of failing.
                remote.releaseAll()
                throw error
            }
        }
    }

    // MARK: Local state

    func local(_ ino: Int64) throws -> LocalItem? { try store.read { try $0.item(ino) } }

    func outbox() throws -> [OutboxEntry] { try store.read { try $0.outbox(limit: 10_000) } }

    func pending(_ ino: Int64) throws -> [OutboxOp] { try outbox().filter { $0.ino == ino }.map(\.op) }

    /// The change-log cursor the engine has applied.
    func appliedCursor() throws -> String? { engine.appliedCursor?.rawValue }

    /// True once the engine has applied every change the server has.
    func caughtUp() async throws -> Bool { try await appliedCursor() == remote.latestCursor().rawValue }

    /// Waits until nothing is queued and every change the server has is applied here.
    func settled(_ what: String = "the upload and its echo") async throws {
        var seen = ""
        try await eventually("\(what) (last seen: \(seen))") {
            let (applied, latest, queued) = (try appliedCursor(), try await remote.latestCursor().rawValue, try outbox())
            seen = "applied \(applied ?? "nothing") of \(latest); queued \(queued.map { "\($0.ino): \($0.op)" })"
            return applied == latest && queued.isEmpty
        }
    }

    /// The names a listing of the folder gives, as the kernel reads them.
    func children(_ ino: Int64 = rootIno) throws -> [String] {
        let handle = try fs.openDirectory(ino)
        defer { fs.closeDirectory(handle) }
        return try fs.readDirectory(handle, from: 0).map(\.name)
    }

    /// Resolves `/a/b` through `lookup`, as the kernel does.
    func ino(_ path: String) throws -> Int64? {
        var current = rootIno
        for component in path.split(separator: "/") {
            guard let found = try fs.lookup(parent: current, name: n(String(component))) else { return nil }
            current = found.ino
        }
        return current
    }

    func requireIno(_ path: String) throws -> Int64 {
        guard let ino = try ino(path) else { throw TestSupportError("no \(path) in the mount") }
        return ino
    }

    /// Waits for `path` (made on the server, by another device) to reach the mount; its inode.
    func appeared(_ path: String) async throws -> Int64 {
        try await eventually("\(path) to appear") { try ino(path) != nil }
        return try requireIno(path)
    }

    /// An xattr's value as text; nil when absent (ENODATA).
    func xattr(_ ino: Int64, _ name: String) throws -> String? {
        do {
            return String(decoding: try fs.getXattr(ino, name: name), as: UTF8.self)
        } catch .noAttribute {
            return nil
        }
    }

    func downloadingStatus(_ ino: Int64) throws -> String? { try xattr(ino, "user.ubiq.downloadingStatus") }

    // MARK: File operations as a program does them

    /// create + write + release: returns the new file's inode.
    @discardableResult
    func writeNewFile(_ name: String, in parent: Int64 = rootIno, _ content: [UInt8]) throws -> Int64 {
        let opened = try fs.createFile(parent: parent, name: n(name), mode: 0o644, flags: O_CREAT | O_WRONLY | O_EXCL, uid: getuid(), gid: getgid())
        defer { fs.release(opened.handle) }
        if !content.isEmpty { _ = try fs.write(opened.handle, offset: 0, data: content) }
        return opened.attributes.ino
    }

    /// open(O_WRONLY | O_TRUNC) + write + release.
    func overwrite(_ ino: Int64, _ content: [UInt8]) async throws {
        let opened = try await fs.open(ino, flags: O_WRONLY | O_TRUNC)
        defer { fs.release(opened.handle) }
        if !content.isEmpty { _ = try fs.write(opened.handle, offset: 0, data: content) }
    }

    @discardableResult
    func mkdir(_ name: String, in parent: Int64 = rootIno) throws -> Int64 {
        try fs.makeDirectory(parent: parent, name: n(name), mode: 0o755, uid: getuid(), gid: getgid()).ino
    }

    /// open(O_RDONLY) + read everything + release, through the entry points the FUSE bridge calls.
    func read(_ ino: Int64) async throws -> [UInt8] {
        let opened = try await openAsTheKernel(ino, flags: O_RDONLY)
        defer { fs.release(opened.handle) }
        return try await readAll(opened.handle, size: opened.attributes.size)
    }

    /// The open the FUSE bridge makes: answered at once, by the thread that lands the first
    /// bytes, or from a task.
    func openAsTheKernel(_ ino: Int64, flags: Int32) async throws(FSError) -> FileSystem.Opened {
        let answer = await withCheckedContinuation { continuation in
            fs.open(ino, flags: flags) { continuation.resume(returning: $0) }
        }
        return try answer.get()
    }

    func readAll(_ handle: UInt64, size: Int64) async throws -> [UInt8] {
        var out: [UInt8] = []
        while Int64(out.count) < size {
            let chunk = try await readRange(handle, offset: Int64(out.count), size: 128 * 1024)
            if chunk.isEmpty { break }
            out += chunk
        }
        return out
    }

    /// One read through the entry point the FUSE bridge calls, its bytes taken in the answer
    /// (as the kernel copies them when the reply goes out).
    func readRange(_ handle: UInt64, offset: Int64, size: Int) async throws -> [UInt8] {
        let taken: Result<[UInt8], any Error> = await withCheckedContinuation { continuation in
            fs.read(handle, offset: offset, size: size) { answer in
                continuation.resume(returning: answer.mapError { $0 as any Error }.flatMap(Self.bytes))
            }
        }
        return try taken.get()
    }

    static func bytes(_ ready: FileSystem.ReadResult) -> Result<[UInt8], any Error> {
        switch ready {
        case .bytes(let bytes):
            return .success(bytes)
        case .file(let fd, let at, let count):
            var buffer = [UInt8](repeating: 0, count: count)
            let got = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, count, off_t(at)) }
            guard got >= 0 else { return .failure(TestSupportError("pread failed: errno \(errno)")) }
            return .success(Array(buffer.prefix(got)))
        }
    }

    /// The mount's tree as `readdir` + `read` show it, by path: the same shape as `try await remote.tree()`.
    func localTree(readContent: Bool = true) async throws -> [String: ServerView.TreeEntry] {
        var out: [String: ServerView.TreeEntry] = [:]
        func walk(_ folder: Int64, _ prefix: String) async throws {
            let handle = try fs.openDirectory(folder)
            let entries = Array(try fs.readDirectory(handle, from: 0))
            fs.closeDirectory(handle)
            for entry in entries {
                let path = prefix + "/" + entry.name
                if entry.attributes.kind == .folder {
                    out[path] = .init(kind: .folder, digest: nil)
                    try await walk(entry.attributes.ino, path)
                } else {
                    out[path] = .init(kind: .file, digest: readContent ? sha(try await read(entry.attributes.ino)) : nil)
                }
            }
        }
        try await walk(rootIno, "")
        return out
    }
}

// MARK: Errors as errno

/// The errno a failing operation answers; nil when it succeeds. An error that is not an
/// `FSError` (the VFS must never throw one) answers -1.
func errnoOf<T>(_ body: () throws -> T) -> Int32? {
    do {
        _ = try body()
        return nil
    } catch let error as FSError {
        return error.errno
    } catch {
        Issue.record("not an FSError: \(error)")
        return -1
    }
}

func errnoOf<T>(_ body: () async throws -> T) async -> Int32? {
    do {
        _ = try await body()
        return nil
    } catch let error as FSError {
        return error.errno
    } catch {
        Issue.record("not an FSError: \(error)")
        return -1
    }
}

func errnoName(_ code: Int32?) -> String {
    guard let code else { return "success" }
    return String(cString: strerror(code))
}

// MARK: Deadlines

/// Runs `operation` and fails if it does not finish within `limit`. Unlike a task group, this
/// returns at the deadline even when the operation ignores cancellation (a hung download wait).
func within<T: Sendable>(_ limit: Duration, _ what: String, _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
    let race = DeadlineRace<T>()
    return try await withCheckedThrowingContinuation { continuation in
        race.start(continuation, limit: limit, what: what, operation)
    }
}

/// The first of the operation and the timer to finish resumes the caller; the other is ignored.
final class DeadlineRace<T: Sendable>: Sendable {
    let state = Mutex<(continuation: CheckedContinuation<T, Error>?, timer: Task<Void, Never>?, work: Task<Void, Never>?)>((nil, nil, nil))

    func start(_ continuation: CheckedContinuation<T, Error>, limit: Duration, what: String, _ operation: @escaping @Sendable () async throws -> T) {
        state.withLock { $0.continuation = continuation }
        let work = Task {
            do { self.finish(.success(try await operation())) } catch { self.finish(.failure(error)) }
        }
        let timer = Task {
            do { try await Task.sleep(for: limit) } catch { return }
            self.finish(.failure(TestSupportError("\(what) did not finish within \(limit)")))
        }
        state.withLock { $0.work = work; $0.timer = timer }
    }

    func finish(_ result: Result<T, Error>) {
        let (c, timer, work) = state.withLock { s in
            defer { s.continuation = nil }
            return (s.continuation, s.timer, s.work)
        }
        guard let c else { return }
        if case .success = result { timer?.cancel() } else { work?.cancel() }
        c.resume(with: result)
    }
}

/// The tests compose the engine and the file system themselves, as the daemon does.
extension SyncEngine: ContentSource {}
