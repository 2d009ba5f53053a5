import Foundation
import QueryLanguage
import SyncAPI

/// A file's or folder's download state (NSURLUbiquitousItemDownloadingStatus), as
/// `user.ubiq.downloadingStatus` and queries give it.
public enum UbiquitousItemDownloadingStatus: String, Sendable, Hashable {
    /// The content here is the server's latest (a folder always is).
    case current
    /// A copy is here, but the server has newer content.
    case downloaded
    /// A placeholder: no content here.
    case notDownloaded
    /// Below a `.nosync` folder: never synced (no counterpart in Apple's API).
    case excluded

    /// The value NSMetadataQuery gives under `NSMetadataUbiquitousItemDownloadingStatusKey`.
    public var metadataValue: String {
        switch self {
        case .current: NSMetadataUbiquitousItemDownloadingStatusCurrent
        case .downloaded: NSMetadataUbiquitousItemDownloadingStatusDownloaded
        case .notDownloaded: NSMetadataUbiquitousItemDownloadingStatusNotDownloaded
        case .excluded: "excluded"
        }
    }
}

/// One item a `MetadataQuery` found (NSMetadataItem): what the mount's database holds of it,
/// placeholders included, as of the query's last update.
public struct MetadataItem: Sendable, Hashable, Identifiable {
    /// The item's server identity: the same across renames and moves, and on every device.
    public var id: String { record.itemID }
    /// The item as the daemon reported it (the keys' short names).
    public let record: QueryResultItem
    /// The mount's top: `url` and `NSMetadataItemPathKey` are in this file system.
    public let mountpoint: String

    public init(record: QueryResultItem, mountpoint: String) {
        self.record = record
        self.mountpoint = mountpoint
    }

    /// By identity: an item keeps its hash across a change (equality still compares every value).
    public func hash(into hasher: inout Hasher) {
        hasher.combine(record.itemID)
        hasher.combine(mountpoint)
    }

    public var url: URL { URL(fileURLWithPath: mountpoint + record.path, isDirectory: record.kind == "folder") }
    /// The item's path in the container, with a leading `/`.
    public var containerPath: String { record.path }
    public var name: String { record.name }
    public var downloadingStatus: UbiquitousItemDownloadingStatus? { UbiquitousItemDownloadingStatus(rawValue: record.downloadingStatus) }

    /// The value of an attribute under Apple's constant (`NSMetadataItemFSNameKey`), its raw
    /// Spotlight name (`kMDItemFSName`) or the query language's short name (`name`); nil for
    /// an attribute a query's results do not carry (docs/UBIQKIT.md lists them). Sizes are
    /// `Int64`, percentages `Double`, flags `Bool`, dates `Date`, tags `[String]`.
    public func value(forAttribute attribute: String) -> Any? {
        guard let key = KeyTable.key(named: attribute)?.name else { return nil }
        switch key {
        case "name", "displayName": return record.name
        case "url": return url
        case "path": return mountpoint + record.path
        case "size": return record.size
        case "created": return Self.date(record.created)
        case "modified": return Self.date(record.modified)
        case "contentType": return record.contentType
        case "isUbiquitous": return record.downloadingStatus != UbiquitousItemDownloadingStatus.excluded.rawValue
        case "downloadingStatus": return downloadingStatus?.metadataValue ?? record.downloadingStatus
        case "isDownloading": return record.isDownloading
        case "percentDownloaded": return Double(record.percentDownloaded)
        case "isDownloaded": return record.downloadingStatus == "current" || record.downloadingStatus == "downloaded"
        case "hasUnresolvedConflicts": return record.hasUnresolvedConflicts
        case "isUploaded": return record.isUploaded
        case "isUploading": return record.isUploading
        case "percentUploaded": return Double(record.percentUploaded)
        case "isExternalDocument": return false
        case "pinned": return record.pinned
        case "tags": return record.tags
        default: return nil
        }
    }

    /// The attribute as text, as the daemon writes group and value-list values: numbers without
    /// a needless fraction, dates in ISO 8601, booleans `1`/`0`. Several values (tags) are each
    /// a text; none is an empty list.
    func texts(forAttribute attribute: String) -> [String] {
        guard let value = value(forAttribute: attribute) else { return [] }
        switch value {
        case let strings as [String]: return strings
        case let flag as Bool: return [flag ? "1" : "0"]
        case let number as Double: return [number.rounded() == number ? String(Int64(number)) : String(number)]
        case let number as Int64: return [String(number)]
        case let date as Date: return [Self.iso(date)]
        case let url as URL: return [url.path]
        default: return ["\(value)"]
        }
    }

    static func date(_ text: String) -> Date? { try? Date(text, strategy: .iso8601) }
    static func iso(_ date: Date) -> String { date.formatted(.iso8601) }
}

// Apple's names, where Foundation has none (it has them on Apple's systems, as these values).
#if !canImport(Darwin)
public let NSMetadataItemFSNameKey = "kMDItemFSName"
public let NSMetadataItemDisplayNameKey = "kMDItemDisplayName"
public let NSMetadataItemURLKey = "kMDItemURL"
public let NSMetadataItemPathKey = "kMDItemPath"
public let NSMetadataItemFSSizeKey = "kMDItemFSSize"
public let NSMetadataItemFSCreationDateKey = "kMDItemFSCreationDate"
public let NSMetadataItemFSContentChangeDateKey = "kMDItemFSContentChangeDate"
public let NSMetadataItemContentTypeKey = "kMDItemContentType"
public let NSMetadataItemContentTypeTreeKey = "kMDItemContentTypeTree"
public let NSMetadataItemIsUbiquitousKey = "NSMetadataItemIsUbiquitousKey"
public let NSMetadataUbiquitousItemDownloadingStatusKey = "NSMetadataUbiquitousItemDownloadingStatusKey"
public let NSMetadataUbiquitousItemIsDownloadingKey = "NSMetadataUbiquitousItemIsDownloadingKey"
public let NSMetadataUbiquitousItemPercentDownloadedKey = "NSMetadataUbiquitousItemPercentDownloadedKey"
public let NSMetadataUbiquitousItemIsDownloadedKey = "NSMetadataUbiquitousItemIsDownloadedKey"
public let NSMetadataUbiquitousItemHasUnresolvedConflictsKey = "NSMetadataUbiquitousItemHasUnresolvedConflictsKey"
public let NSMetadataUbiquitousItemIsUploadedKey = "NSMetadataUbiquitousItemIsUploadedKey"
public let NSMetadataUbiquitousItemIsUploadingKey = "NSMetadataUbiquitousItemIsUploadingKey"
public let NSMetadataUbiquitousItemPercentUploadedKey = "NSMetadataUbiquitousItemPercentUploadedKey"
public let NSMetadataUbiquitousItemIsExternalDocumentKey = "NSMetadataUbiquitousItemIsExternalDocumentKey"
public let NSMetadataUbiquitousItemDownloadingStatusCurrent = "NSMetadataUbiquitousItemDownloadingStatusCurrent"
public let NSMetadataUbiquitousItemDownloadingStatusDownloaded = "NSMetadataUbiquitousItemDownloadingStatusDownloaded"
public let NSMetadataUbiquitousItemDownloadingStatusNotDownloaded = "NSMetadataUbiquitousItemDownloadingStatusNotDownloaded"
#endif
