// Finding and clearing a mount left behind by a crashed daemon, and unmounting in general.
//
// Public API:
//   enum MountRecovery
//     static func clearDeadMount(at:probeTimeout:) throws(FuseError) -> Finding
//     enum Finding   .notMounted, .clearedDeadMount, .liveMount, .unresponsive
//     static func state(at:probeTimeout:) -> MountState   the same probe, changing nothing
//     static func lexicalAbsolutePath(_:) throws(FuseError) -> String   as the mount table names it
//
// Why: after a crash (kill -9) the mount stays, and every access returns ENOTCONN until
// someone runs `fusermount3 -u`; mounting again on top would hide the dead mount but leave it
// stacked underneath. (`auto_unmount` would remove it on crash, but then the directory looks
// empty to sync and backup tools, which is worse.)
//
// Threads: blocking; call before `FuseMount.mount`, from any thread. The probe of a FUSE mount
// runs on its own short-lived thread so that a hung (not dead) daemon costs at most
// `probeTimeout`; that thread then stays blocked in the kernel until the hung mount goes away.

import Glibc
import MountInfo
import Synchronization

public enum MountRecovery {
    public enum Finding: Sendable, Hashable {
        /// Nothing is mounted at the path.
        case notMounted
        /// A FUSE mount whose daemon is gone (ENOTCONN) was unmounted.
        case clearedDeadMount
        /// Something answers at the path (a running daemon, or a non-FUSE file system): left
        /// alone.
        case liveMount
        /// A FUSE mount did not answer within the timeout (a hung or stopped daemon): left
        /// alone, since it may still come back with unsaved data.
        case unresponsive
    }

    /// Looks at what is mounted at `path` and unmounts it if it is a dead FUSE mount
    /// (lazily, if a process still has it as its working directory or open).
    ///
    /// The probe is `statfs`, not `stat`: statfs always goes to the daemon, while `stat` of the
    /// mount root can be answered from attributes the kernel cached before the crash (FuseKit
    /// mounts use long attribute timeouts), and would then report a dead mount as alive.
    /// (Measured: after the connection was aborted, `stat` of the root and of a cached file
    /// still succeeded; `statfs` failed with ENOTCONN.)
    public static func clearDeadMount(
        at path: String, probeTimeout: Duration = .seconds(5)
    ) throws(FuseError) -> Finding {
        let target = try lexicalAbsolutePath(path)
        switch state(at: target, probeTimeout: probeTimeout) {
        case .notMounted: return .notMounted
        case .live: return .liveMount
        case .unresponsive: return .unresponsive
        case .dead:
            do {
                try Unmounter.unmount(target, lazy: false)
            } catch where error.errno == EBUSY {
                try Unmounter.unmount(target, lazy: true)
            }
            return .clearedDeadMount
        }
    }

    public enum MountState: Sendable, Hashable {
        case notMounted, dead, live, unresponsive
    }

    /// What is mounted at the absolute `path`, probed as `clearDeadMount` does, and left as it is.
    public static func state(at path: String, probeTimeout: Duration = .seconds(5)) -> MountState {
        guard let fsType = mountedFileSystemType(at: path) else { return .notMounted }
        guard fsType == "fuse" || fsType.hasPrefix("fuse.") || fsType == "fuseblk" else { return .live }
        switch probeStatfs(path, timeout: probeTimeout) {
        case nil: return .unresponsive
        case ENOTCONN?: return .dead
        // 0, or any other answer (EACCES from someone else's mount…): something is alive.
        case _?: return .live
        }
    }

    /// The absolute path of `path` without touching its last component, which may be a dead
    /// mount whose every access fails: the parent is resolved with realpath, the last
    /// component is appended as is.
    public static func lexicalAbsolutePath(_ path: String) throws(FuseError) -> String {
        var components = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard let last = components.popLast() else { return "/" }
        let parent = (path.hasPrefix("/") ? "/" : "./") + components.joined(separator: "/")
        guard let resolved = realpath(parent, nil) else {
            throw FuseError(.probe, errno: errno, "cannot resolve \(parent)")
        }
        defer { free(resolved) }
        let base = String(cString: resolved)
        return (base == "/" ? "" : base) + "/" + last
    }

    /// The type of the topmost file system mounted exactly at `path`, or nil.
    static func mountedFileSystemType(at path: String) -> String? {
        // Later lines are mounted on top of earlier ones: the last match is the visible one.
        MountInfo.table().last { $0.mountpoint == path }?.type
    }

    /// Runs statfs(path) on its own thread: its errno (0 on success), or nil after `timeout`.
    private static func probeStatfs(_ path: String, timeout: Duration) -> Int32? {
        let probe = StatfsProbe(path: path)
        let context = Unmanaged.passRetained(probe).toOpaque()
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { context in
            let probe = Unmanaged<StatfsProbe>.fromOpaque(context!).takeRetainedValue()
            probe.run()
            return nil
        }, context)
        guard created == 0 else {
            Unmanaged<StatfsProbe>.fromOpaque(context).release()
            // Without a thread, probe inline: a dead mount answers at once.
            probe.run()
            return probe.result.load(ordering: .acquiring)
        }
        pthread_detach(thread)
        return probe.wait(timeout: timeout)
    }
}

/// One statfs call whose result is handed over through a semaphore.
private final class StatfsProbe: @unchecked Sendable {
    // @unchecked: `path` is immutable, `result` atomic, and `semaphore` is a sem_t, which is
    // made for exactly this cross-thread hand-off.
    let path: String
    /// errno of statfs, or -1 while it runs.
    let result = Atomic<Int32>(-1)
    private let semaphore: UnsafeMutablePointer<sem_t>

    init(path: String) {
        self.path = path
        semaphore = .allocate(capacity: 1)
        sem_init(semaphore, 0, 0)
    }

    deinit {
        sem_destroy(semaphore)
        semaphore.deallocate()
    }

    func run() {
        // statvfs is glibc's wrapper around the statfs system call (Glibc does not export
        // statfs itself); it does not look at the mount any other way.
        var buf = statvfs()
        let code: Int32 = statvfs(path, &buf) == 0 ? 0 : errno
        result.store(code, ordering: .releasing)
        sem_post(semaphore)
    }

    func wait(timeout: Duration) -> Int32? {
        // sem_timedwait takes an absolute CLOCK_REALTIME deadline.
        var deadline = timespec()
        clock_gettime(CLOCK_REALTIME, &deadline)
        let (seconds, attoseconds) = timeout.components
        let nanoseconds = Int(deadline.tv_nsec) + Int(attoseconds / 1_000_000_000)
        deadline.tv_sec += Int(seconds) + nanoseconds / 1_000_000_000
        deadline.tv_nsec = nanoseconds % 1_000_000_000
        while sem_timedwait(semaphore, &deadline) != 0 {
            if errno != EINTR { return nil }
        }
        return result.load(ordering: .acquiring)
    }
}

/// Unmounting a path: directly as root, through the setuid `fusermount3` otherwise.
enum Unmounter {
    static func unmount(_ path: String, lazy: Bool) throws(FuseError) {
        if geteuid() == 0 {
            // Flag 0 fails with EBUSY while the mount is in use; MNT_DETACH detaches now and
            // finishes when the last user leaves.
            if umount2(path, lazy ? Int32(MNT_DETACH) : 0) == 0 { return }
            throw FuseError(.unmount, errno: errno, "umount2(\(path))")
        }
        // -q: libfuse's own invocation also silences fusermount3's messages; the exit status
        // is what matters.
        let arguments = ["fusermount3", "-u", "-q"] + (lazy ? ["-z"] : []) + ["--", path]
        let status = runProcess(arguments)
        guard status == 0 else {
            // fusermount3 does not report the errno; EBUSY is by far the usual cause.
            throw FuseError(.unmount, errno: lazy ? 0 : EBUSY, "\(arguments.joined(separator: " ")) exited with \(status)")
        }
    }

    /// Runs a program from PATH and waits for it: its exit status, or -1 if it could not run
    /// or was killed.
    static func runProcess(_ arguments: [String]) -> Int32 {
        let cStrings = arguments.map { strdup($0) }
        defer { cStrings.forEach { free($0) } }
        var argv = cStrings + [nil]
        var pid = pid_t()
        let spawned = argv.withUnsafeMutableBufferPointer { argv in
            posix_spawnp(&pid, arguments[0], nil, nil, argv.baseAddress!, environ)
        }
        guard spawned == 0 else { return -1 }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 {
            if errno != EINTR { return -1 }
        }
        // WIFEXITED / WEXITSTATUS are macros Swift cannot import.
        let exited = status & 0x7f == 0
        return exited ? (status >> 8) & 0xff : -1
    }
}
