import ControlSocket
import Foundation
import ItemAttributes
import ItemModel
import MountInfo
import SyncAPI

/// A version of a file in a mount (NSFileVersion): its current content, a conflict version (an
/// edit that reached the server after another from the same base, kept beside the file until
/// someone chooses, docs/SEMANTICS.md, "Conflicts"), or an earlier content the server keeps.
///
/// The mount resolves a file's conflict versions together, on every device: keeping the current
/// content, making one version current, or keeping each as a file beside it. So setting
/// `isResolved` on one conflict version resolves them all (keeping the current content), as do
/// `replaceItem(at:)` and `removeOtherVersionsOfItem(at:)`.
public struct FileVersion: Sendable, Hashable {
    public enum Kind: Sendable, Hashable {
        case current
        case conflict
        /// An earlier content the server keeps (`ubiq-server --keep-versions`).
        case earlier
    }

    public let kind: Kind
    /// The file this is a version of.
    public let itemURL: URL
    /// Where the version's content reads: the file itself, the conflict version's read-only
    /// file in the mount's `.ubiq-versions` folder (downloaded when opened), or nil for an
    /// earlier content, which cannot be read in place yet.
    public let url: URL?
    /// `current`, the conflict version's identifier, or the earlier content's revision.
    public let persistentIdentifier: String
    public let modificationDate: Date?
    /// The device that made it (its `ubiq mount --device` name), when known.
    public let localizedNameOfSavingComputer: String?
    public let size: Int64
    /// SHA-256 of the content, hex; nil for the current version.
    public let digest: String?
    let registry: MountRegistryLocation

    public var isConflict: Bool { kind == .conflict }

    /// True once the conflict version is no longer the file's (resolved here or on any device);
    /// always true for the other kinds. Read afresh from the file at each call.
    ///
    /// Set to true, as Apple's code does for each conflict version before
    /// `removeOtherVersionsOfItem(at:)`: the file keeps its current content and every conflict
    /// version goes, on every device. Setting false does nothing: a resolution is not undone.
    /// A failure is dropped, as Apple's setter drops it: read `isResolved` again to know.
    public var isResolved: Bool {
        get {
            guard kind == .conflict else { return true }
            return !((try? Self.conflictEntries(of: itemURL)) ?? []).contains { $0.id == persistentIdentifier }
        }
        nonmutating set {
            guard newValue, !isResolved else { return }
            try? Self.resolve(itemURL, "keep-current")
        }
    }

    /// The file's current version; nil for anything but a file in a mount.
    public static func currentVersionOfItem(at url: URL, registry: MountRegistryLocation = .standard) -> FileVersion? {
        guard let info = try? file(url).1 else { return nil }
        return FileVersion(
            kind: .current, itemURL: url, url: url, persistentIdentifier: "current",
            modificationDate: Date(timeIntervalSince1970: Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9),
            localizedNameOfSavingComputer: nil, size: Int64(info.st_size), digest: nil, registry: registry)
    }

    /// The file's conflict versions, oldest edit first, from the mount's local state (nothing is
    /// downloaded); nil for anything but a file in a mount.
    public static func unresolvedConflictVersionsOfItem(at url: URL, registry: MountRegistryLocation = .standard) -> [FileVersion]? {
        guard let absolute = try? file(url).0, let top = MountInfo.ubiqMount(containing: absolute), let entries = try? conflictEntries(of: url) else {
            return nil
        }
        return entries.map { entry in
            FileVersion(
                kind: .conflict, itemURL: url, url: URL(fileURLWithPath: (top == "/" ? "" : top) + "/" + entry.path), persistentIdentifier: entry.id,
                modificationDate: MetadataItem.date(entry.modified), localizedNameOfSavingComputer: entry.device, size: entry.size,
                digest: entry.digest, registry: registry)
        }
    }

    /// Every version but the current one: the conflict versions, then the earlier contents the
    /// server keeps, the most recently replaced first. Asks the server through the mount for
    /// the earlier ones, so it throws when the server cannot be reached.
    public static func otherVersionsOfItem(at url: URL, registry: MountRegistryLocation = .standard) throws(UbiqKitError) -> [FileVersion] {
        let (_, info) = try file(url)
        let conflicts = unresolvedConflictVersionsOfItem(at: url, registry: registry) ?? []
        let mount = try RunningMount.containing(url, in: registry).mount
        let report: EarlierVersionsReport = try mount.call("GET", ControlPath.earlierVersions + "?ino=\(info.st_ino)", timeout: 70)
        if let error = report.error { throw .refused(error) }
        return conflicts + (report.versions ?? []).map { version in
            FileVersion(
                kind: .earlier, itemURL: url, url: nil, persistentIdentifier: version.revision.rawValue,
                modificationDate: Date(timeIntervalSince1970: Double(version.modified) / 1e9), localizedNameOfSavingComputer: version.device,
                size: version.size, digest: version.digest.hex, registry: registry)
        }
    }

    /// Makes this version the file's content. A conflict version becomes current as a new
    /// revision (nothing is uploaded: the server has it) and the file's other conflict versions
    /// go, on every device; an earlier content is restored as a new revision (needs the
    /// server). Returns `url`. Only the file this is a version of can be replaced.
    @discardableResult
    public func replaceItem(at url: URL) throws(UbiqKitError) -> URL {
        guard MountLookup.absolute(url.path) == MountLookup.absolute(itemURL.path) else {
            throw .refused("a version replaces only the file it is a version of (\(itemURL.path))")
        }
        switch kind {
        case .current:
            return url
        case .conflict:
            try Self.resolve(url, "keep:" + persistentIdentifier)
        case .earlier:
            let (_, info) = try Self.file(url)
            let mount = try RunningMount.containing(url, in: registry).mount
            let report: RestoreReport = try mount.call("POST", ControlPath.restore + "?ino=\(info.st_ino)&revision=\(persistentIdentifier)", timeout: 70)
            if let error = report.error { throw .refused(error) }
        }
        return url
    }

    /// Drops every conflict version of the file and keeps its current content, on every device
    /// (earlier contents stay on the server for its retention). Nothing to do without conflict
    /// versions.
    public static func removeOtherVersionsOfItem(at url: URL) throws(UbiqKitError) {
        guard try !conflictEntries(of: url).isEmpty else { return }
        try resolve(url, "keep-current")
    }

    /// Keeps the current content and turns each conflict version into a file beside it,
    /// `NAME (conflicted copy from DEVICE YYYY-MM-DD HHMMSS).EXT`. No counterpart in Apple's API.
    public static func keepConflictVersionsAsCopies(ofItemAt url: URL) throws(UbiqKitError) {
        guard try !conflictEntries(of: url).isEmpty else { return }
        try resolve(url, "keep-both")
    }

    // A resolution is queued like any change and shows at once; the other devices follow once
    // the server has it.
    static func resolve(_ url: URL, _ choice: String) throws(UbiqKitError) {
        try UbiquitousItem.setAttribute(url, "user.ubiq.resolve", choice)
    }

    /// The versions `user.ubiq.conflictVersions` lists; none when it is absent.
    static func conflictEntries(of url: URL) throws(UbiqKitError) -> [ConflictVersionEntry] {
        let (absolute, _) = try file(url)
        guard let listing = Xattr.get(absolute, "user.ubiq.conflictVersions") else { return [] }
        do { return try JSONDecoder().decode([ConflictVersionEntry].self, from: Data(listing.utf8)) } catch {
            throw .refused("\(url.path): the mount lists its versions in a form this UbiqKit does not read: \(error)")
        }
    }

    /// A file in a mount, with its `stat`: only files have versions.
    static func file(_ url: URL) throws(UbiqKitError) -> (String, stat) {
        let absolute = try UbiquitousItem.inMount(url)
        var info = stat()
        guard stat(absolute, &info) == 0 else { throw .posix(errno, path: url.path) }
        guard (info.st_mode & S_IFMT) == S_IFREG else { throw .refused("\(url.path) is not a file: only files have versions") }
        return (absolute, info)
    }
}
