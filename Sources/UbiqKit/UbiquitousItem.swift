import ControlSocket
import Foundation
import ItemAttributes
import MountInfo
import SyncAPI

/// A download or upload that failed, in the mount's words (`user.ubiq.downloadingError`,
/// `user.ubiq.uploadingError`).
public struct UbiquitousItemError: Error, Sendable, Hashable, CustomStringConvertible {
    public var description: String
}

/// An item's sync state (the ubiquitous `URLResourceValues`), read from its `user.ubiq.*`
/// attributes (docs/SEMANTICS.md, "Extended attributes"): from the mount's local state, never
/// waiting for the server or downloading anything.
public struct UbiquitousResourceValues: Sendable, Hashable {
    /// Everything in a mount but `.nosync` items and what is below them.
    public var isUbiquitousItem: Bool
    public var ubiquitousItemDownloadingStatus: UbiquitousItemDownloadingStatus?
    public var ubiquitousItemIsDownloading: Bool
    /// 0 to 100 (NSMetadataUbiquitousItemPercentDownloadedKey: the URL keys have no percentage).
    public var ubiquitousItemPercentDownloaded: Double
    public var ubiquitousItemDownloadingError: UbiquitousItemError?
    public var ubiquitousItemIsUploaded: Bool
    public var ubiquitousItemIsUploading: Bool
    public var ubiquitousItemPercentUploaded: Double
    public var ubiquitousItemUploadingError: UbiquitousItemError?
    public var ubiquitousItemHasUnresolvedConflicts: Bool
    /// Always kept on this device (`ubiq pin`); no counterpart in Apple's API.
    public var ubiquitousItemIsPinned: Bool
    /// The item's server identity, the same on every device.
    public var ubiquitousItemIdentifier: String?
}

/// What a program does to an item in a mount, as `FileManager`'s ubiquitous-item calls do: on
/// its `user.ubiq.*` attributes for files and folders, through the mount's daemon for the
/// rest (links, FIFOs and sockets, which Linux keeps `user.*` attributes off).
public enum UbiquitousItem {
    /// The item's sync state; throws for a path outside a mount or one that is not there.
    public static func resourceValues(at url: URL, registry: MountRegistryLocation = .standard) throws(UbiqKitError) -> UbiquitousResourceValues {
        let path = try inMount(url)
        var info = stat()
        guard lstat(path, &info) == 0 else { throw .posix(errno, path: path) }
        let attributes: [String: String]
        let type = info.st_mode & S_IFMT
        if type == S_IFREG || type == S_IFDIR {
            guard let status = Xattr.get(path, "user.ubiq.downloadingStatus") else { throw .refused("\(path) has no status attributes") }
            var read = ["downloadingStatus": status]
            for name in ["isDownloading", "percentDownloaded", "downloadingError", "isUploaded", "isUploading", "percentUploaded", "uploadingError",
                         "hasUnresolvedConflicts", "pinned", "itemID"] {
                read[name] = Xattr.get(path, "user.ubiq." + name)
            }
            attributes = read
        } else {
            let (mount, inside) = try RunningMount.containing(url, in: registry)
            let report: ItemStatusReport = try mount.call("GET", ControlPath.itemStatus + "?path=" + APIPath.percentEncoded(inside))
            if let error = report.error { throw .refused(error) }
            attributes = Dictionary(report.attributes.map { (String($0.key.dropFirst("user.ubiq.".count)), $0.value) }, uniquingKeysWith: { a, _ in a })
        }
        let status = attributes["downloadingStatus"].flatMap(UbiquitousItemDownloadingStatus.init(rawValue:))
        return UbiquitousResourceValues(
            isUbiquitousItem: status != .excluded, ubiquitousItemDownloadingStatus: status,
            ubiquitousItemIsDownloading: attributes["isDownloading"] == "1",
            ubiquitousItemPercentDownloaded: attributes["percentDownloaded"].flatMap(Double.init) ?? 0,
            ubiquitousItemDownloadingError: attributes["downloadingError"].map(UbiquitousItemError.init(description:)),
            ubiquitousItemIsUploaded: attributes["isUploaded"] == "1", ubiquitousItemIsUploading: attributes["isUploading"] == "1",
            ubiquitousItemPercentUploaded: attributes["percentUploaded"].flatMap(Double.init) ?? 0,
            ubiquitousItemUploadingError: attributes["uploadingError"].map(UbiquitousItemError.init(description:)),
            ubiquitousItemHasUnresolvedConflicts: attributes["hasUnresolvedConflicts"] == "1", ubiquitousItemIsPinned: attributes["pinned"] == "1",
            ubiquitousItemIdentifier: attributes["itemID"])
    }

    /// Starts downloading the file, or every file below the folder, and returns at once;
    /// `resourceValues` and a `MetadataQuery` show the progress. What has not arrived when the
    /// mount stops goes on at the next mount.
    public static func startDownloading(at url: URL) throws(UbiqKitError) {
        try setAttribute(url, "user.ubiq.downloadingStatus", "current")
    }

    /// Drops the local content and keeps the placeholder (every file below a folder). Refused
    /// with `EBUSY` while the file is open or has changes not on the server yet.
    public static func evict(at url: URL) throws(UbiqKitError) {
        try setAttribute(url, "user.ubiq.downloadingStatus", "notDownloaded")
    }

    /// Pinned: always kept on this device, downloaded now (recursively for a folder); unpinned:
    /// the cache limit may evict it again.
    public static func setPinned(_ pinned: Bool, at url: URL) throws(UbiqKitError) {
        try setAttribute(url, "user.ubiq.pinned", pinned ? "1" : "0")
    }

    /// A link on the server to a read-only snapshot of the file, or of the files below the
    /// folder, as they are now (`url(forPublishingUbiquitousItemAt:expiration:)`); anyone with it
    /// fetches the content without an account. `expiringAfter` nil: it lasts until removed
    /// (`ubiq unshare`). Refused while the item has changes not on the server yet. Asks the
    /// server through the mount, so it blocks until the server answers (at most about 70 s).
    public static func publishingURL(
        forItemAt url: URL, expiringAfter lifetime: Duration? = nil, registry: MountRegistryLocation = .standard
    ) throws(UbiqKitError) -> (url: URL, expiration: Date?) {
        let (mount, inside) = try RunningMount.containing(url, in: registry)
        var target = ControlPath.share + "?path=" + APIPath.percentEncoded(inside)
        if let lifetime { target += "&expires=\(max(1, lifetime.components.seconds))" }
        // The daemon waits for the server, as `ubiq share` does.
        let report: ShareReport = try mount.call("POST", target, timeout: 70)
        if let error = report.error { throw .refused(error) }
        guard let line = report.shares.first, let link = URL(string: line.url) else { throw .refused("the mount made no link") }
        return (link, line.share.expires.map { Date(timeIntervalSince1970: Double($0) / 1e9) })
    }

    /// The item's absolute path; throws outside a mount, where these attribute names would be
    /// set on an ordinary file as its own.
    static func inMount(_ url: URL) throws(UbiqKitError) -> String {
        let absolute = MountLookup.absolute(url.path)
        guard MountInfo.ubiqMount(containing: absolute) != nil else { throw .notInMount(url.path) }
        return absolute
    }

    static func setAttribute(_ url: URL, _ name: String, _ value: String) throws(UbiqKitError) {
        let path = try inMount(url)
        let code = Xattr.set(path, name, value)
        guard code == 0 else { throw .posix(code, path: url.path) }
    }
}

#if !canImport(Darwin)
extension FileManager {
    /// `UbiquitousItem.startDownloading(at:)`, under Apple's name.
    public func startDownloadingUbiquitousItem(at url: URL) throws {
        try UbiquitousItem.startDownloading(at: url)
    }

    /// `UbiquitousItem.evict(at:)`, under Apple's name.
    public func evictUbiquitousItem(at url: URL) throws {
        try UbiquitousItem.evict(at: url)
    }

    /// True for an item in a mount that syncs (not `.nosync`).
    public func isUbiquitousItem(at url: URL) -> Bool {
        (try? UbiquitousItem.resourceValues(at: url).isUbiquitousItem) ?? false
    }
}
#endif
