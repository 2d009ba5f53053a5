import CacheFiles
import ControlSocket
import Foundation
import FuseKit
import ItemModel
import LocalState
import Logging
import Metrics
import Prometheus
import OpenFiles
import ServiceLifecycle
import SyncAPI
import SyncClient
import SyncEngine
import Synchronization
import VFS

/// Everything a mount needs to run.
public struct MountConfiguration: Sendable {
    public var mountpoint: String
    public var serverURL: String
    public var token: String
    public var account: String
    public var container: ContainerID
    public var cacheDirectory: String
    public var deviceName: String
    public var cacheLimit: Int64?
    public var logLevel: Logger.Level
    /// The log file's size at which it is set aside (`DaemonLog`).
    public var logSize: Int64 = DaemonLog.defaultSize
    /// Let other users in (FUSE admits only the mounting user otherwise); modes still apply.
    public var allowOther: Bool
    /// A newer token for the same server and account, when the server refuses this one (see
    /// `SyncHTTPClient.freshToken`).
    public var freshToken: (@Sendable () -> String?)?
    /// An address this same server had before (the embedded server's, before it moved to a
    /// socket of its own): a cache kept under it is taken over, unsent changes and all.
    public var formerServerURL: String?
    /// How the server's certificate is checked (`ServerTrust`).
    public var trust = ServerTrust()

    public init(mountpoint: String, serverURL: String, token: String, account: String, container: ContainerID,
                cacheDirectory: String, deviceName: String, cacheLimit: Int64?, logLevel: Logger.Level = .info, allowOther: Bool = false) {
        self.mountpoint = mountpoint
        self.serverURL = serverURL
        self.token = token
        self.account = account
        self.container = container
        self.cacheDirectory = cacheDirectory
        self.deviceName = deviceName
        self.cacheLimit = cacheLimit
        self.logLevel = logLevel
        self.allowOther = allowOther
    }

    /// The account's own corner of the cache: another account's data is never shown, because
    /// it lives in another folder (docs/SEMANTICS.md, "Decisions", the cache folder).
    public var accountDirectory: String {
        let key = ContentDigest.of(Array("\(serverURL)|\(account)|\(container.rawValue)".utf8)).hex.prefix(16)
        return "\(cacheDirectory)/accounts/\(key)"
    }

    public var controlSocket: String { "\(cacheDirectory)/control.sock" }

    /// Where a daemon started by `ubiq mount` logs (see `DaemonLog`).
    public var logFile: String { "\(cacheDirectory)/daemon.log" }
}

extension SyncHTTPClient: RemoteStore {}

public enum MountDaemonError: Error, CustomStringConvertible {
    case alreadyMounted(String)
    case cacheInUse(String)
    case setup(String)
    public var description: String {
        switch self {
        case .alreadyMounted(let p): "\(p) is already mounted (run `ubiq unmount \(p)` first)"
        case .cacheInUse(let c): "another ubiq daemon still uses the cache folder \(c) (it is finishing an unmount, or serves another mount)"
        case .setup(let why): why
        }
    }
}

/// The composition root of a mount: wires the layers, mounts, runs every service under one
/// ServiceGroup until the mount goes away or a signal arrives, then unmounts.
public enum MountDaemon {
    public static func run(_ configuration: MountConfiguration, onReady: @Sendable () -> Void = {}) async throws {
        var logger = Logger(label: "ubiq.mount")
        logger.logLevel = configuration.logLevel
        let fm = FileManager.default
        try fm.createDirectory(atPath: configuration.cacheDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        // One daemon per cache folder: two would send the same outbox twice. A daemon that is
        // still finishing an unmount holds it for a moment; the lock goes with its process.
        let cacheLock = try await lockCacheFolder(configuration.cacheDirectory)
        defer { close(cacheLock) }
        // Under the lock: no daemon uses the former cache while it moves.
        try adoptFormerCache(configuration)
        let identity = await AccountFolders.identity(configuration)
        try AccountFolders.arrange(configuration, identity: identity)
        try fm.createDirectory(atPath: configuration.accountDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        switch try MountRecovery.clearDeadMount(at: configuration.mountpoint) {
        case .notMounted: break
        case .clearedDeadMount: logger.notice("cleared the mount left by a daemon that died", metadata: ["mount.path": "\(configuration.mountpoint)"])
        case .liveMount, .unresponsive: throw MountDaemonError.alreadyMounted(configuration.mountpoint)
        }

        Self.raiseOpenFileLimit()
        let store = try LocalStore(path: configuration.accountDirectory + "/state.sqlite")
        // Written only when they change: a daemon that died on a full cache volume must mount
        // again (so that files can be removed), and a commit then fails.
        let meta = ["server": configuration.serverURL, "account": configuration.account, "container": configuration.container.rawValue]
        if try store.read({ r in try meta.contains { try r.meta($0.key) != $0.value } }) {
            try store.write { w in for (key, value) in meta { try w.setMeta(key, value) } }
        }
        // The root folder is the mounting user's, as every item from the server is: a cache
        // made its row with uid 0, and an ordinary user could then write nothing into their
        // own mount. So is the versions folder. Written only when it differs, for the same
        // reason as the meta above.
        for folder in try store.read({ r in [try r.item(LocalItem.rootIno), try r.versionsFolder()].compactMap { $0 } })
        where folder.uid != getuid() || folder.gid != getgid() {
            var owned = folder
            owned.uid = getuid()
            owned.gid = getgid()
            try store.write { try $0.update(owned) }
        }
        let client = SyncHTTPClient(baseURL: configuration.serverURL, token: configuration.token, container: configuration.container,
                                    freshToken: configuration.freshToken, trust: configuration.trust)
        let events = EventFanOut()
        let mountBox = Mutex<FuseMount?>(nil)
        let listings = FolderListings()
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        let metrics = MountMetrics(registry: registry)
        let invalidator = KernelInvalidator(events: events, listings: listings, metrics: metrics, logger: logger) { mountBox.withLock { $0?.notifier } }
        let cache = try ContentCache(directory: configuration.accountDirectory + "/content")
        let openFiles = OpenFiles()
        let engine = SyncEngine(
            store: store, remote: client, cache: cache, openFiles: openFiles,
            configuration: EngineConfiguration(deviceName: configuration.deviceName, cacheLimit: configuration.cacheLimit),
            observer: invalidator, logger: logger)
        var heldIdentity = try store.read { try $0.accountIdentity() }
        if heldIdentity == nil, let identity {
            try store.write { try $0.setAccountIdentity(identity) }
            heldIdentity = identity
        }
        if AccountFolders.noteShown(configuration, identity: heldIdentity) { engine.noteAccountChange() }
        let fs = FileSystem(content: engine, openFiles: openFiles, store: store, cache: cache, logger: logger, listings: listings)

        var options = MountOptions()
        options.fsName = "ubiq"
        options.subtype = "ubiq"
        options.allowOther = configuration.allowOther
        // Before the mount serves: a file opened meanwhile would be spared the check.
        engine.recoverUnclosedWrites()
        engine.dropLeftoverContent()
        let mount: FuseMount
        do {
            mount = try FuseMount.mount(at: configuration.mountpoint, options: options, handler: FuseBridge(fs: fs, failures: FailureLog(logger: logger)), observer: metrics)
        } catch {
            throw MountDaemonError.setup("cannot mount \(configuration.mountpoint): \(error)")
        }
        mountBox.withLock { $0 = mount }

        unlink(configuration.controlSocket)
        let watcher = MountWatcher(mount: mount, events: events, logger: logger)
        let shares = ShareControl(links: client, fs: fs, engine: engine, serverURL: configuration.serverURL)
        let control = ControlServer(engine: engine, shares: shares, fs: fs, configuration: configuration, events: events, metrics: metrics) { watcher.requestUnmount() }
        let services: [any Service] = [
            watcher, engine.changeFeed, engine.outbox, engine.keyValueSender, engine.maintenance, invalidator, DaemonLog(path: configuration.logFile, limit: configuration.logSize),
            control.makeApplication(socketPath: configuration.controlSocket, logger: logger),
        ]
        let group = ServiceGroup(configuration: .init(
            services: services.map { .init(service: $0, successTerminationBehavior: .gracefullyShutdownGroup, failureTerminationBehavior: .gracefullyShutdownGroup) },
            gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        MountRegistry.register(mountpoint: mount.mountpoint, cacheDirectory: configuration.cacheDirectory)
        defer { MountRegistry.unregister(mountpoint: mount.mountpoint) }
        onReady()
        do {
            try await group.run()
        } catch {
            engine.downloads.cancelAll()
            throw error
        }
        engine.downloads.cancelAll()
        await client.shutdown()
        do { try store.checkpoint() } catch { logger.notice("cannot checkpoint the index", metadata: ["error": "\(error)"]) }
    }

    /// Takes the cache folder's lock, waiting up to 10 s for a daemon that is exiting.
    static func lockCacheFolder(_ directory: String) async throws -> Int32 {
        let fd = open(directory + "/daemon.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw MountDaemonError.setup("cannot open \(directory)/daemon.lock: \(String(cString: strerror(errno)))") }
        let deadline = ContinuousClock.now + .seconds(10)
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK || errno == EINTR, ContinuousClock.now < deadline else {
                close(fd)
                throw MountDaemonError.cacheInUse(directory)
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        return fd
    }
}

/// Ends the service group when the mount goes away (`ubiq unmount`, `fusermount3 -u`), and
/// unmounts when the group is asked to stop (a signal).
final class MountWatcher: Service, Sendable {
    let mount: FuseMount
    let events: EventFanOut
    let logger: Logger
    init(mount: FuseMount, events: EventFanOut, logger: Logger) {
        self.mount = mount
        self.events = events
        self.logger = logger
    }

    func requestUnmount() {
        do { try mount.unmount() } catch {
            // Busy (a shell sits in it): detach now, the kernel finishes when it is left.
            try? mount.unmount(lazy: true)
        }
    }

    func run() async throws {
        await withGracefulShutdownHandler {
            _ = await mount.waitUntilEnded()
            events.finishAll()
        } onGracefulShutdown: {
            self.requestUnmount()
        }
    }
}

extension MountDaemon {
    /// The cache kept under `formerServerURL`, moved to where this address looks for it, unless
    /// this address has one already. The server (its data folder, and so the container) is the
    /// same, so the revisions and cursor in it stay true.
    static func adoptFormerCache(_ configuration: MountConfiguration) throws {
        guard let formerURL = configuration.formerServerURL else { return }
        var former = configuration
        former.serverURL = formerURL
        let fm = FileManager.default
        guard fm.fileExists(atPath: former.accountDirectory), !fm.fileExists(atPath: configuration.accountDirectory) else { return }
        guard rename(former.accountDirectory, configuration.accountDirectory) == 0 else {
            throw MountDaemonError.setup("cannot move the cache \(former.accountDirectory) to \(configuration.accountDirectory): \(String(cString: strerror(errno)))")
        }
    }

    /// Every open file of the mount and every running download holds a descriptor here; the
    /// soft limit a desktop session gives (often 1,024) is far below the hard one, and running
    /// out failed unrelated opens with EIO. Raised to the hard limit, as servers do.
    static func raiseOpenFileLimit() {
        var limit = rlimit()
        let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
        guard getrlimit(resource, &limit) == 0, limit.rlim_cur < limit.rlim_max else { return }
        limit.rlim_cur = limit.rlim_max
        _ = setrlimit(resource, &limit)
    }
}
