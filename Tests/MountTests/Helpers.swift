import Foundation
import ItemModel
import SyncAPI
import TestSupport

/// A tree of files, described by path → content, written into a device with ordinary tools.
struct Tree {
    var files: [String: Data]
    var folders: Set<String>

    /// Deterministic content: the same seed gives the same tree.
    static func sample(seed: UInt64, fileCount: Int, maxSize: Int) -> Tree {
        var rng = SeededGenerator(seed: seed)
        var files: [String: Data] = [:]
        var folders: Set<String> = ["src", "src/lib", "docs", "empty dir"]
        let dirs = Array(folders) + [""]
        for i in 0..<fileCount {
            let dir = dirs[Int(rng.next() % UInt64(dirs.count))]
            let size = i == 0 ? 0 : Int(rng.next() % UInt64(maxSize))
            let bytes = (0..<size).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            files[(dir.isEmpty ? "" : dir + "/") + "file \(i).bin"] = Data(bytes)
        }
        folders.insert("src/lib/deep")
        return Tree(files: files, folders: folders)
    }

    func write(to root: String) throws {
        for f in folders { try FileManager.default.createDirectory(atPath: root + "/" + f, withIntermediateDirectories: true) }
        for (path, data) in files { FileManager.default.createFile(atPath: root + "/" + path, contents: data) }
    }
}

extension TestDevice {
    /// Path → sha256 of every file, and every folder, as the device shows them (`find`, `sha256sum`).
    func snapshot(hashing: Bool = true) async throws -> [String: String] {
        let out = try await must(#"cd "$M" && find . -mindepth 1 \( -type d -printf 'D %P\n' \) -o \( -type f -printf 'F %P\n' \) | LC_ALL=C sort"#)
        var result: [String: String] = [:]
        for line in out.split(separator: "\n") {
            let kind = line.prefix(1)
            let path = String(line.dropFirst(2))
            result[path] = kind == "D" ? "dir" : "file"
        }
        if hashing {
            let sums = try await must(#"cd "$M" && find . -type f -print0 | xargs -0 -r sha256sum"#, timeout: .seconds(120))
            for line in sums.split(separator: "\n") {
                let hash = String(line.prefix(64))
                var path = String(line.dropFirst(66))
                if path.hasPrefix("./") { path.removeFirst(2) }
                result[path] = hash
            }
        }
        return result
    }
}

/// The server's tree of the default container, path → digest (or "dir", or "-> target" for a
/// link), through its HTTP API.
func serverTree(_ server: ServerProcess, user: String = "alice", password: String = "alice-pw") async throws -> [String: String] {
    let http = try await TestHTTP(baseURL: server.baseURL).login(user, password)
    var result: [String: String] = [:]
    func walk(_ id: ItemID, _ prefix: String) async throws {
        let list = try await http.send(.GET, APIPath.children(.default, id)).decode(ItemList.self)
        for item in list.items {
            let path = prefix.isEmpty ? item.name : prefix + "/" + item.name
            if item.kind == .folder {
                result[path] = "dir"
                try await walk(item.id, path)
            } else if item.kind == .symlink {
                result[path] = "-> " + (item.target ?? "?")
            } else {
                result[path] = item.digest?.hex ?? "?"
            }
        }
    }
    try await walk(.root, "")
    return result
}

func sha256Hex(_ data: Data) -> String { sha256(data).hex }
