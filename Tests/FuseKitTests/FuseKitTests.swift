// FuseKit on a real mount: MemoryFS served through /dev/fuse and exercised with ordinary
// tools (ls, cat, stat, mv, mkdir, rm, getfattr/setfattr, python3 for renameat2), each run in
// a child process with a deadline.
//
// Needs /dev/fuse and permission to mount (root, or fusermount3). The recovery test needs
// root because it builds a dead mount by hand with mount(2).

import Foundation
@testable import FuseKit
import Synchronization
import Testing

@Suite(.timeLimit(.minutes(1)))
struct FuseKitTests {
    @Test func lookupReaddirplusAndRead() async throws {
        let fs = MemoryFS()
        fs.addFile("hello.txt", contents: Array("hello, fuse\n".utf8))
        let dir = fs.addDirectory("docs")
        fs.addFile("inner.txt", in: dir, contents: Array("inner\n".utf8))

        try await withMount(fs) { m async throws in
            let listing = try await run(["ls", "-l", m.path])
            #expect(listing.succeeded, "\(listing.stderr)")
            #expect(listing.stdout.contains("hello.txt"))
            #expect(listing.stdout.contains("docs"))
            // ls -l stats every entry; readdirplus already gave the kernel each entry, so no
            // lookup was needed.
            #expect(fs.counters.readdirplusCalls >= 1)
            #expect(fs.counters.lookups == 0)

            let cat = try await run(["cat", m.at("hello.txt"), m.at("docs/inner.txt")])
            #expect(cat.stdout == "hello, fuse\ninner\n")

            let stat = try await run(["stat", "-c", "%s %F %a %h", m.at("hello.txt"), m.at("docs")])
            #expect(stat.stdout == "12 regular file 644 1\n0 directory 755 2\n")

            let df = try await run(["stat", "-f", "-c", "%S %b %f", m.path])
            #expect(df.stdout == "4096 1048576 524288\n")

            let info = try #require(m.mount.connection)
            #expect(info.maxReadahead == 1 << 20)
            #expect(info.readdirplus)
        }
    }

    /// Hears what the kernel asked and how each request ended.
    final class Heard: RequestObserver {
        let answers = Mutex<[(RequestKind, UInt64, Int32)]>([])
        func answered(_ kind: RequestKind, nanoseconds: UInt64, errno: Int32) { answers.withLock { $0.append((kind, nanoseconds, errno)) } }
        func count(_ kind: RequestKind, errno: Int32) -> Int { answers.withLock { $0.filter { $0.0 == kind && $0.2 == errno }.count } }
    }

    @Test func anObserverHearsEachRequestWithItsTimeAndErrno() async throws {
        let fs = MemoryFS()
        fs.addFile("hello.txt", contents: Array("hello\n".utf8))
        fs.addFile("inner.txt", in: fs.addDirectory("full"), contents: [])
        let heard = Heard()
        try await withMount(fs, observer: heard) { m async throws in
            #expect(try await run(["cat", m.at("hello.txt")]).stdout == "hello\n")
            #expect(try await run(["rmdir", m.at("full")]).succeeded == false)
        }
        #expect(heard.count(.open, errno: 0) >= 1 && heard.count(.read, errno: 0) >= 1)
        #expect(heard.count(.rmdir, errno: ENOTEMPTY) == 1, "the failure with its errno")
        #expect(heard.answers.withLock { $0.allSatisfy { $0.1 < 10_000_000_000 } }, "times are durations, not clock readings")
    }

    @Test func writeCreateTruncateAndSetattr() async throws {
        let fs = MemoryFS()
        try await withMount(fs) { m async throws in
            let file = m.at("new.txt")
            #expect(try await sh("printf 'hello world' > '\(file)'").succeeded)
            #expect(fs.counters.creates == 1)
            #expect(try await run(["cat", file]).stdout == "hello world")

            // O_TRUNC arrives in open (atomic O_TRUNC), then the new bytes as writes.
            #expect(try await sh("printf 'bye' > '\(file)'").succeeded)
            #expect(try await run(["cat", file]).stdout == "bye")

            #expect(try await sh("printf '!!' >> '\(file)'").succeeded)
            #expect(try await run(["cat", file]).stdout == "bye!!")

            #expect(try await run(["truncate", "-s", "2", file]).succeeded)
            #expect(try await run(["chmod", "600", file]).succeeded)
            #expect(try await run(["touch", "-m", "-d", "@1000000000.5", file]).succeeded)
            let stat = try await run(["stat", "-c", "%s %a %.9Y", file])
            #expect(stat.stdout == "2 600 1000000000.500000000\n")
            #expect(try await run(["cat", file]).stdout == "by")

            // UTIME_NOW: the handler's own clock, so mtime moves past the explicit time.
            #expect(try await run(["touch", file]).succeeded)
            let touched = try await run(["stat", "-c", "%Y", file])
            #expect((Int(touched.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0) > 1_000_000_000)

            // A larger write: several requests, read back intact.
            #expect(try await sh("head -c 3000000 /dev/urandom > /tmp/fusekit-src-$$ && cp /tmp/fusekit-src-$$ '\(m.at("big"))' && cmp /tmp/fusekit-src-$$ '\(m.at("big"))'; s=$?; rm -f /tmp/fusekit-src-$$; exit $s", seconds: 30).succeeded)
        }
    }

    @Test func directoriesRenameAndLinks() async throws {
        let fs = MemoryFS()
        fs.addFile("a", contents: Array("A".utf8))
        fs.addFile("b", contents: Array("B".utf8))
        try await withMount(fs) { m async throws in
            #expect(try await run(["mkdir", m.at("dir")]).succeeded)
            #expect(try await run(["mv", m.at("a"), m.at("dir/a2")]).succeeded)
            #expect(try await run(["cat", m.at("dir/a2")]).stdout == "A")
            #expect(!(try await run(["stat", m.at("a")]).succeeded))

            let rmdir = try await run(["rmdir", m.at("dir")])
            #expect(!rmdir.succeeded)
            #expect(rmdir.stderr.contains("not empty"))
            #expect(try await run(["rm", m.at("dir/a2")]).succeeded)
            #expect(try await run(["rmdir", m.at("dir")]).succeeded)
            #expect(try await run(["ls", "-a", m.path]).stdout == ".\n..\nb\n")

            #expect(try await run(["ln", "-s", "b", m.at("link")]).succeeded)
            #expect(try await run(["readlink", m.at("link")]).stdout == "b\n")
            #expect(try await run(["cat", m.at("link")]).stdout == "B")
            let hardLink = try await run(["ln", m.at("b"), m.at("hard")])
            #expect(!hardLink.succeeded)
            #expect(hardLink.stderr.contains("not permitted"))

            // renameat2 flags reach the handler: RENAME_NOREPLACE (1) and RENAME_EXCHANGE (2).
            // No coreutils tool on Debian 12 exposes RENAME_EXCHANGE, so python3's ctypes
            // calls renameat2; without python3 this part is skipped.
            guard try await run(["python3", "-c", "pass"]).succeeded else { return }
            #expect(try await sh("printf C > '\(m.at("c"))'").succeeded)
            let renameat2 = """
                import ctypes, os, sys
                libc = ctypes.CDLL(None, use_errno=True)
                r = libc.renameat2(-100, sys.argv[1].encode(), -100, sys.argv[2].encode(), int(sys.argv[3]))
                print(0 if r == 0 else ctypes.get_errno())
                """
            let noReplace = try await run(["python3", "-c", renameat2, m.at("b"), m.at("c"), "1"])
            #expect(noReplace.stdout == "\(EEXIST)\n")
            let exchange = try await run(["python3", "-c", renameat2, m.at("b"), m.at("c"), "2"])
            #expect(exchange.stdout == "0\n")
            #expect(try await run(["cat", m.at("b"), m.at("c")]).stdout == "CB")
            #expect(fs.counters.renameFlags.contains([.noReplace]))
            #expect(fs.counters.renameFlags.contains([.exchange]))
        }
    }

    @Test func extendedAttributes() async throws {
        let fs = MemoryFS()
        fs.addFile("f")
        try await withMount(fs) { m async throws in
            let file = m.at("f")
            #expect(try await run(["setfattr", "-n", "user.color", "-v", "blue", file]).succeeded)
            #expect(try await run(["setfattr", "-n", "user.size", "-v", String(repeating: "x", count: 3000), file]).succeeded)
            #expect(try await run(["getfattr", "--only-values", "-n", "user.color", file]).stdout == "blue")
            #expect(try await run(["getfattr", "--only-values", "-n", "user.size", file]).stdout.count == 3000)
            let dump = try await run(["getfattr", "--absolute-names", "-d", file])
            #expect(dump.stdout.contains("user.color=\"blue\""))
            #expect(dump.stdout.contains("user.size="))

            #expect(try await run(["setfattr", "-x", "user.color", file]).succeeded)
            let missing = try await run(["getfattr", "-n", "user.color", file])
            #expect(!missing.succeeded)
            #expect(missing.stderr.contains("No such attribute"))

            // security.* is answered by FuseKit itself (SecurityXattrPolicy.unsupported); for
            // an ordinary user the kernel refuses it first (it needs CAP_SYS_ADMIN).
            let security = try await run(["setfattr", "-n", "security.test", "-v", "1", file])
            #expect(!security.succeeded)
            #expect(security.stderr.contains(geteuid() == 0 ? "not supported" : "not permitted"))
        }
    }

    @Test func droppedReplyTokenAnswersEIO() async throws {
        let fs = MemoryFS()
        fs.addFile("eio", contents: Array("never seen".utf8), dropReads: true)
        fs.addFile("f")
        try await withMount(fs) { m async throws in
            // Dropped in another task (read)…
            let cat = try await run(["cat", m.at("eio")])
            #expect(!cat.succeeded)
            #expect(cat.stderr.contains("Input/output error"))
            // …and on the FUSE thread, by returning without answering (getxattr).
            let xattr = try await run(["getfattr", "-n", "user.drop-reply", m.at("f")])
            #expect(!xattr.succeeded)
            #expect(xattr.stderr.contains("Input/output error"))
            // The mount still works afterwards.
            #expect(try await run(["stat", m.at("f")]).succeeded)
        }
    }

    @Test func invalidateEntryShowsRemoteRename() async throws {
        let fs = MemoryFS()
        fs.addFile("before", contents: Array("x".utf8))
        try await withMount(fs) { m async throws in
            // Cache a positive entry for "before" and a negative one for "after" (1 h each).
            #expect(try await run(["stat", m.at("before")]).succeeded)
            #expect(!(try await run(["stat", m.at("after")]).succeeded))
            let lookupsBefore = fs.counters.lookups

            fs.renameBehindKernel("before", to: "after")
            // The kernel still believes its cache: no lookup is sent, the old answers stand.
            #expect(try await run(["stat", m.at("before")]).succeeded)
            #expect(!(try await run(["stat", m.at("after")]).succeeded))
            #expect(fs.counters.lookups == lookupsBefore)

            // Notify from a separate task, never from inside a handler.
            let notifier = m.mount.notifier
            let results = await Task.detached {
                [notifier.invalidateEntry(parent: 1, name: Array("before".utf8)),
                 notifier.invalidateEntry(parent: 1, name: Array("after".utf8))]
            }.value
            #expect(results == [0, 0])

            let visible = try await poll {
                let after = try await run(["stat", m.at("after")])
                let before = try await run(["stat", m.at("before")])
                return after.succeeded && !before.succeeded
            }
            #expect(visible)
            #expect(try await run(["cat", m.at("after")]).stdout == "x")
        }
    }

    @Test func spliceReadFromDescriptor() async throws {
        let fs = MemoryFS()
        let backing = try makeTemporaryDirectory("fusekit-backing") + "/data"
        defer {
            unlink(backing)
            rmdir((backing as NSString).deletingLastPathComponent)
        }
        // 3 MiB + 1 byte: several 1 MiB requests and a short tail.
        let size = 3 * 1_048_576 + 1
        #expect(try await sh("head -c \(size) /dev/urandom > '\(backing)'").succeeded)
        let descriptor = open(backing, O_RDONLY)
        try #require(descriptor >= 0)
        defer { close(descriptor) }
        fs.addBackedFile("big", descriptor: descriptor, size: Int64(size))

        try await withMount(fs) { m async throws in
            #expect(try await run(["cmp", backing, m.at("big")], seconds: 30).succeeded)
            #expect(m.mount.connection?.spliceReplies == true)
        }
    }

    @Test(.enabled(if: geteuid() == 0, "aborts the connection with umount(MNT_FORCE), which needs root"))
    func replyAfterAbortIsSafeAndSessionLivesUntilIt() async throws {
        let fs = MemoryFS()
        fs.addFile("held", holdOpens: true)
        try await withMount(fs) { m async throws in
            async let reader = run(["cat", m.at("held")])
            #expect(await poll { fs.heldOpen.withLock { $0 != nil } })

            // MNT_FORCE makes FUSE abort the connection: the waiting open fails at once and
            // the loop ends, while the handler still holds the open's reply token.
            _ = umount2(m.path, Int32(MNT_FORCE))
            let cat = try await reader
            #expect(!cat.succeeded)
            #expect(await poll { m.mount.end != nil })
            #expect(m.mount.core.activeUses == 1, "the unanswered token keeps the session alive")
            // The loop has ended: a notification is refused without reaching libfuse.
            #expect(m.mount.notifier.invalidateEntry(parent: 1, name: Array("x".utf8)) == ENOTCONN)
            #expect(m.mount.core.activeUses == 1, "the notification gave its use back")

            // The late answer is refused (the kernel is gone), quietly, and frees the session.
            let token = fs.heldOpen.withLock { $0.take() }
            #expect(token?.opened(handle: 7) == false)
            #expect(m.mount.core.activeUses == 0)
            #expect(m.mount.notifier.invalidateInode(1) == ENOTCONN)
        }
    }

    @Test(.enabled(if: geteuid() == 0, "writes as another user with setpriv"))
    func kernelClearsSetuidOnWriteByOtherUser() async throws {
        let fs = MemoryFS()
        fs.addFile("suid", contents: Array("x".utf8))
        var options = MountOptions()
        options.allowOther = true  // without it FUSE refuses every user but the mounter
        try await withMount(fs, options: options) { m async throws in
            let file = m.at("suid")
            #expect(try await run(["chmod", "4777", file]).succeeded)
            #expect(try await run(["stat", "-c", "%a", file]).stdout == "4777\n")
            let write = try await run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", "printf y >> '\(file)'"])
            #expect(write.succeeded, "\(write.stderr)")
            // FuseKit turns HANDLE_KILLPRIV off, so the kernel sent the mode change itself.
            #expect(try await run(["stat", "-c", "%a %s", file]).stdout == "777 2\n")
        }
    }

    @Test func notifierAfterUnmountReturnsENOTCONN() async throws {
        let fs = MemoryFS()
        var kept: KernelNotifier?
        try await withMount(fs) { m async throws in kept = m.mount.notifier }
        let notifier = try #require(kept)
        #expect(notifier.invalidateEntry(parent: 1, name: Array("x".utf8)) == ENOTCONN)
    }

    @Test(.enabled(if: geteuid() == 0, "builds a dead mount with mount(2), which needs root"))
    func clearDeadMount() async throws {
        // The once-per-run sweep of dead mounts must be over before this test makes its own
        // dead mount, or the sweep (started by a test running in parallel) clears it.
        _ = staleMountsCleared
        let directory = try makeTemporaryDirectory("fusekit-dead")
        defer { rmdir(directory) }
        #expect(try MountRecovery.clearDeadMount(at: directory) == .notMounted)

        // A mount whose daemon is gone: mount with a /dev/fuse descriptor, then close it.
        // Closing the last descriptor aborts the connection, exactly as a kill -9 would.
        // O_CLOEXEC: other tests start processes at the same time, and a child that inherited
        // the descriptor would keep the connection alive.
        let fd = open("/dev/fuse", O_RDWR | O_CLOEXEC)
        try #require(fd >= 0)
        let options = "fd=\(fd),rootmode=40000,user_id=\(getuid()),group_id=\(getgid())"
        let mounted = mount("fusekit-dead", directory, "fuse.fusekittest", UInt(MS_NOSUID | MS_NODEV), options)
        close(fd)
        try #require(mounted == 0)
        defer {
            if MountRecovery.mountedFileSystemType(at: directory) != nil {
                _ = Unmounter.runProcess(["fusermount3", "-u", "-z", "--", directory])
            }
        }
        let stat = try await run(["stat", directory])
        #expect(stat.stderr.contains("Transport endpoint is not connected"))

        #expect(try MountRecovery.clearDeadMount(at: directory) == .clearedDeadMount)
        #expect(MountRecovery.mountedFileSystemType(at: directory) == nil)
        #expect(try MountRecovery.clearDeadMount(at: directory) == .notMounted)
    }

    @Test func liveMountIsLeftAlone() async throws {
        let fs = MemoryFS()
        try await withMount(fs) { m async throws in
            #expect(try MountRecovery.clearDeadMount(at: m.path) == .liveMount)
            #expect(try await run(["ls", m.path]).succeeded)
        }
    }
}

@Suite struct ValueTests {
    @Test func statRoundTrip() {
        let attributes = FileAttributes(
            ino: 42, mode: S_IFREG | 0o640, nlink: 3, uid: 1000, gid: 100, size: 5000, blockSize: 65536,
            atime: FileTime(seconds: 1, nanoseconds: 2), mtime: FileTime(seconds: 3, nanoseconds: 4),
            ctime: FileTime(seconds: 5, nanoseconds: 999_999_999))
        #expect(attributes.blocks == 10)
        #expect(attributes.type == .regular)
        #expect(FileAttributes(attributes.stat()) == attributes)
    }

    @Test func setattrDecoding() {
        var st = stat()
        st.st_mode = S_IFREG | 0o4755
        st.st_size = 77
        st.st_mtim = timespec(tv_sec: 10, tv_nsec: 20)
        // FUSE_SET_ATTR_MODE | _SIZE | _ATIME | _MTIME | _ATIME_NOW from fuse_lowlevel.h; the
        // tests do not import CFuse3 (FuseKit is its only importer).
        let mask: Int32 = 1 | 8 | 16 | 32 | 128
        let changes = AttributeChanges(st, toSet: mask)
        #expect(changes == AttributeChanges(mode: 0o4755, size: 77, atime: .now, mtime: .set(FileTime(seconds: 10, nanoseconds: 20))))
    }

    @Test func optionListEscapesCommas() {
        var options = MountOptions()
        options.fsName = "a,b\\c"
        options.allowOther = true
        #expect(options.optionList == "default_permissions,fsname=a\\,b\\\\c,subtype=ubiq,allow_other")
    }
}
