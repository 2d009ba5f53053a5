import ArgumentParser
import ControlSocket
import Foundation
import ItemAttributes
import LocalState
import MountDaemon
import MountInfo
import SyncAPI
import SyncClient

/// Item commands speak the public contract: the `user.ubiq.*` extended attributes of the files
/// themselves (docs/SEMANTICS.md, "Extended attributes"), so they work on any path inside a
/// mount.
extension Xattr {
    static let statusNames = [
        "downloadingStatus", "isDownloading", "percentDownloaded", "isUploaded", "isUploading", "percentUploaded",
        "hasUnresolvedConflicts", "downloadingError", "uploadingError", "pinned", "itemID", "revision", "shares",
    ]

    static func status(_ path: String) -> [(String, String)] {
        statusNames.compactMap { name in get(path, "user.ubiq." + name).map { (name, $0) } }
    }
}

func requireInMount(_ path: String) throws -> String {
    let absolute = Paths.absolute(path)
    guard MountInfo.ubiqMount(containing: absolute) != nil else { throw Failure("\(path) is not inside a ubiq mount") }
    // The entry itself: a dangling link is in the mount too.
    var info = stat()
    guard lstat(absolute, &info) == 0 else { throw Failure("\(path): \(String(cString: strerror(errno)))") }
    return absolute
}

/// The encoder of every `--json` line made from a Codable value: keys sorted and slashes as
/// they are, as `jsonLine` writes a dictionary.
func outputEncoder() -> JSONEncoder {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
    return encoder
}

func jsonLine(_ object: [String: Any]) -> String {
    let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
    return String(decoding: data, as: UTF8.self)
}

struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Show the mount's state, or each item's status attributes.")
    @Argument(help: "Items to show; without any, the mount of the current directory.") var paths: [String] = []
    @Option(help: "The mount to describe when no PATH is given.") var mount: String?
    @Flag(help: "One JSON object per line.") var json = false
    @Flag(help: "The mount's metrics, as Prometheus text.") var metrics = false

    func run() async throws {
        if paths.isEmpty {
            let (mountpoint, control) = try MountTable.control(of: mount)
            if metrics {
                do { print(String(decoding: try await control.data(ControlPath.metrics), as: UTF8.self), terminator: "") } catch {
                    throw Failure("the daemon of \(mountpoint) does not answer: \(error)")
                }
                return
            }
            let report: MountStatusReport
            do { report = try await control.get(ControlPath.status) } catch {
                throw Failure("the daemon of \(mountpoint) does not answer: \(error)")
            }
            if json {
                print(String(decoding: try outputEncoder().encode(report), as: UTF8.self))
            } else {
                print("mount:     \(report.mountpoint)")
                print("server:    \(report.server) (\(report.connected ? "connected" : "offline\(report.lastError.map { ": " + $0 } ?? "")"))")
                print("account:   \(report.account), container \(report.container), device \(report.device)")
                print("uploads:   \(report.pendingUploads) pending")
                print("downloads: \(report.activeDownloads) running")
                print("cache:     \(report.cachedBytes) bytes\(report.cacheLimit.map { " of \($0)" } ?? "")")
                print("items:     \(report.items)\(report.hasWholeTree ? "" : " (the first sync has not ended: the tree is not whole yet)")")
                print("log:       \(report.logFile ?? "standard error of the daemon (started with --foreground)")")
            }
            return
        }
        var failed = false
        for path in paths {
            let absolute: String
            do { absolute = try requireInMount(path) } catch {
                printError("\(error)")
                failed = true
                continue
            }
            let attributes: [(String, String)]
            do { attributes = try await Self.status(of: absolute, shownAs: path) } catch {
                printError("\(error)")
                failed = true
                continue
            }
            if json {
                var object: [String: Any] = ["path": path]
                for (k, v) in attributes { object[k] = ItemStatus.jsonValue(of: k, v) }
                print(jsonLine(object))
            } else {
                print("\(path): " + attributes.map { "\($0.0)=\($0.1)" }.joined(separator: " "))
            }
        }
        if failed { throw ExitCode(1) }
    }

    /// A file's or a folder's status attributes, read as any program reads them; those of a
    /// link, a FIFO or a socket from the daemon, since Linux keeps `user.*` attributes off them.
    static func status(of absolute: String, shownAs path: String) async throws -> [(String, String)] {
        var info = stat()
        let type = lstat(absolute, &info) == 0 ? info.st_mode & S_IFMT : S_IFREG
        if type == S_IFREG || type == S_IFDIR { return Xattr.status(absolute) }
        guard let top = MountInfo.ubiqMount(containing: absolute) else { throw Failure("\(path) is not inside a ubiq mount") }
        let report: ItemStatusReport
        do {
            report = try await Versions.control(of: absolute).get(
                ControlPath.itemStatus + "?path=" + APIPath.percentEncoded(String(absolute.dropFirst(top == "/" ? 0 : top.count))))
        } catch {
            throw Failure("\(path): the mount's daemon does not answer: \(error)")
        }
        if let error = report.error { throw Failure(error) }
        return Xattr.statusNames.compactMap { name in report.attributes["user.ubiq." + name].map { (name, $0) } }
    }
}

struct Download: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "download", abstract: "Start downloading items (folders: everything below).")
    @Argument(help: "Files or folders inside a mount.") var paths: [String]
    @Flag(help: "Show progress and return once every file is current (exit 0 only then).") var wait = false

    func run() async throws {
        var files: [String] = []
        for path in paths {
            let absolute = try requireInMount(path)
            let rc = Xattr.set(absolute, "user.ubiq.downloadingStatus", "current")
            guard rc == 0 else { throw Failure("\(path): cannot start the download: \(String(cString: strerror(rc)))") }
            files += Tree.files(under: absolute)
        }
        guard wait else { return }
        let tty = isatty(1) != 0
        let clock = ContinuousClock()
        var lastDraw = clock.now
        while true {
            var done = 0, percent = 0
            for file in files {
                if let error = Xattr.get(file, "user.ubiq.downloadingError"), Xattr.get(file, "user.ubiq.isDownloading") != "1" {
                    if tty { print("") }
                    throw Failure("\(file): \(error)")
                }
                let status = Xattr.get(file, "user.ubiq.downloadingStatus")
                if status == "current" { done += 1; percent += 100 } else { percent += Int(Xattr.get(file, "user.ubiq.percentDownloaded") ?? "0") ?? 0 }
            }
            let total = max(files.count, 1)
            if tty && clock.now - lastDraw > .milliseconds(100) {
                Progress.draw(percent: percent / total, label: "\(done)/\(files.count) files")
                lastDraw = clock.now
            }
            if done == files.count {
                if tty { Progress.draw(percent: 100, label: "\(done)/\(files.count) files"); print("") }
                return
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }
}

enum Progress {
    static func draw(percent: Int, label: String) {
        let width = 30
        let filled = width * min(100, max(0, percent)) / 100
        let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
        FileHandle.standardOutput.write(Data("\r[\(bar)] \(percent)% \(label)".utf8))
    }
}

enum Tree {
    /// Every regular file at or below `path`.
    static func files(under path: String) -> [String] {
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir) else { return [] }
        guard isDir.boolValue else { return [path] }
        var out: [String] = []
        for case let name as String in FileManager.default.enumerator(atPath: path) ?? FileManager.DirectoryEnumerator() {
            var d: ObjCBool = false
            if FileManager.default.fileExists(atPath: path + "/" + name, isDirectory: &d), !d.boolValue { out.append(path + "/" + name) }
        }
        return out
    }
}

struct Evict: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "evict", abstract: "Drop local content and keep placeholders (refused while changes are unsent).")
    @Argument var paths: [String]

    func run() async throws {
        for path in paths {
            let absolute = try requireInMount(path)
            switch Xattr.set(absolute, "user.ubiq.downloadingStatus", "notDownloaded") {
            case 0: continue
            case EBUSY: throw Failure("\(path) has changes that are not on the server yet (or is open); not evicted")
            case let rc: throw Failure("\(path): \(String(cString: strerror(rc)))")
            }
        }
    }
}

struct Pin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "pin", abstract: "Always keep items on this device (recursive for folders).")
    @Argument var paths: [String]
    func run() async throws { try setPinned(paths, true) }
}

struct Unpin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "unpin", abstract: "Let the cache limit evict items again (recursive for folders).")
    @Argument var paths: [String]
    func run() async throws { try setPinned(paths, false) }
}

func setPinned(_ paths: [String], _ pinned: Bool) throws {
    for path in paths {
        let absolute = try requireInMount(path)
        let rc = Xattr.set(absolute, "user.ubiq.pinned", pinned ? "1" : "0")
        guard rc == 0 else { throw Failure("\(path): \(String(cString: strerror(rc)))") }
    }
}

struct Unmount: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "unmount", abstract: "Send pending changes (bounded wait), then unmount.")
    @Argument var mountpoint: String
    @Option(help: "Seconds to wait for pending uploads.") var timeout: Double = 30

    func validate() throws {
        guard ControlPath.isFlushTimeout(timeout) else { throw ValidationError("--timeout: \(ControlPath.flushTimeoutRule)") }
    }

    func run() async throws {
        let target = Paths.absolute(mountpoint)
        guard MountTable.isUbiqMount(target) else { throw Failure("\(target) is not a ubiq mount") }
        let daemon = MountRegistry.daemon(of: target)
        var server: String?
        if let cache = MountRegistry.cacheDirectory(of: target) {
            let control = ControlClient(socketPath: cache + "/control.sock")
            server = (try? await control.get(ControlPath.status) as MountStatusReport)?.server
            if let report: FlushReport = try? await control.post(ControlPath.flush + "?timeout=\(timeout)", timeout: .seconds(Int64(timeout) + 10)) {
                if report.pending > 0 {
                    printError("\(report.pending) change(s) not on the server yet; they stay queued in the cache and go up at the next mount:")
                    for p in report.paths { printError("  \(p)") }
                }
                let _: MountStatusReport? = try? await control.post(ControlPath.unmount)
            }
        }
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(15)
        while MountTable.isUbiqMount(target) && clock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        if MountTable.isUbiqMount(target) {
            // No daemon answered (it died): clear the mount directly.
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/bin/fusermount3")
            p.arguments = ["-u", target]
            try? p.run()
            p.waitUntilExit()
            guard !MountTable.isUbiqMount(target) else { throw Failure("cannot unmount \(target) (in use?)") }
        }
        // The daemon's last steps (closing its database and cache) come after the mount is
        // gone: returning before they end let a mount started at once meet it still running.
        if let daemon {
            while kill(daemon, 0) == 0 && clock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            // The kernel detached a busy mount lazily: processes still inside it keep their
            // files and working folders, served by the daemon until they let go. Saying
            // "unmounted" then made a mount right after fail with a puzzling message.
            if kill(daemon, 0) == 0 {
                throw Failure("\(target) is detached, but processes still have files or folders open in it; its daemon (pid \(daemon)) serves them and exits once they close, and the cache folder cannot be mounted again until then")
            }
        }
        print("unmounted \(target)")
        if server == EmbeddedServer.url, let pid = EmbeddedServer.runningPID, await EmbeddedServer.mountsUsingIt(except: target).isEmpty {
            print("the embedded server keeps running (pid \(pid)) for later mounts; `ubiq server stop` stops it")
        }
    }
}
