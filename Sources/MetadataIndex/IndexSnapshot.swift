import Foundation
import GRDB
import ItemModel
import LocalState
import QueryLanguage
import Synchronization

/// What the engine knows in memory about transfers under way (the index's view of it).
public protocol TransfersInFlight: Sendable {
    /// How far the file's running download is, in percent; nil when none runs.
    func downloadPercent(_ ino: Int64) -> Int?
    /// Whether the outbox is sending the item right now, and how far.
    func upload(_ ino: Int64) -> (uploading: Bool, percent: Int?)
}

/// The facts a query needs beyond each row, read once per query in the query's transaction:
/// folder names (for paths and exclusion), pending changes, resolutions chosen here, and the
/// transfers in memory.
public final class IndexSnapshot: Sendable {
    let folders: [Int64: (parent: Int64?, name: String)]
    let versionsFolder: Int64?
    let pending: [Int64: Int]
    let settled: [Int64: Set<ItemID>]
    let transfers: any TransfersInFlight
    private let folderPaths = Mutex<[Int64: String?]>([LocalItem.rootIno: ""])
    private let excludedFolders = Mutex<[Int64: Bool]>([LocalItem.rootIno: false])

    public init(_ reader: LocalReader, transfers: any TransfersInFlight) throws {
        folders = try reader.folderNames()
        versionsFolder = try reader.versionsFolder()?.ino
        pending = try reader.pendingCounts()
        settled = try reader.settledHere()
        self.transfers = transfers
    }

    /// The item's path in the container, `/Documents/a.txt`; nil for the root, anything in
    /// the versions folder, and a row whose folders do not reach the root.
    public func path(ino: Int64, parent: Int64?, name: String) -> String? {
        guard ino != LocalItem.rootIno, ino != versionsFolder, let parent, let above = folderPath(parent) else { return nil }
        return above + "/" + name
    }

    public func path(of item: LocalItem) -> String? { path(ino: item.ino, parent: item.parent, name: item.name) }

    private func folderPath(_ ino: Int64) -> String? {
        if let known = folderPaths.withLock({ $0[ino] }) { return known }
        // Walked without the lock held; a loop or a missing folder ends it (depth as
        // `LocalReader.path(of:)` bounds it).
        var chain: [Int64] = []
        var cursor = ino
        var found: String?? = nil
        while chain.count <= 4096 {
            if let known = folderPaths.withLock({ $0[cursor] }) { found = known; break }
            guard cursor != versionsFolder, let folder = folders[cursor], let parent = folder.parent else { found = .some(nil); break }
            chain.append(cursor)
            cursor = parent
        }
        var path: String? = found ?? nil
        folderPaths.withLock { cache in
            for folder in chain.reversed() {
                path = path.flatMap { above in folders[folder].map { above + "/" + $0.name } }
                cache[folder] = path
            }
        }
        return path
    }

    /// Whether the item or a folder above it is named `*.nosync` or is the versions folder
    /// (`LocalReader.isExcluded`, from the folders in memory).
    public func isExcluded(_ item: LocalItem) -> Bool {
        Self.excludes(item.name) || item.parent.map(folderIsExcluded) ?? false
    }

    static func excludes(_ name: String) -> Bool { name.hasSuffix(".nosync") || name == LocalItem.versionsFolderName }

    private func folderIsExcluded(_ ino: Int64) -> Bool {
        var chain: [Int64] = []
        var cursor = ino
        var answer = false
        while chain.count <= 4096 {
            if let known = excludedFolders.withLock({ $0[cursor] }) { answer = known; break }
            guard let folder = folders[cursor] else { break }
            chain.append(cursor)
            if Self.excludes(folder.name) { answer = true; break }
            guard let parent = folder.parent else { break }
            cursor = parent
        }
        excludedFolders.withLock { cache in
            // Everything below an excluded folder is excluded; above it, only what was known.
            for folder in chain { cache[folder] = answer }
        }
        return answer
    }

    public func status(of item: LocalItem) -> ItemStatus {
        let upload = transfers.upload(item.ino)
        return ItemStatus(item: item, excluded: isExcluded(item), pendingOps: pending[item.ino] ?? 0,
                          downloadPercent: transfers.downloadPercent(item.ino), uploading: upload.uploading,
                          uploadPercent: upload.percent, settledHere: settled[item.ino] ?? [])
    }

    /// The functions a compiled query (`SQLCompiler`) calls, answering from this snapshot and
    /// from the evaluator's own code.
    public var functions: [DatabaseFunction] {
        let snapshot = self
        @Sendable func options(_ value: DatabaseValue) -> Options { Options(rawValue: Int.fromDatabaseValue(value) ?? 0) }
        @Sendable func text(_ value: DatabaseValue) -> String { String.fromDatabaseValue(value) ?? "" }
        @Sendable func blob(_ value: DatabaseValue) -> Data { Data.fromDatabaseValue(value) ?? Data() }
        @Sendable func ino(_ value: DatabaseValue) -> Int64 { Int64.fromDatabaseValue(value) ?? 0 }
        return [
            DatabaseFunction("ubiq_text", argumentCount: 5, pure: true) { v in
                guard let op = Operator(rawValue: text(v[0])) else { return false }
                return QueryText.compare(text(v[3]), op, text(v[4]), options: options(v[1]), flipped: Int.fromDatabaseValue(v[2]) == 1)
            },
            DatabaseFunction("ubiq_equal", argumentCount: 3, pure: true) { v in QueryText.equal(text(v[1]), text(v[2]), options(v[0])) },
            DatabaseFunction("ubiq_order", argumentCount: 3, pure: true) { v in QueryText.order(text(v[1]), text(v[2]), options(v[0])) },
            DatabaseFunction("ubiq_path", argumentCount: 3) { v in
                snapshot.path(ino: ino(v[0]), parent: Int64.fromDatabaseValue(v[1]), name: text(v[2]))
            },
            DatabaseFunction("ubiq_content_type", argumentCount: 2, pure: true) { v in
                ContentTypes.type(name: text(v[0]), kind: ItemKind(rawValue: text(v[1])) ?? .file)
            },
            DatabaseFunction("ubiq_content_type_tree", argumentCount: 2, pure: true) { v in
                Self.jsonArray(ContentTypes.tree(name: text(v[0]), kind: ItemKind(rawValue: text(v[1])) ?? .file))
            },
            DatabaseFunction("ubiq_tags", argumentCount: 1, pure: true) { v in Self.jsonArray(QueryRecord.tags(in: Self.xattrs(blob(v[0])))) },
            DatabaseFunction("ubiq_xattr", argumentCount: 2, pure: true) { v in
                Self.xattrs(blob(v[0]))[text(v[1])].map { String(decoding: $0, as: UTF8.self) }
            },
            DatabaseFunction("ubiq_unsettled", argumentCount: 2) { v in
                let conflicts = (try? JSONDecoder().decode([ConflictVersion].self, from: blob(v[1]))) ?? []
                let settled = snapshot.settled[ino(v[0])] ?? []
                return conflicts.contains { !settled.contains($0.id) }
            },
            DatabaseFunction("ubiq_downloading", argumentCount: 1) { v in snapshot.transfers.downloadPercent(ino(v[0])) != nil },
            DatabaseFunction("ubiq_download_percent", argumentCount: 1) { v in snapshot.transfers.downloadPercent(ino(v[0])) ?? 0 },
            DatabaseFunction("ubiq_uploading", argumentCount: 1) { v in snapshot.transfers.upload(ino(v[0])).uploading },
            DatabaseFunction("ubiq_upload_percent", argumentCount: 1) { v in snapshot.transfers.upload(ino(v[0])).percent ?? 0 },
        ]
    }

    static func jsonArray(_ strings: [String]) -> String {
        String(decoding: (try? JSONEncoder().encode(strings)) ?? Data("[]".utf8), as: UTF8.self)
    }

    /// The `xattrs` column: a JSON object of base64 values (`LocalItem`'s encoding).
    static func xattrs(_ blob: Data) -> [String: Data] {
        guard blob.count > 2 else { return [:] }
        return (try? JSONDecoder().decode([String: Data].self, from: blob)) ?? [:]
    }
}
