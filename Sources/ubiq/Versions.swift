import ArgumentParser
import Foundation
import ItemModel

/// `ubiq versions PATH`: the file's current version and its conflict versions, read from the
/// file's `user.ubiq.conflictVersions` attribute (docs/SEMANTICS.md, "Conflicts"): listing
/// never downloads. Each version is given with the path of its read-only file in the mount's
/// versions folder, which `cat`, `cp` and `diff` read.
struct Versions: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List a file's current version and its conflict versions.")
    @Argument(help: "A file inside a mount.") var path: String
    @Flag(help: "One JSON object per line.") var json = false

    func run() async throws {
        let (absolute, info) = try Self.file(path)
        let versions = try Self.conflictVersions(of: absolute, shownAs: path)
        let current = (modified: WallClock.isoSeconds(info.st_mtim.tv_sec), size: Int64(info.st_size))
        let top = MountTable.mount(containing: absolute) ?? ""
        if json {
            print(jsonLine(["path": path, "version": "current", "modified": current.modified, "size": current.size]))
            for v in versions {
                print(jsonLine(["path": top + "/" + v.path, "version": v.id, "device": v.device, "modified": v.modified, "size": v.size, "digest": v.digest]))
            }
            return
        }
        print(Self.row("current", "", current.modified, current.size, path))
        for v in versions { print(Self.row(v.id, "from \(v.device)", v.modified, v.size, top + "/" + v.path)) }
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

/// `ubiq resolve PATH --keep-current | --keep VERSION | --keep-both`: written to the file's
/// `user.ubiq.resolve` attribute; the mount sends it, and the flag clears at once here and on
/// every device once the server has it.
struct Resolve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
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
