import ArgumentParser
import Foundation
import ItemModel

/// `ubiq versions PATH`: the file's current version and its conflict versions, read from the
/// file's `user.ubiq.conflictVersions` attribute (docs/SEMANTICS.md, "Conflicts"): listing
/// never downloads.
struct Versions: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List a file's current version and its conflict versions.")
    @Argument(help: "A file inside a mount.") var path: String
    @Flag(help: "One JSON object per line.") var json = false

    /// One entry of `user.ubiq.conflictVersions`, as the mount writes it.
    struct Entry: Decodable {
        var id: String
        var device: String
        var modified: String
        var size: Int64
        var digest: String
    }

    func run() async throws {
        let absolute = try requireInMount(path)
        var info = stat()
        guard stat(absolute, &info) == 0 else { throw Failure("\(path): \(String(cString: strerror(errno)))") }
        guard (info.st_mode & S_IFMT) == S_IFREG else { throw Failure("\(path) is not a file: only files have versions") }
        var versions: [Entry] = []
        if let listing = Xattr.get(absolute, "user.ubiq.conflictVersions") {
            do { versions = try JSONDecoder().decode([Entry].self, from: Data(listing.utf8)) } catch {
                throw Failure("\(path): the mount lists its versions in a form this ubiq does not read: \(error)")
            }
        }
        let current = (modified: WallClock.isoSeconds(info.st_mtim.tv_sec), size: Int64(info.st_size))
        if json {
            print(jsonLine(["path": path, "version": "current", "modified": current.modified, "size": current.size]))
            for v in versions {
                print(jsonLine(["path": path, "version": v.id, "device": v.device, "modified": v.modified, "size": v.size, "digest": v.digest]))
            }
            return
        }
        print(Self.row("current", "", current.modified, current.size))
        for v in versions { print(Self.row(v.id, "from \(v.device)", v.modified, v.size)) }
    }

    static func row(_ version: String, _ origin: String, _ modified: String, _ size: Int64) -> String {
        func padded(_ s: String, _ width: Int) -> String { s.count >= width ? s : s + String(repeating: " ", count: width - s.count) }
        return padded(version, 32) + "  " + padded(origin, 20) + "  " + modified + "  " + "\(size) bytes"
    }
}
