import ArgumentParser
import ControlSocket
import Foundation
import FuseKit
import ItemModel
import Logging
import MountDaemon
import MountInfo
import SyncAPI
import SyncClient

struct Mount: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mount",
        abstract: "Mount a container. Returns once the mount is usable; the daemon stays in the background.")

    @Argument(help: "An existing, empty directory.") var mountpoint: String
    @Option(help: "Sync server URL (default: the stored login, else a local embedded server).") var server: String?
    @Option(help: "Container identifier.") var container: String = "default"
    @Option(help: "Cache folder for this mount (metadata, content, control socket).") var cache: String?
    @Option(help: "This device's name, shown in conflict versions.") var device: String?
    @Option(help: "Largest local content to keep, e.g. 500M or 10G; least recently used clean files are evicted beyond it.") var cacheSize: String?
    @Flag(help: "Stay in the foreground (logs on stderr).") var foreground = false
    @Flag(help: "Return as soon as the mount answers, before a fresh device's first sync has brought the whole tree.") var noWait = false
    @Flag(help: "Let other users use the mount (needs root or user_allow_other in /etc/fuse.conf); file modes still apply.") var allowOther = false
    @Option(help: "Log level.") var logLevel: String = "info"
    @Option(help: "Size at which the log file (daemon.log in the cache folder) is set aside as daemon.log.1, e.g. 10M; three are kept.") var logSize: String = "10M"
    @OptionGroup var trust: TrustOptions

    func validate() throws {
        if let cacheSize, ByteCount.parse(cacheSize) == nil { throw ValidationError("--cache-size takes a size such as 500M or 10G") }
        do { _ = try ContainerID(container) } catch { throw ValidationError("--container: \(error)") }
        guard Logger.Level(rawValue: logLevel) != nil else { throw ValidationError("unknown log level '\(logLevel)'") }
        guard ByteCount.parse(logSize) != nil else { throw ValidationError("--log-size takes a size such as 64K or 10M") }
        if let server, ServerURL.normalized(server) == nil { throw ValidationError(ServerURL.usage) }
    }

    func run() async throws {
        let target = Paths.absolute(mountpoint)
        try checkMountpoint(target)
        if allowOther { try checkOthersMayBeAllowed() }
        let login = try await resolveLogin()
        // What the login decided, unless this command says otherwise.
        let trust = self.trust.given ? self.trust.value : (login.trust ?? ServerTrust())
        if let why = trust.refusal(of: login.server) { throw ValidationError(why) }
        let cacheDir = cache.map(Paths.absolute) ?? (Paths.cache + "/mounts/" + ContentDigest.of(Array(target.utf8)).hex.prefix(16))
        var config = MountConfiguration(
            mountpoint: target, serverURL: login.server, token: login.token, account: login.user,
            container: try ContainerID(container), cacheDirectory: cacheDir,
            deviceName: device ?? ProcessInfo.processInfo.hostName, cacheLimit: cacheSize.flatMap(ByteCount.parse),
            logLevel: Logger.Level(rawValue: logLevel) ?? .info, allowOther: allowOther)
        config.logSize = ByteCount.parse(logSize) ?? DaemonLog.defaultSize
        // `ubiq login` run again (a new password, an account added again) reaches a running
        // mount: the stored token is read again when the server refuses the one in use.
        config.freshToken = { [server = login.server, user = login.user] in
            StoredLogin.load().flatMap { $0.server == server && $0.user == user ? $0.token : nil }
        }
        if login.server == EmbeddedServer.url { config.formerServerURL = EmbeddedServer.formerURL }
        config.trust = trust
        if foreground {
            do {
                try await MountDaemon.run(config) { print("mounted \(target)"); fflush(nil) }
            } catch let error as MountDaemonError {
                throw Failure(error.description)
            }
            return
        }
        try await startInBackground(config)
    }

    /// Refused before anything starts (exit 1): a daemon started on a live mount would wait
    /// for that mount's cache folder and die, while this command saw the old mount answer and
    /// said "mounted". A dead mount (its daemon killed) is fine: the daemon clears it.
    func checkMountpoint(_ path: String) throws {
        // As the mount table names it (a folder reached through a symlink).
        let target = (try? MountRecovery.lexicalAbsolutePath(path)) ?? path
        // The mount table first: a hung mount must not hang this command (the probe has a deadline).
        switch MountRecovery.state(at: target) {
        case .dead: return
        case .live, .unresponsive: throw Failure(MountDaemonError.alreadyMounted(target).description)
        case .notMounted: break
        }
        // Inside another ubiq mount the folder would be an item of that container, and a mount
        // of the same container there would contain itself.
        if let outer = MountInfo.ubiqMount(containing: target) { throw Failure("\(target) is inside the ubiq mount \(outer); mount outside it") }
        var st = stat()
        guard stat(target, &st) == 0 else { throw Failure("\(target) does not exist") }
        guard st.st_mode & S_IFMT == S_IFDIR else { throw Failure("\(target) is not a directory") }
        // Like rclone: files in the folder would be hidden while it is mounted, and look lost.
        let entries = try? FileManager.default.contentsOfDirectory(atPath: target)
        guard let entries else { throw Failure("cannot read \(target)") }
        if !entries.isEmpty { throw Failure("\(target) is not empty; mount on an empty folder (\(entries.count == 1 ? "the entry in it" : "the \(entries.count) entries in it") would be hidden while mounted)") }
    }

    /// FUSE lets only root admit other users, unless `/etc/fuse.conf` says `user_allow_other`;
    /// without it, `fusermount3` refuses the mount and the reason would end up in the daemon's log.
    func checkOthersMayBeAllowed() throws {
        guard geteuid() != 0 else { return }
        let text = (try? String(contentsOfFile: "/etc/fuse.conf", encoding: .utf8)) ?? ""
        let allowed = text.split(separator: "\n").contains { $0.trimmingCharacters(in: .whitespaces) == "user_allow_other" }
        guard allowed else {
            throw Failure("--allow-other needs the line user_allow_other in /etc/fuse.conf, which only an administrator can add; mount without --allow-other to keep the mount to yourself")
        }
    }

    /// --server with its stored login; else the stored login; else the embedded default.
    func resolveLogin() async throws -> StoredLogin {
        let stored = StoredLogin.load()
        if let server {
            let base = ServerURL.normalized(server) ?? server
            guard let stored, stored.server == base else {
                throw Failure("not logged in to \(base): run `ubiq login --server \(base) --user NAME` first")
            }
            return stored
        }
        if let stored { return stored }
        return try await EmbeddedServer.ensure()
    }

    /// Starts `ubiq mount --foreground` as a daemon in its own session (so a Ctrl-C in this
    /// terminal does not reach it) and waits until the mount answers.
    func startInBackground(_ config: MountConfiguration) async throws {
        try FileManager.default.createDirectory(atPath: config.cacheDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let log = config.logFile
        var arguments = CommandLine.arguments
        arguments[0] = "/proc/self/exe"
        arguments += ["--foreground", "--cache", config.cacheDirectory, "--device", config.deviceName]
        let pid = try Spawn.detached(executable: "/proc/self/exe", arguments: arguments, log: log)
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(30)
        let control = ControlClient(socketPath: config.controlSocket)
        while clock.now < deadline {
            if !Spawn.isAlive(pid) {
                let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                let last = text.split(separator: "\n").last(where: { $0.contains("ubiq:") }) ?? text.split(separator: "\n").last ?? "no log"
                throw Failure("the mount daemon stopped: \(last.replacingOccurrences(of: "ubiq: ", with: ""))")
            }
            if MountTable.isUbiqMount(config.mountpoint), (try? await control.get(ControlPath.status) as MountStatusReport) != nil,
               Self.rootShowsItsMode(config.mountpoint) {
                if !noWait { try await waitForWholeTree(control, pid: pid, log: log) }
                print("mounted \(config.mountpoint)")
                return
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw Failure("the mount did not become ready within 30 s; see \(log)")
    }
}

extension Mount {
    /// Waits until the mount lists the container's whole tree: on a fresh device, until its
    /// first sync has ended (an already synced device has it at once), so that a script's
    /// `ubiq mount ~/Cloud && cp -r ~/Cloud/Photos …` copies every photo. On a terminal the
    /// items synced so far count up. Returns early, and says so, when the server cannot be
    /// reached (the mount then shows what this device holds, and the rest as it comes).
    func waitForWholeTree(_ control: ControlClient, pid: pid_t, log: String) async throws {
        let counting = isatty(STDERR_FILENO) != 0
        var counted = false
        defer { if counted { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) } }
        while true {
            guard Spawn.isAlive(pid) else { throw Failure("the mount daemon stopped during the first sync; see \(log)") }
            if let status: MountStatusReport = try? await control.get(ControlPath.status) {
                if status.hasWholeTree { return }
                if !status.connected, let error = status.lastError {
                    FileHandle.standardError.write(Data("ubiq: the first sync has not ended (\(error)); the mount shows what this device holds, and the rest as it comes\n".utf8))
                    return
                }
                if counting {
                    FileHandle.standardError.write(Data("\rsyncing: \(status.items) items".utf8))
                    counted = true
                }
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Until the kernel has asked the daemon for the root folder's attributes, it checks access
    /// against those it made up at mount time: a folder with no permission bits. Root passes
    /// that check anyway; an ordinary user's first `echo > ~/Cloud/f` right after `ubiq mount`
    /// failed with EACCES about half the time. A `stat` that shows the real mode means the
    /// kernel has them (for an hour, and invalidated exactly).
    static func rootShowsItsMode(_ mountpoint: String) -> Bool {
        var st = stat()
        return stat(mountpoint, &st) == 0 && st.st_mode & 0o7777 != 0
    }
}

/// Sizes like 500M, 10G, 1.5G, 4096.
enum ByteCount {
    static func parse(_ text: String) -> Int64? {
        let units: [Character: Double] = ["K": 1024, "M": 1_048_576, "G": 1_073_741_824, "T": 1_099_511_627_776]
        var t = text.uppercased()
        if t.hasSuffix("B") { t.removeLast() }
        var factor: Double = 1
        if let last = t.last, let f = units[last] { factor = f; t.removeLast() }
        guard let n = Double(t), n >= 0 else { return nil }
        return Int64(n * factor)
    }
}

enum Spawn {
    /// posix_spawn with a new session, stdin from /dev/null, stdout and stderr to `log`.
    static func detached(executable: String, arguments: [String], log: String) throws -> pid_t {
        markInheritedDescriptorsCloseOnExec()
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // POSIX_SPAWN_SETSID (glibc ≥ 2.26): the daemon leaves this terminal's session.
        posix_spawnattr_setflags(&attributes, Int16(0x80))
        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, &actions, &attributes, argv, environ)
        guard rc == 0 else { throw Failure("cannot start \(executable): \(String(cString: strerror(rc)))") }
        return pid
    }

    /// A daemon must not keep a descriptor its starter's parent waits on: a program that runs
    /// `ubiq mount` (a test harness, a service manager) may watch a pipe or socket to see it end,
    /// and a daemon holding its other end makes `ubiq mount` look like it never returns.
    static func markInheritedDescriptorsCloseOnExec() {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") else { return }
        for name in names {
            guard let fd = Int32(name), fd > 2 else { continue }
            let flags = fcntl(fd, F_GETFD)
            if flags >= 0 { _ = fcntl(fd, F_SETFD, flags | FD_CLOEXEC) }
        }
    }

    static func isAlive(_ pid: pid_t) -> Bool {
        var status: Int32 = 0
        return waitpid(pid, &status, WNOHANG) == 0
    }
}

/// The ubiq mounts of this namespace (`MountInfo`) and their daemons (`MountLookup`).
enum MountTable {
    static func isUbiqMount(_ path: String) -> Bool {
        MountInfo.ubiqMountpoints().contains(path)
    }

    /// The mount `mount` names (default: the one containing the working directory) and its
    /// daemon's control socket; exit 1 when there is none.
    static func control(of mount: String?) throws -> (mountpoint: String, control: ControlClient) {
        let target = Paths.absolute(mount ?? ".")
        guard let (mountpoint, daemon) = MountLookup.mount(containing: target) else { throw Failure("\(target) is not inside a ubiq mount") }
        guard let daemon else { throw Failure("no daemon is registered for \(mountpoint)") }
        return (mountpoint, ControlClient(socketPath: daemon.controlSocket))
    }
}
