import Foundation
import ItemModel

/// The `user.ubiq.*` status attributes (docs/SEMANTICS.md, "Extended attributes"), computed
/// from local state alone: reading them never downloads anything.
public struct ItemStatus: Sendable, Equatable {
    public var downloadingStatus: String
    public var isDownloading: Bool
    public var percentDownloaded: Int
    public var isUploaded: Bool
    public var isUploading: Bool
    public var percentUploaded: Int
    public var hasUnresolvedConflicts: Bool
    /// The file's conflict versions, oldest edit first.
    public var conflictVersions: [ConflictVersionEntry]
    public var downloadingError: String?
    public var uploadingError: String?
    public var pinned: Bool
    public var itemID: String
    public var revision: String?
    /// The item's links (`ubiq share`) as this mount knows them, not expired.
    public var shares: [KnownShare]

    /// Every value `downloadingStatus` takes.
    public static let downloadingStatuses = ["current", "downloaded", "notDownloaded", "excluded"]

    /// `downloadingStatus` from the row alone: the one rule the attributes, the queries and the
    /// counts by state (`LocalReader.count(downloadingStatuses:)`) share.
    public static func downloadingStatus(kind: ItemKind, content: ContentState, excluded: Bool) -> String {
        if excluded { return "excluded" }
        if kind == .folder || content.isWhole { return "current" }
        return content == .stale ? "downloaded" : "notDownloaded"
    }

    public static let prefix = "user.ubiq."
    public static let writable: Set<String> = ["user.ubiq.pinned", "user.ubiq.downloadingStatus", "user.ubiq.resolve"]

    /// - Parameters:
    ///   - pendingOps: changes of this item still in the outbox.
    ///   - downloadPercent: progress of a running download, nil when none runs.
    ///   - uploading / uploadPercent: whether the outbox is sending this item right now.
    ///   - settledHere: conflict versions a resolution chosen here drops, before the server has it.
    public init(
        item: LocalItem, excluded: Bool, pendingOps: Int, downloadPercent: Int?, uploading: Bool, uploadPercent: Int?, settledHere: Set<ItemID> = [],
        shares: [KnownShare] = []
    ) {
        self.shares = shares
        let local = item.kind == .folder || item.content.isWhole
        downloadingStatus = Self.downloadingStatus(kind: item.kind, content: item.content, excluded: excluded)
        isDownloading = downloadPercent != nil
        percentDownloaded = local || item.content == .stale ? 100 : (downloadPercent ?? 0)
        let unsent = !excluded && (pendingOps > 0 || item.content == .dirty || item.revision == nil)
        isUploaded = !unsent
        isUploading = uploading
        percentUploaded = unsent ? (uploadPercent ?? 0) : 100
        conflictVersions = item.conflicts.filter { !settledHere.contains($0.id) }
            .sorted { ($0.modified, $0.id.rawValue) < ($1.modified, $1.id.rawValue) }
            .map { ConflictVersionEntry($0, of: item.name) }
        hasUnresolvedConflicts = !conflictVersions.isEmpty
        downloadingError = item.downloadError
        uploadingError = item.uploadError
        pinned = item.pinned
        itemID = item.itemID.rawValue
        revision = item.revision?.rawValue
    }

    /// The names `attributes` has, in the same order, knowing only which optional ones are present.
    public static func names(downloadingError: Bool, uploadingError: Bool, revision: Bool, conflictVersions: Bool, shares: Bool = false) -> [String] {
        var out = ["user.ubiq.downloadingStatus", "user.ubiq.isDownloading", "user.ubiq.percentDownloaded", "user.ubiq.isUploaded",
                   "user.ubiq.isUploading", "user.ubiq.percentUploaded", "user.ubiq.hasUnresolvedConflicts"]
        if conflictVersions { out.append("user.ubiq.conflictVersions") }
        if downloadingError { out.append("user.ubiq.downloadingError") }
        if uploadingError { out.append("user.ubiq.uploadingError") }
        out += ["user.ubiq.pinned", "user.ubiq.itemID"]
        if revision { out.append("user.ubiq.revision") }
        if shares { out.append("user.ubiq.shares") }
        return out
    }

    /// Name and value of every attribute that is present, in the order `listxattr` gives them
    /// (docs/SEMANTICS.md, "Extended attributes").
    public var attributes: [(String, String)] {
        var out: [(String, String)] = [
            ("user.ubiq.downloadingStatus", downloadingStatus),
            ("user.ubiq.isDownloading", isDownloading ? "1" : "0"),
            ("user.ubiq.percentDownloaded", String(percentDownloaded)),
            ("user.ubiq.isUploaded", isUploaded ? "1" : "0"),
            ("user.ubiq.isUploading", isUploading ? "1" : "0"),
            ("user.ubiq.percentUploaded", String(percentUploaded)),
            ("user.ubiq.hasUnresolvedConflicts", hasUnresolvedConflicts ? "1" : "0"),
        ]
        if !conflictVersions.isEmpty { out.append(("user.ubiq.conflictVersions", Self.listing(conflictVersions))) }
        if let downloadingError { out.append(("user.ubiq.downloadingError", downloadingError)) }
        if let uploadingError { out.append(("user.ubiq.uploadingError", uploadingError)) }
        out.append(("user.ubiq.pinned", pinned ? "1" : "0"))
        out.append(("user.ubiq.itemID", itemID))
        if let revision { out.append(("user.ubiq.revision", revision)) }
        if !shares.isEmpty { out.append(("user.ubiq.shares", Self.listing(shares))) }
        return out
    }

    /// The value of `user.ubiq.shares`: a JSON array, one object per link (`url`, and
    /// `expires` in ISO 8601 when it has an expiry), keys sorted.
    public static func listing(_ shares: [KnownShare]) -> String {
        let objects: [[String: String]] = shares.map { share in
            var object = ["url": share.url]
            if let expires = share.expires { object["expires"] = WallClock.isoSeconds(of: expires) }
            return object
        }
        let data = (try? JSONSerialization.data(withJSONObject: objects, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("[]".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}

extension ItemStatus {
    /// An attribute's text (as `attributes` writes it) as a JSON value, for `ubiq status
    /// --json`: flags as booleans, percentages as numbers, the conflict versions as their
    /// array, the rest as strings. `name` is the whole name or the part after `user.ubiq.`.
    public static func jsonValue(of name: String, _ text: String) -> Any {
        switch name.hasPrefix(prefix) ? String(name.dropFirst(prefix.count)) : name {
        case "isDownloading", "isUploaded", "isUploading", "hasUnresolvedConflicts", "pinned": return text == "1"
        case "percentDownloaded", "percentUploaded": return Int(text) ?? text
        case "conflictVersions", "shares": return (try? JSONSerialization.jsonObject(with: Data(text.utf8))) ?? text
        default: return text
        }
    }

    /// The value of `user.ubiq.conflictVersions`: a JSON array, one object per version, keys
    /// sorted, so that scripts read it with any JSON tool and `ubiq versions` prints it.
    public static func listing(_ versions: [ConflictVersionEntry]) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(versions)) ?? Data("[]".utf8), as: UTF8.self)
    }
}
