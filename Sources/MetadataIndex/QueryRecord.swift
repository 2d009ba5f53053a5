import Foundation
import ItemModel
import LocalState
import QueryLanguage

/// One item as a query sees it: its row, its path in the container (with a leading `/`, rule
/// K1) and its status attributes. Answers each key of the key table (K rules).
public struct QueryRecord: Sendable {
    public let item: LocalItem
    public let path: String
    public let status: ItemStatus

    public init(item: LocalItem, path: String, status: ItemStatus) {
        self.item = item
        self.path = path
        self.status = status
    }

    static func date(_ t: Timestamp) -> Date { Date(timeIntervalSince1970: Double(t) / 1e9) }

    /// The tags in `user.xdg.tags`, split on commas and trimmed (empty ones dropped).
    public var tags: [String] { Self.tags(in: item.xattrs) }

    static func tags(in xattrs: [String: Data]) -> [String] {
        guard let raw = xattrs["user.xdg.tags"] else { return [] }
        return String(decoding: raw, as: UTF8.self).split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    public var contentType: String { ContentTypes.type(name: item.name, kind: item.kind) }

    /// The value of `key`; nil when the item has none (S12).
    public func value(_ key: Key) -> QueryValue? {
        if key.name.hasPrefix("xattr.") {
            return item.xattrs[String(key.name.dropFirst(6))].map { .string(String(decoding: $0, as: UTF8.self)) }
        }
        let folder = item.kind == .folder
        switch key.name {
        case "name", "displayName": return .string(item.name)
        case "path": return .string(path)
        case "size": return .number(Double(folder ? 0 : item.size))
        case "created": return .date(Self.date(item.created))
        case "modified": return .date(Self.date(item.modified))
        case "contentType": return .string(contentType)
        case "contentTypeTree": return .strings(ContentTypes.tree(name: item.name, kind: item.kind))
        case "isUbiquitous": return .bool(status.downloadingStatus != "excluded")
        case "downloadingStatus": return .string(status.downloadingStatus)
        case "isDownloading": return .bool(status.isDownloading)
        case "percentDownloaded": return .number(Double(status.percentDownloaded))
        case "isDownloaded": return .bool(status.downloadingStatus == "current")
        case "hasUnresolvedConflicts": return .bool(status.hasUnresolvedConflicts)
        case "isUploaded": return .bool(status.isUploaded)
        case "isUploading": return .bool(status.isUploading)
        case "percentUploaded": return .number(Double(status.percentUploaded))
        case "downloadingError": return status.downloadingError.map(QueryValue.string)
        case "uploadingError": return status.uploadingError.map(QueryValue.string)
        case "pinned": return .bool(status.pinned)
        case "tags": return .strings(tags)
        case "isExternalDocument", "isShared", "downloadRequested": return .bool(false)
        default: return nil
        }
    }
}

/// Uniform type identifiers from a file's extension (case-insensitive), with what each conforms
/// to: enough for the types apps ask about; any other file is `public.data`.
enum ContentTypes {
    static let byExtension: [String: String] = [
        "txt": "public.plain-text", "text": "public.plain-text", "md": "net.daringfireball.markdown", "markdown": "net.daringfireball.markdown",
        "html": "public.html", "htm": "public.html", "xml": "public.xml", "json": "public.json", "csv": "public.comma-separated-values-text",
        "rtf": "public.rtf", "pdf": "com.adobe.pdf", "png": "public.png", "jpg": "public.jpeg", "jpeg": "public.jpeg", "gif": "com.compuserve.gif",
        "heic": "public.heic", "tiff": "public.tiff", "mp3": "public.mp3", "m4a": "com.apple.m4a-audio", "mp4": "public.mpeg-4", "mov": "com.apple.quicktime-movie",
        "zip": "public.zip-archive", "swift": "public.swift-source", "c": "public.c-source", "h": "public.c-header", "py": "public.python-script",
        "sh": "public.shell-script", "plist": "com.apple.property-list",
    ]
    static let parents: [String: String] = [
        "public.plain-text": "public.text", "net.daringfireball.markdown": "public.plain-text", "public.html": "public.text",
        "public.xml": "public.text", "public.json": "public.text", "public.comma-separated-values-text": "public.plain-text",
        "public.rtf": "public.text", "public.swift-source": "public.source-code", "public.c-source": "public.source-code",
        "public.c-header": "public.source-code", "public.python-script": "public.script", "public.shell-script": "public.script",
        "public.script": "public.source-code", "public.source-code": "public.plain-text", "public.text": "public.data",
        "com.adobe.pdf": "public.composite-content", "public.composite-content": "public.content",
        "public.png": "public.image", "public.jpeg": "public.image", "com.compuserve.gif": "public.image", "public.heic": "public.image",
        "public.tiff": "public.image", "public.image": "public.data", "public.mp3": "public.audio", "com.apple.m4a-audio": "public.audio",
        "public.audio": "public.audiovisual-content", "public.mpeg-4": "public.movie", "com.apple.quicktime-movie": "public.movie",
        "public.movie": "public.audiovisual-content", "public.audiovisual-content": "public.data", "public.zip-archive": "public.archive",
        "public.archive": "public.data", "com.apple.property-list": "public.data", "public.folder": "public.directory",
    ]

    static func type(name: String, kind: ItemKind) -> String {
        switch kind {
        case .folder: return "public.folder"
        case .symlink: return "public.symlink"
        // No content type names a FIFO or a socket.
        case .fifo, .socket: return "public.item"
        case .file: break
        }
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return "public.data" }
        return byExtension[name[name.index(after: dot)...].lowercased()] ?? "public.data"
    }

    static func tree(name: String, kind: ItemKind) -> [String] {
        var out = [type(name: name, kind: kind)]
        while let parent = parents[out.last!], !out.contains(parent) { out.append(parent) }
        if kind == .file && out.last != "public.data" { out.append("public.data") }
        if out.last != "public.item" { out.append("public.item") }
        return out
    }
}
