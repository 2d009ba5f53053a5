/// What an item is. Symbolic links and other special files are not synced (docs/SEMANTICS.md).
public enum ItemKind: String, Sendable, Codable, Hashable, CaseIterable {
    case file
    case folder
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
