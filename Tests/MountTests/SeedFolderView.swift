import Foundation
import ItemModel
import SyncAPI
import TestSupport

/// What one replica (a mount, or the server) holds below one seed's folder: every path with
/// its kind and content digest, each file's conflict flag, and the test's own attributes
/// (`user.t.*`, values in hex). Views without differences are the "same tree".
struct SeedFolderView {
    /// path → "dir" or the content's sha256 in hex.
    var tree: [String: String] = [:]
    /// file path → has unresolved conflict versions.
    var conflicted: [String: Bool] = [:]
    /// path → attribute name → value in hex (`0x…`); paths without one are left out.
    var attributes: [String: [String: String]] = [:]
    /// A device's items below the folder whose changes have not all reached the server
    /// (`user.ubiq.isUploaded` = `0`): the seed is not quiet while there are any.
    var unsent: [String] = []

    /// The differences from `other`, one line each, for a failure message.
    func differences(from other: SeedFolderView, _ mine: String, _ theirs: String) -> [String] {
        var lines: [String] = []
        for path in Set(tree.keys).union(other.tree.keys).sorted() where tree[path] != other.tree[path] {
            lines.append("\(path): \(mine) \(tree[path] ?? "absent"), \(theirs) \(other.tree[path] ?? "absent")")
        }
        for path in Set(conflicted.keys).union(other.conflicted.keys).sorted() where conflicted[path] != other.conflicted[path] {
            lines.append("\(path) conflicted: \(mine) \(conflicted[path].map(String.init) ?? "?"), \(theirs) \(other.conflicted[path].map(String.init) ?? "?")")
        }
        for path in Set(attributes.keys).union(other.attributes.keys).sorted() where attributes[path] != other.attributes[path] {
            lines.append("\(path) attributes: \(mine) \(attributes[path] ?? [:]), \(theirs) \(other.attributes[path] ?? [:])")
        }
        return lines
    }

    /// As the device shows it, read with ordinary tools (`find`, `sha256sum`, `getfattr`).
    static func of(_ device: TestDevice, folder: String) async throws -> SeedFolderView {
        let out = try await device.must(
            #"cd "$M/\#(folder)" && find . -mindepth 1 -printf '%y %P\n' && echo '==' && find . -type f -print0 | xargs -0 -r sha256sum"#
                + #" && echo '==' && getfattr -R -e hex -n user.ubiq.hasUnresolvedConflicts . 2>/dev/null; echo '==' && getfattr -R -e hex -d -m '^user\.t\.' . 2>/dev/null; echo '=='"#
                + #" && getfattr -R -e hex -n user.ubiq.isUploaded . 2>/dev/null; true"#,
            timeout: .seconds(60))
        var sections = [""]
        for line in out.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == "==" { sections.append("") } else { sections[sections.count - 1] += line + "\n" }
        }
        guard sections.count == 5 else { throw TestSupportError("[\(device.name)] unreadable view of \(folder): \(out)") }
        var view = SeedFolderView()
        for line in sections[0].split(separator: "\n") where line.first == "d" { view.tree[String(line.dropFirst(2))] = "dir" }
        for line in sections[1].split(separator: "\n") {
            var path = String(line.dropFirst(66))
            if path.hasPrefix("./") { path.removeFirst(2) }
            view.tree[path] = String(line.prefix(64))
        }
        for (path, values) in attributeDump(sections[2]) where view.tree[path].map({ $0 != "dir" }) ?? false {
            if let flag = values["user.ubiq.hasUnresolvedConflicts"] { view.conflicted[path] = flag == "0x31" }
        }
        view.unsent = attributeDump(sections[4]).filter { $0.value["user.ubiq.isUploaded"] == "0x30" }.map(\.key).sorted()
        view.attributes = attributeDump(sections[3]).filter { !$0.value.isEmpty && view.tree[$0.key] != nil }
        return view
    }

    /// `getfattr` output: `# file: PATH` then `name=value` lines.
    private static func attributeDump(_ text: String) -> [String: [String: String]] {
        var result: [String: [String: String]] = [:]
        var path: String?
        for line in text.split(separator: "\n") {
            if line.hasPrefix("# file: ") {
                var p = String(line.dropFirst(8))
                if p.hasPrefix("./") { p.removeFirst(2) }
                path = p
                result[p, default: [:]] = [:]
            } else if let path, let eq = line.firstIndex(of: "=") {
                result[path, default: [:]][String(line[..<eq])] = String(line[line.index(after: eq)...])
            }
        }
        return result
    }

    /// As the server holds it (its HTTP API), with each file's item for the content check.
    static func of(_ http: TestHTTP, folder: String) async throws -> (view: SeedFolderView, files: [ItemMetadata]) {
        var view = SeedFolderView()
        var files: [ItemMetadata] = []
        func children(_ id: ItemID) async throws -> [ItemMetadata] {
            let r = try await http.send(.GET, APIPath.children(.default, id))
            guard r.status == 200 else { throw TestSupportError("children: \(r.status) \(r.text)") }
            return try r.decode(ItemList.self).items
        }
        guard let top = try await children(.root).first(where: { $0.name == folder }) else { throw TestSupportError("no \(folder) on the server") }
        func walk(_ id: ItemID, _ prefix: String) async throws {
            for item in try await children(id) {
                let path = prefix.isEmpty ? item.name : prefix + "/" + item.name
                let attributes = item.xattrs.filter { $0.key.hasPrefix("user.t.") }
                if !attributes.isEmpty { view.attributes[path] = attributes.mapValues { "0x" + $0.map { String(format: "%02x", $0) }.joined() } }
                if item.kind == .folder {
                    view.tree[path] = "dir"
                    try await walk(item.id, path)
                } else {
                    view.tree[path] = item.digest?.hex ?? "?"
                    view.conflicted[path] = !item.conflicts.isEmpty
                    files.append(item)
                }
            }
        }
        try await walk(top.id, "")
        return (view, files)
    }

    /// Every content the server keeps for `files`: the current one and each conflict version's.
    static func contents(of files: [ItemMetadata], via http: TestHTTP) async throws -> [ContentDigest: Data] {
        var digests: Set<ContentDigest> = []
        for file in files {
            if let d = file.digest { digests.insert(d) }
            for version in file.conflicts { digests.insert(version.digest) }
        }
        var result: [ContentDigest: Data] = [:]
        for digest in digests {
            let r = try await http.send(.GET, APIPath.blob(digest))
            guard r.status == 200 else { throw TestSupportError("blob \(digest.hex): \(r.status)") }
            result[digest] = r.body
        }
        return result
    }

    /// Each file of the server's tree with its content, and each conflict version's: what a
    /// report of a lost token shows.
    static func describe(_ files: [ItemMetadata], _ contents: [ContentDigest: Data]) -> String {
        func text(_ digest: ContentDigest?) -> String {
            guard let digest else { return "-" }
            let body = contents[digest].map { String(decoding: $0.prefix(400), as: UTF8.self) } ?? "?"
            return "\(digest.hex.prefix(8)) \(body.replacingOccurrences(of: "\n", with: " "))"
        }
        return files.map { file in
            ([file.name + " r\(file.revision): " + text(file.digest)] + file.conflicts.map { "  conflict version: " + text($0.digest) })
                .joined(separator: "\n")
        }.joined(separator: "\n")
    }
}
