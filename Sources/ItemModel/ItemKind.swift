/// What an item is. Files, folders and symbolic links are synced; FIFOs and Unix sockets live
/// on the device that made them only (docs/SEMANTICS.md, "Special files"): the server refuses
/// them, and the mount never sends them.
public enum ItemKind: String, Sendable, Codable, Hashable, CaseIterable {
    case file
    case folder
    /// A symbolic link: its target text travels in `ItemMetadata.target`, never followed.
    case symlink
    case fifo
    case socket

    /// The kinds the server keeps.
    public var isSynced: Bool {
        switch self {
        case .file, .folder, .symlink: true
        case .fifo, .socket: false
        }
    }
}

/// The text of a symbolic link, as `readlink` gives it: kept as it is, never resolved.
public enum SymlinkTarget {
    /// PATH_MAX less the NUL: what `symlink(2)` itself accepts.
    public static let maxByteCount = 4095

    public enum Invalid: Error, Equatable, Sendable, CustomStringConvertible {
        case empty
        case tooLong
        case nul
        /// The target is not UTF-8: the protocol carries text, as it does for names.
        case notUTF8

        public var description: String {
            switch self {
            case .empty: "a link's target is empty"
            case .tooLong: "a link's target is longer than \(SymlinkTarget.maxByteCount) bytes"
            case .nul: "a link's target holds a NUL byte"
            case .notUTF8: "a link's target is not UTF-8"
            }
        }
    }

    public static func validate(_ target: String) throws(Invalid) {
        if target.isEmpty { throw .empty }
        if target.utf8.count > maxByteCount { throw .tooLong }
        if target.utf8.contains(0) { throw .nul }
    }

    /// The target from the bytes `symlink(2)` was given.
    public static func text(_ bytes: [UInt8]) throws(Invalid) -> String {
        guard let text = String(validating: bytes, as: UTF8.self) else { throw .notUTF8 }
        try validate(text)
        return text
    }
}
/// A path from the container root, `/Documents/a.txt`. Built from validated names only.
public struct ItemPath: Hashable, Sendable, CustomStringConvertible {
    public let components: [ItemName]
    public init(_ components: [ItemName]) { self.components = components }
    public static let root = ItemPath([])

    public var description: String {
        "/" + components.map(\.rawValue).joined(separator: "/")
    }

    public func appending(_ name: ItemName) -> ItemPath { ItemPath(components + [name]) }

    /// `Documents/` at the root is the Documents scope; everything else is the Data scope.
    public var isInDocumentsScope: Bool { components.first?.rawValue == "Documents" }

    /// A `.nosync` name makes that item and everything below it local-only (docs/SEMANTICS.md).
    public var isExcludedFromSync: Bool { components.contains { $0.isNoSync } }
}
