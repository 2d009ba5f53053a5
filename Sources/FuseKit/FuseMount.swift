// Mounting, the request loop and unmounting.
//
// Public API:
//   struct MountOptions        fsName, subtype, allowOther, maxThreads, maxReadahead,
//                              securityXattrs, debug (default_permissions is always on)
//   final class FuseMount
//     static func mount(at:options:handler:observer:) throws(FuseError) -> FuseMount
//     func unmount(lazy:) throws(FuseError)
//     func waitUntilEnded() async -> LoopEnd
//     var end: LoopEnd?               nil while the loop runs
//     var connection: ConnectionInfo? what INIT negotiated; nil until the kernel sent INIT
//     let notifier: KernelNotifier
//     let mountpoint: String
//   enum LoopEnd                .unmounted, .failed(errno:)
//   struct ConnectionInfo
//   struct FuseError
//
// Threads:
//   - `mount` runs on the caller's thread and returns once the kernel mount exists. Requests
//     that arrive before the loop answers INIT wait in the kernel; nothing is lost.
//   - The loop runs on a thread FuseKit creates ("fuse-loop", all signals blocked), which
//     starts up to `maxThreads` libfuse worker threads; the handler runs on those.
//   - `unmount` may be called from any thread except a FUSE worker (it can wait for
//     outstanding writeback, which those threads serve). It blocks for the umount call (or
//     for `fusermount3` when not root).
//   - `waitUntilEnded` may be awaited from any task, any number of times.
//
// How stopping works: `unmount` unmounts in the kernel (umount2 as root, `fusermount3 -u`
// otherwise). The kernel then aborts the connection, every worker's read of /dev/fuse fails
// with ENODEV, libfuse marks the session exited and the loop returns. The alternative —
// fuse_session_exit + fuse_session_unmount from another thread — does not work well in 3.14:
// the exit flag alone does not wake the loop thread (it sleeps in sem_wait until a worker
// posts), and fuse_session_unmount closes and resets the session's fd while workers and
// pending replies are still using it.
//
// Lifetime of the libfuse session (`SessionCore.users`, an atomic count): the running loop,
// every unanswered reply token and every notification in progress each hold one use. The
// session is unmounted/closed and freed (`fuse_session_unmount` + `fuse_session_destroy`) by
// whichever of them lets go last — never while a reply may still write to /dev/fuse, so a
// late reply cannot land in a reused file descriptor. Dropping a `FuseMount` does not
// unmount: the loop keeps running until `unmount` or an external `fusermount3 -u`.
//
// Guards: `users` is atomic (no lock); `SessionCore.state` (a Mutex) guards the loop end,
// waiters and connection info. No lock is held while calling libfuse or the handler.

import CFuse3
import Glibc
import Synchronization

/// How to mount. `default_permissions` is always on: the kernel checks the caller against the
/// mode bits (98.1% of pjdfstest with it vs 90.4% without, for libfuse's passthrough example).
public struct MountOptions: Sendable, Hashable {
    /// The "device" shown in /proc/mounts and `df`.
    public var fsName = "ubiq"
    /// The type becomes `fuse.<subtype>` in /proc/mounts.
    public var subtype = "ubiq"
    /// Let other users into the mount. Non-root mounters need `user_allow_other` in
    /// /etc/fuse.conf.
    public var allowOther = false
    /// Upper bound on libfuse worker threads. 4: on a 2-vCPU machine few threads win, because
    /// cross-CPU wake-ups cost 20–100 µs against ~8 µs for a same-CPU round trip; the handler
    /// is expected to answer slow requests from tasks, so threads are never parked on I/O.
    public var maxThreads = 4
    /// Readahead FuseKit asks for in INIT, in bytes; 1 MiB is the largest FUSE request (256
    /// pages). The kernel keeps the smaller of this and what it offered, which is its bdi
    /// default of 128 KiB on kernel 6.18 (see `ConnectionInfo.kernelMaxReadahead`), so today
    /// this cannot raise readahead, only lower it. That is just as well: 1 MiB read requests
    /// no longer fit libfuse's splice pipe (1 MiB max), and `ReadReply.file` then falls back
    /// to pread + copy, measured 2x slower than splicing 128 KiB requests.
    public var maxReadahead = 1 << 20
    public var securityXattrs = SecurityXattrPolicy.unsupported
    /// libfuse prints every request and reply to stderr.
    public var debug = false

    public init() {}

    /// The `-o` list for fuse_session_new. Values are escaped because libfuse splits on ","
    /// and treats "\" as the escape character.
    var optionList: String {
        func escaped(_ value: String) -> String {
            var out = ""
            for ch in value {
                if ch == "," || ch == "\\" { out.append("\\") }
                out.append(ch)
            }
            return out
        }
        var list = ["default_permissions", "fsname=" + escaped(fsName), "subtype=" + escaped(subtype)]
        if allowOther { list.append("allow_other") }
        return list.joined(separator: ",")
    }
}

/// Why the request loop stopped.
public enum LoopEnd: Sendable, Hashable {
    /// The file system was unmounted (by `unmount`, `fusermount3 -u`, `umount`) or the
    /// connection was aborted.
    case unmounted
    /// libfuse gave up: e.g. EPROTO when INIT failed, or a read error on /dev/fuse.
    case failed(errno: Int32)
}

/// What the kernel and FuseKit agreed on in INIT. For logs and tests.
public struct ConnectionInfo: Sendable, Hashable {
    public var protocolMajor: UInt32
    public var protocolMinor: UInt32
    /// Largest write request, in bytes.
    public var maxWrite: UInt32
    /// Readahead the kernel offered before FuseKit set its own.
    public var kernelMaxReadahead: UInt32
    /// Readahead FuseKit asked for.
    public var maxReadahead: UInt32
    /// Replies from a file descriptor are spliced (FUSE_CAP_SPLICE_WRITE).
    public var spliceReplies: Bool
    /// The kernel sends readdirplus (FUSE_CAP_READDIRPLUS).
    public var readdirplus: Bool
    /// Raw FUSE_CAP_* bits: what the kernel can do and what was enabled.
    public var capable: UInt32
    public var wanted: UInt32
}

/// A failure to mount or unmount.
public struct FuseError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Operation: Sendable, Hashable {
        case createSession, mount, startLoop, unmount, probe
    }
    public var operation: Operation
    /// The errno, when one is known (0 otherwise; libfuse then printed the reason to stderr).
    public var errno: Int32
    public var detail: String

    public init(_ operation: Operation, errno: Int32, _ detail: String) {
        self.operation = operation
        self.errno = errno
        self.detail = detail
    }

    public var description: String {
        errno == 0 ? "\(operation): \(detail)" : "\(operation): \(detail): \(String(cString: strerror(errno)))"
    }
}

/// A mounted file system whose requests go to a `FileSystemHandler`.
public final class FuseMount: Sendable {
    /// Absolute path, symlinks resolved.
    public let mountpoint: String
    /// Invalidation and cache-fill notifications for this mount.
    public let notifier: KernelNotifier
    let core: SessionCore

    private init(mountpoint: String, core: SessionCore) {
        self.mountpoint = mountpoint
        self.core = core
        notifier = KernelNotifier(core: core)
    }

    /// Mounts `handler` at `path` (an existing directory) and starts the request loop.
    /// Clear a mount left by a crashed daemon first with `MountRecovery.clearDeadMount`.
    public static func mount(
        at path: String, options: MountOptions = MountOptions(), handler: some FileSystemHandler, observer: (any RequestObserver)? = nil
    ) throws(FuseError) -> FuseMount {
        guard let resolved = realpath(path, nil) else {
            throw FuseError(.mount, errno: errno, "cannot resolve \(path)")
        }
        let mountpoint = String(cString: resolved)
        free(resolved)

        let core = SessionCore(handler: handler, options: options, observer: observer)
        guard let session = createSession(core: core, options: options) else {
            throw FuseError(.createSession, errno: 0, "fuse_session_new rejected -o \(options.optionList)")
        }
        guard fuse_session_mount(session, mountpoint) == 0 else {
            let code = errno
            fuse_session_destroy(session)
            throw FuseError(.mount, errno: code, "fuse_session_mount(\(mountpoint)) failed")
        }
        core.session = session

        // The loop thread owns one retain of `core` until the loop returns.
        let context = Unmanaged.passRetained(core).toOpaque()
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { context in
            let core = Unmanaged<SessionCore>.fromOpaque(context!).takeRetainedValue()
            core.runLoop()
            return nil
        }, context)
        guard created == 0 else {
            Unmanaged<SessionCore>.fromOpaque(context).release()
            fuse_session_unmount(session)
            fuse_session_destroy(session)
            core.session = nil
            throw FuseError(.startLoop, errno: created, "pthread_create failed")
        }
        pthread_detach(thread)
        return FuseMount(mountpoint: mountpoint, core: core)
    }

    private static func createSession(core: SessionCore, options: MountOptions) -> OpaquePointer? {
        // argv[0] is a program name that libfuse skips; every other argument must be an option
        // libfuse knows, or fuse_session_new fails.
        var arguments = ["fusekit", "-o", options.optionList]
        if options.debug { arguments.append("-d") }
        let cStrings = arguments.map { strdup($0) }
        defer { cStrings.forEach { free($0) } }
        var argv = cStrings + [nil]
        var ops = makeOperations()
        return argv.withUnsafeMutableBufferPointer { argv in
            var args = fuse_args(argc: Int32(arguments.count), argv: argv.baseAddress, allocated: 0)
            let session = fuse_session_new(
                &args, &ops, MemoryLayout<fuse_lowlevel_ops>.size, Unmanaged.passUnretained(core).toOpaque())
            // Frees only what libfuse allocated when it rewrote the argument list.
            fuse_opt_free_args(&args)
            return session
        }
    }

    /// Unmounts; the loop then ends on its own (`waitUntilEnded`). Fails with EBUSY while a
    /// process uses the mount, unless `lazy`, which detaches it now and lets the kernel finish
    /// when the last user leaves (the loop keeps serving those users until then). Does nothing
    /// if the mount is already gone.
    ///
    /// Also call it after the loop ended by itself: when the connection was aborted
    /// (`umount -f`, /sys/fs/fuse/connections/N/abort) the dead kernel mount stays until
    /// someone unmounts it, and libfuse does not (it takes the abort for an unmount).
    public func unmount(lazy: Bool = false) throws(FuseError) {
        if core.end != nil {
            // Only touch what is still recognisably ours: after the loop ended, the path may
            // have been unmounted and mounted again by someone else.
            let ours = core.options.subtype.isEmpty ? "fuse" : "fuse." + core.options.subtype
            guard MountRecovery.mountedFileSystemType(at: mountpoint) == ours else { return }
        }
        do {
            try Unmounter.unmount(mountpoint, lazy: lazy)
        } catch where error.errno == EINVAL {
            // "Not a mount point": someone else unmounted it; the loop is ending already.
        }
    }

    /// Returns when the request loop has stopped. The session itself is freed once every
    /// reply token has been answered too.
    public func waitUntilEnded() async -> LoopEnd {
        await core.waitUntilEnded()
    }

    /// nil while the loop runs.
    public var end: LoopEnd? { core.end }

    /// What INIT negotiated; nil until the kernel sent INIT.
    public var connection: ConnectionInfo? { core.state.withLock { $0.connection } }
}

/// State shared by the loop thread, the FUSE worker threads, reply tokens and the notifier.
final class SessionCore: @unchecked Sendable {
    // @unchecked: `session` is written before this object is shared (before the loop thread
    // starts and the notifier is handed out) and in `teardown`, after the last use; every
    // other field is immutable, atomic or inside a Mutex.

    let handler: any FileSystemHandler
    let options: MountOptions
    let observer: (any RequestObserver)?
    /// The libfuse session; see the lifetime rule at the top of the file.
    var session: OpaquePointer?

    /// Uses of `session`: 1 for the running loop + 1 per unanswered request + 1 per
    /// notification in progress. Whoever brings it to 0 tears the session down.
    private let users = Atomic<Int>(1)

    struct State {
        var end: LoopEnd?
        var waiters: [CheckedContinuation<LoopEnd, Never>] = []
        var connection: ConnectionInfo?
    }
    let state = Mutex(State())

    init(handler: any FileSystemHandler, options: MountOptions, observer: (any RequestObserver)?) {
        self.handler = handler
        self.options = options
        self.observer = observer
    }

    var end: LoopEnd? { state.withLock { $0.end } }

    /// Current number of uses (for tests: 0 means the session has been freed).
    var activeUses: Int { users.load(ordering: .acquiring) }

    /// A request arrived. Relaxed is enough: the loop's own use keeps the count above 0 while
    /// requests arrive, so this can never revive a torn-down session.
    func requestStarted() {
        users.wrappingAdd(1, ordering: .relaxed)
    }

    /// Takes a use for a notification, unless the session is already gone.
    func notificationStarted() -> Bool {
        var current = users.load(ordering: .relaxed)
        while current > 0 {
            let (exchanged, original) = users.compareExchange(
                expected: current, desired: current + 1, ordering: .acquiring)
            if exchanged { return true }
            current = original
        }
        return false
    }

    /// A request was answered, a notification finished, or the loop returned.
    func useEnded() {
        // acquiringAndReleasing: the last one out must see every other user's writes to the
        // session before destroying it.
        if users.wrappingSubtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
            teardown()
        }
    }

    private func teardown() {
        guard let session else { return }
        self.session = nil
        // After the kernel unmount this only closes /dev/fuse (libfuse sees POLLERR); after a
        // loop failure it also unmounts.
        fuse_session_unmount(session)
        fuse_session_destroy(session)
    }

    /// Body of the "fuse-loop" thread.
    func runLoop() {
        cfuse3_set_thread_name("fuse-loop")
        // Block every signal here so that libfuse's workers (which inherit this mask) and this
        // thread are never picked for process-directed signals; the application decides how
        // to handle SIGINT/SIGTERM (by calling `unmount`).
        var all = sigset_t()
        sigfillset(&all)
        pthread_sigmask(SIG_BLOCK, &all, nil)

        let config = fuse_loop_cfg_create()
        fuse_loop_cfg_set_max_threads(config, UInt32(max(1, options.maxThreads)))
        // No fuse_loop_cfg_set_idle_threads: its default (-1, never destroy idle threads) is
        // the right one and other values make libfuse churn threads.
        let result = fuse_session_loop_mt(session, config)
        fuse_loop_cfg_destroy(config)
        // The loop resets the "exited" flag on return; set it again so replies that arrive
        // after the unmount fail quietly instead of printing "fuse: writing device".
        fuse_session_exit(session)

        let end: LoopEnd = result == 0 ? .unmounted : .failed(errno: abs(result))
        let waiters = state.withLock { state in
            state.end = end
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(returning: end) }
        useEnded()
    }

    func waitUntilEnded() async -> LoopEnd {
        await withCheckedContinuation { continuation in
            let end: LoopEnd? = state.withLock { state in
                if let end = state.end { return end }
                state.waiters.append(continuation)
                return nil
            }
            if let end { continuation.resume(returning: end) }
        }
    }

    /// libfuse's `init` callback, on a worker thread, before any other request.
    func negotiate(_ conn: UnsafeMutablePointer<fuse_conn_info>) {
        let capable = conn.pointee.capable
        let offered = conn.pointee.max_readahead
        conn.pointee.max_readahead = UInt32(clamping: options.maxReadahead)
        // Splice replies from cache files instead of copying them through user space; libfuse
        // does not enable this by default.
        conn.pointee.want |= capable & UInt32(FUSE_CAP_SPLICE_WRITE)
        // On by default because readdirplus is implemented; stated so it survives changes.
        conn.pointee.want |= capable & UInt32(FUSE_CAP_READDIRPLUS)
        // libfuse turns HANDLE_KILLPRIV on by default, which makes the file system responsible
        // for clearing setuid/setgid bits on write, truncate and chown. Off, the kernel does it
        // and the handler just sees the resulting mode in an ordinary setattr.
        conn.pointee.want &= ~UInt32(FUSE_CAP_HANDLE_KILLPRIV)
        let wanted = conn.pointee.want
        let info = ConnectionInfo(
            protocolMajor: conn.pointee.proto_major, protocolMinor: conn.pointee.proto_minor,
            maxWrite: conn.pointee.max_write, kernelMaxReadahead: offered,
            maxReadahead: conn.pointee.max_readahead,
            spliceReplies: wanted & UInt32(FUSE_CAP_SPLICE_WRITE) != 0,
            readdirplus: wanted & UInt32(FUSE_CAP_READDIRPLUS) != 0,
            capable: capable, wanted: wanted)
        state.withLock { $0.connection = info }
    }
}
