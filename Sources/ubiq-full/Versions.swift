import ArgumentParser
import ControlSocket
import Foundation
import ItemAttributes
import ItemModel
import MountDaemon
import MountInfo
import SyncAPI
import SyncClient

/// `ubiq versions PATH`: the file's current version and its conflict versions, read from the
/// file's `user.ubiq.conflictVersions` attribute (docs/SEMANTICS.md, "Conflicts"): listing
/// never downloads. Each version is given with the path of its read-only file in the mount's
/// versions folder, which `cat`, `cp` and `diff` read. `--all` adds the earlier contents the
/// server keeps (asked of the server through the mount's daemon), which `ubiq restore` brings back.
struct Versions: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "versions", abstract: "List a file's current version and its conflict versions (with --all, its earlier versions too).")
    @Argument(help: "A file inside a mount.") var path: String
    @Flag(help: "Also the earlier versions the server keeps (needs the server).") var all = false
    @Flag(help: "One JSON object per line.") var json = false

    func run() async throws {
        let (absolute, info) = try Self.file(path)
        let versions = try Self.conflictVersions(of: absolute, shownAs: path)
        let current = (modified: WallClock.isoSeconds(info.st_mtim.tv_sec), size: Int64(info.st_size))
        let top = MountInfo.ubiqMount(containing: absolute) ?? ""
        let earlier = all ? try await Self.earlierVersions(of: absolute, inode: Int64(info.st_ino), shownAs: path) : []
        if json {
            print(jsonLine(["path": path, "kind": "current", "version": "current", "modified": current.modified, "size": current.size]))
            for v in versions {
                print(jsonLine(["path": top + "/" + v.path, "kind": "conflict", "version": v.id, "device": v.device, "modified": v.modified,
                                "size": v.size, "digest": v.digest]))
            }
            for e in earlier {
                var line: [String: Any] = ["path": path, "kind": "earlier", "version": e.revision.rawValue, "modified": WallClock.isoSeconds(of: e.modified),
                                           "replaced": WallClock.isoSeconds(of: e.replaced), "size": e.size, "digest": e.digest.hex]
                if let device = e.device { line["device"] = device }
                print(jsonLine(line))
            }
            return
        }
        print(Self.row("current", "", current.modified, current.size, path))
        for v in versions { print(Self.row(v.id, "from \(v.device)", v.modified, v.size, top + "/" + v.path)) }
        for e in earlier {
            print(Self.row(e.revision.rawValue, "from \(e.device ?? "unknown")", WallClock.isoSeconds(of: e.modified), e.size, "(ubiq restore \(path) \(e.revision.rawValue))"))
        }
    }

    /// The mount's daemon for the file at `absolute`; exit 1 when none answers.
    static func control(of absolute: String) throws -> ControlClient {
        guard let top = MountInfo.ubiqMount(containing: absolute), let cache = MountRegistry.cacheDirectory(of: top) else {
            throw Failure("no daemon is registered for the mount of \(absolute)")
        }
        return ControlClient(socketPath: cache + "/control.sock")
    }

    static func earlierVersions(of absolute: String, inode: Int64, shownAs path: String) async throws -> [EarlierVersion] {
        let report: EarlierVersionsReport
        do { report = try await control(of: absolute).get(ControlPath.earlierVersions + "?ino=\(inode)", timeout: .seconds(70)) } catch {
            throw Failure("\(path): the mount's daemon does not answer: \(error)")
        }
        if let error = report.error { throw Failure("\(path): \(error)") }
        return report.versions ?? []
    }

    /// A file inside a mount, with its `stat`; exit 1 for anything else.
    static func file(_ path: String) throws -> (String, stat) {
        let absolute = try requireInMount(path)
        var info = stat()
        guard stat(absolute, &info) == 0 else { throw Failure("\(path): \(String(cString: strerror(errno)))") }
        guard (info.st_mode & S_IFMT) == S_IFREG else { throw Failure("\(path) is not a file: only files have versions") }
        return (absolute, info)
    }

    static func conflictVersions(of absolute: String, shownAs path: String) throws -> [ConflictVersionEntry] {
        guard let listing = Xattr.get(absolute, "user.ubiq.conflictVersions") else { return [] }
        do { return try JSONDecoder().decode([ConflictVersionEntry].self, from: Data(listing.utf8)) } catch {
            throw Failure("\(path): the mount lists its versions in a form this ubiq does not read: \(error)")
        }
    }

    static func row(_ version: String, _ origin: String, _ modified: String, _ size: Int64, _ path: String) -> String {
        func padded(_ s: String, _ width: Int) -> String { s.count >= width ? s : s + String(repeating: " ", count: width - s.count) }
        return padded(version, 32) + "  " + padded(origin, 20) + "  " + modified + "  " + padded("\(size) bytes", 14) + "  " + path
    }
}

/// `ubiq restore PATH REVISION`: the earlier content of that revision (one `ubiq versions --all`
/// lists) becomes the file's content again, as a new revision on every device. Online only.
struct Restore: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "restore", abstract: "Make an earlier version of a file (`ubiq versions --all` lists them) its current content again.")
    @Argument(help: "A file inside a mount.") var path: String
    @Argument(help: "The revision of the earlier version.") var revision: String

    func validate() throws {
        guard !revision.isEmpty, revision.allSatisfy(\.isNumber) else { throw ValidationError("a revision is a number, as `ubiq versions --all` lists it") }
    }

    func run() async throws {
        let (absolute, info) = try Versions.file(path)
        let report: RestoreReport
        do {
            report = try await Versions.control(of: absolute).post(ControlPath.restore + "?ino=\(info.st_ino)&revision=\(revision)", timeout: .seconds(70))
        } catch {
            throw Failure("\(path): the mount's daemon does not answer: \(error)")
        }
        if let error = report.error { throw Failure("\(path): cannot restore revision \(revision): \(error)") }
    }
}

/// `ubiq resolve PATH --keep-current | --keep VERSION | --keep-both`: written to the file's
/// `user.ubiq.resolve` attribute; the mount sends it, and the flag clears at once here and on
/// every device once the server has it.
struct Resolve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "resolve",
        abstract: "Resolve a file's conflict: keep the current version, make one conflict version current, or keep every version as a file.")
    @Argument(help: "A file inside a mount.") var path: String
    @Flag(help: "Keep the current version; the conflict versions go.") var keepCurrent = false
    @Option(name: .customLong("keep"), help: "Make this version (an identifier `ubiq versions` lists) current; the others go.") var version: String?
    @Flag(help: "Keep the current version, and each conflict version as a file beside it, named 'NAME (conflicted copy from DEVICE DATE TIME).EXT'.")
    var keepBoth = false

    func validate() throws {
        guard [keepCurrent, version != nil, keepBoth].filter({ $0 }).count == 1 else {
            throw ValidationError("give exactly one of --keep-current, --keep VERSION and --keep-both")
        }
    }

    func run() async throws {
        let (absolute, _) = try Versions.file(path)
        let versions = try Versions.conflictVersions(of: absolute, shownAs: path)
        guard !versions.isEmpty else { throw Failure("\(path) has no conflict versions") }
        if let version, !versions.contains(where: { $0.id == version }) {
            throw Failure("\(path) has no version \(version) (`ubiq versions \(path)` lists them)")
        }
        let rc = Xattr.set(absolute, "user.ubiq.resolve", version.map { "keep:" + $0 } ?? (keepBoth ? "keep-both" : "keep-current"))
        guard rc == 0 else { throw Failure("\(path): cannot resolve: \(String(cString: strerror(rc)))") }
    }
}
