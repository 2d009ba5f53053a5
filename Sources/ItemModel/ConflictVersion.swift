/// An edit of a file that reached the server after another edit from the same base: kept beside
/// the file's current content until someone chooses (`NSFileVersion`'s unresolved conflict
/// versions). Its content is a blob like any other, shared by digest.
public struct ConflictVersion: Hashable, Sendable, Codable {
    /// Chosen by the device that sends it, as item IDs are: a retried send adds nothing twice.
    public var id: ItemID
    public var digest: ContentDigest
    public var size: Int64
    /// The device whose edit it is (its `--device` name).
    public var device: String
    /// The edit's modification time.
    public var modified: Timestamp
    /// The revision the edit was made from.
    public var base: Revision

    public init(id: ItemID, digest: ContentDigest, size: Int64, device: String, modified: Timestamp, base: Revision) {
        self.id = id
        self.digest = digest
        self.size = size
        self.device = device
        self.modified = modified
        self.base = base
    }

    /// The longest device name a version carries: it becomes part of a file name at `--keep-both`.
    public static let maxDeviceBytes = 64
}

extension ConflictVersion {
    /// A device name a version may carry: 1 to `maxDeviceBytes` bytes of UTF-8.
    public static func isValidDevice(_ name: String) -> Bool { (1...maxDeviceBytes).contains(name.utf8.count) }

    /// The folder at the top of a mount that shows every conflict version as a read-only file.
    public static let folderName = ".ubiq-versions"

    /// A version's file in that folder: its identifier, with the extension of the file it is a
    /// version of (`NAME.EXT`), so that editors and `file` take it for the same kind.
    public static func fileName(_ id: ItemID, of name: String) -> String {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return id.rawValue }
        return id.rawValue + name[dot...]
    }
}

/// One version as the mount lists it in `user.ubiq.conflictVersions` and `ubiq versions` reads
/// it: text a script can use, the time in UTC, ISO 8601 to the second, and where to read it
/// (`path`, relative to the top of the mount).
public struct ConflictVersionEntry: Codable, Equatable, Sendable {
    public var id: String
    public var device: String
    public var modified: String
    public var size: Int64
    public var digest: String
    public var path: String

    /// `name`: the name of the file it is a version of.
    public init(_ version: ConflictVersion, of name: String) {
        id = version.id.rawValue
        device = version.device
        modified = WallClock.isoSeconds(of: version.modified)
        size = version.size
        digest = version.digest.hex
        path = ConflictVersion.folderName + "/" + ConflictVersion.fileName(version.id, of: name)
    }
}

/// A choice among a file's conflict versions made on a device, until the server has it: the
/// versions seen when it was made go (`settled`), and `keep`, one of them, becomes current
/// (nil keeps the current content); each of `copies` (settled too) becomes a sibling file
/// (`--keep-both`). A version that arrives later is in none and stays.
public struct ConflictResolution: Codable, Hashable, Sendable {
    public var settled: Set<ItemID>
    public var keep: ItemID?
    public var copies: Set<ItemID>

    public init(settled: Set<ItemID>, keep: ItemID?, copies: Set<ItemID> = []) {
        self.settled = settled
        self.keep = keep
        self.copies = copies
    }

    enum CodingKeys: String, CodingKey { case settled, keep, copies }

    /// A resolution recorded before copies existed has none.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        settled = try c.decode(Set<ItemID>.self, forKey: .settled)
        keep = try c.decodeIfPresent(ItemID.self, forKey: .keep)
        copies = try c.decodeIfPresent(Set<ItemID>.self, forKey: .copies) ?? []
    }
}

/// A sibling file a version becomes at `--keep-both`: its server ID (the same for every send
/// of one resolution) and a name free in the file's folder.
public struct ConflictCopy: Equatable, Sendable {
    public var id: ItemID
    public var name: String
    public var version: ConflictVersion
}

/// A resolution named a conflict version the file does not have.
public struct UnknownConflictVersion: Error, Equatable, Sendable {
    public let id: ItemID
}

extension ItemMetadata {
    /// Resolves the file's conflict versions: the content of `keep` (if any) becomes the file's,
    /// then `keep` and every version in `settled` go; a version named in neither stays. Changes
    /// nothing when a named version is unknown. The revision is the caller's to give.
    public mutating func resolveConflicts(settled: Set<ItemID>, keep: ItemID?) throws(UnknownConflictVersion) {
        let named = keep.map { settled.union([$0]) } ?? settled
        if let unknown = named.first(where: { id in !conflicts.contains { $0.id == id } }) { throw UnknownConflictVersion(id: unknown) }
        if let chosen = conflicts.first(where: { $0.id == keep }) {
            digest = chosen.digest
            size = chosen.size
            modified = chosen.modified
        }
        conflicts.removeAll { named.contains($0.id) }
    }

    /// The sibling files the versions `ids` become: each named `NAME (conflicted copy from
    /// DEVICE YYYY-MM-DD HHMMSS).EXT` after its device and time, numbered when that name is
    /// taken (`isTaken`) or chosen for another copy. Throws for an ID the file has no version of.
    public func conflictCopies(of ids: Set<ItemID>, isTaken: (String) throws -> Bool) throws -> [ConflictCopy] {
        if let unknown = ids.first(where: { id in !conflicts.contains { $0.id == id } }) { throw UnknownConflictVersion(id: unknown) }
        var chosen: Set<String> = []
        return try conflicts.filter { ids.contains($0.id) }.map { version in
            var attempt = 1
            var copyName = ConflictNaming.conflictedCopyName(name, device: version.device, at: version.modified)
            while try chosen.contains(copyName) || isTaken(copyName) {
                attempt += 1
                copyName = ConflictNaming.conflictedCopyName(name, device: version.device, at: version.modified, attempt: attempt)
            }
            chosen.insert(copyName)
            let id = ItemID(String(ContentDigest.of(Array("copy/\(version.id)".utf8)).hex.prefix(32)))
            return ConflictCopy(id: id, name: copyName, version: version)
        }
    }
}
