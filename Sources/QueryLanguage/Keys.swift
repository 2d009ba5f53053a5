/// What a key's values are, for type checking (rule S13).
public enum ValueType: String, Sendable, Equatable {
    case string, number, date, bool
    /// `downloadingStatus`: one of `DownloadingStatus`.
    case downloadingStatus
    /// Several strings (`tags`, `contentTypeTree`): compared element by element.
    case strings
}

/// A key the index answers, by its short name (what `--json` prints, rule K4).
public struct Key: Hashable, Sendable {
    public let name: String
    public let type: ValueType

    /// `xattr.NAME`: a synced extended attribute, as a string (absent: nil).
    public static func xattr(_ attribute: String) -> Key { Key(name: "xattr." + attribute, type: .string) }
}

/// The key table (K rules): each key under its short name, Apple's constant name and the raw
/// string the constant stands for; any of the three names it in a query.
public enum KeyTable {
    static let rows: [(short: String, constant: String?, raw: String?, type: ValueType)] = [
        ("name", "NSMetadataItemFSNameKey", "kMDItemFSName", .string),
        ("displayName", "NSMetadataItemDisplayNameKey", "kMDItemDisplayName", .string),
        ("url", "NSMetadataItemURLKey", "kMDItemURL", .string),
        ("path", "NSMetadataItemPathKey", "kMDItemPath", .string),
        ("size", "NSMetadataItemFSSizeKey", "kMDItemFSSize", .number),
        ("created", "NSMetadataItemFSCreationDateKey", "kMDItemFSCreationDate", .date),
        ("modified", "NSMetadataItemFSContentChangeDateKey", "kMDItemFSContentChangeDate", .date),
        ("contentType", "NSMetadataItemContentTypeKey", "kMDItemContentType", .string),
        ("contentTypeTree", "NSMetadataItemContentTypeTreeKey", "kMDItemContentTypeTree", .strings),
        ("isUbiquitous", "NSMetadataItemIsUbiquitousKey", nil, .bool),
        ("downloadingStatus", "NSMetadataUbiquitousItemDownloadingStatusKey", nil, .downloadingStatus),
        ("isDownloading", "NSMetadataUbiquitousItemIsDownloadingKey", nil, .bool),
        ("percentDownloaded", "NSMetadataUbiquitousItemPercentDownloadedKey", nil, .number),
        ("downloadRequested", "NSMetadataUbiquitousItemDownloadRequestedKey", nil, .bool),
        ("isDownloaded", "NSMetadataUbiquitousItemIsDownloadedKey", nil, .bool),
        ("hasUnresolvedConflicts", "NSMetadataUbiquitousItemHasUnresolvedConflictsKey", nil, .bool),
        ("isUploaded", "NSMetadataUbiquitousItemIsUploadedKey", nil, .bool),
        ("isUploading", "NSMetadataUbiquitousItemIsUploadingKey", nil, .bool),
        ("percentUploaded", "NSMetadataUbiquitousItemPercentUploadedKey", nil, .number),
        ("downloadingError", "NSMetadataUbiquitousItemDownloadingErrorKey", nil, .string),
        ("uploadingError", "NSMetadataUbiquitousItemUploadingErrorKey", nil, .string),
        ("isExternalDocument", "NSMetadataUbiquitousItemIsExternalDocumentKey", nil, .bool),
        ("containerDisplayName", "NSMetadataUbiquitousItemContainerDisplayNameKey", nil, .string),
        ("urlInLocalContainer", "NSMetadataUbiquitousItemURLInLocalContainerKey", nil, .string),
        ("isShared", "NSMetadataUbiquitousItemIsSharedKey", nil, .bool),
        ("pinned", nil, nil, .bool),
        ("tags", nil, nil, .strings),
    ]

    static let byName: [String: Key] = {
        var table: [String: Key] = [:]
        for row in rows {
            let key = Key(name: row.short, type: row.type)
            for name in [row.short, row.constant, row.raw].compactMap({ $0 }) { table[name] = key }
        }
        return table
    }()

    /// The key a name stands for; nil when none. Names are case-sensitive (rule G2).
    public static func key(named name: String) -> Key? {
        if name.hasPrefix("xattr."), name.count > 6 { return .xattr(String(name.dropFirst(6))) }
        return byName[name]
    }
}

/// The values of `downloadingStatus` under their short names, and every spelling apps use (S15).
public enum DownloadingStatus: String, Sendable, CaseIterable {
    case notDownloaded, downloaded, current, excluded

    public init?(spelling: String) {
        for prefix in ["NSMetadataUbiquitousItemDownloadingStatus", "NSURLUbiquitousItemDownloadingStatus"] where spelling.hasPrefix(prefix) {
            let rest = spelling.dropFirst(prefix.count)
            guard let first = rest.first else { return nil }
            self.init(rawValue: first.lowercased() + rest.dropFirst())
            if self == .excluded { return nil }  // Apple has no such spelling
            return
        }
        self.init(rawValue: spelling)
    }
}
