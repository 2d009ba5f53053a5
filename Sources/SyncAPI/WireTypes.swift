import Foundation
import ItemModel

/// The protocol version; `GET /health` reports it and clients refuse a server they do not speak.
public enum SyncProtocol {
    public static let version = 1
    /// Header carrying the declared SHA-256 of an uploaded blob (redundant with the URL; both must agree).
    public static let revisionHeader = "Ubiq-Revision"
    public static let digestHeader = "Ubiq-Digest"
    /// The largest content a create or content update may carry inline (`content`, base64 in
    /// the JSON) instead of a separate blob upload: one request per small file, not two.
    public static let maxInlineContent = 256 << 10
    /// The most creates one `POST /v1/containers/{c}/batch` may carry.
    public static let maxBatchItems = 64
    /// The most inline content, summed over its creates, one batch may carry (base64 makes the
    /// body about a third larger).
    public static let maxBatchContent = 1 << 20
}

public struct HealthResponse: Codable, Sendable {
    public var status: String
    public var protocolVersion: Int
    public init(status: String = "ok", protocolVersion: Int = SyncProtocol.version) {
        self.status = status
        self.protocolVersion = protocolVersion
    }
}

public struct TokenRequest: Codable, Sendable {
    public var user: String
    public var password: String
    /// What the client calls itself (a host name): shown in the account's list of tokens.
    public var device: String?
    public init(user: String, password: String, device: String? = nil) {
        self.user = user
        self.password = password
        self.device = device
    }
}

public struct TokenResponse: Codable, Sendable {
    public var token: String
    public var account: String
    /// When the token ends unless it is used (each use moves this on): nanoseconds since the epoch.
    public var expires: Timestamp
    public init(token: String, account: String, expires: Timestamp) {
        self.token = token
        self.account = account
        self.expires = expires
    }
}

/// `GET /v1/whoami`: the account the token belongs to, and its identity: 64 lowercase hex
/// digits (32 random bytes) made when the account was added. The same through every URL and
/// token of the server, different for every account, and new for an account removed and added
/// again under the same name.
public struct WhoAmI: Codable, Sendable, Equatable {
    public var account: String
    public var identity: String
    public init(account: String, identity: String) {
        self.account = account
        self.identity = identity
    }
}

public struct ContainerInfo: Codable, Sendable, Hashable {
    public var id: ContainerID
    public var created: Timestamp
    /// The cursor after the container's latest change.
    public var cursor: ChangeCursor
    public init(id: ContainerID, created: Timestamp, cursor: ChangeCursor) {
        self.id = id
        self.created = created
        self.cursor = cursor
    }
}

public struct ContainerList: Codable, Sendable {
    public var containers: [ContainerInfo]
    public init(containers: [ContainerInfo]) { self.containers = containers }
}

public struct ItemList: Codable, Sendable {
    public var items: [ItemMetadata]
    public init(items: [ItemMetadata]) { self.items = items }
}

/// `POST /v1/containers/{c}/items`: a new file (with content already uploaded as a blob), folder or link.
public struct CreateItemRequest: Codable, Sendable {
    public var parentID: ItemID
    public var name: String
    public var kind: ItemKind
    /// Files only; omitted means empty content.
    public var digest: ContentDigest?
    /// When given, must equal the blob's size.
    public var size: Int64?
    public var mode: UInt32?
    public var created: Timestamp?
    public var modified: Timestamp?
    public var xattrs: [String: Data]?
    /// Chosen by the client so that a retried create is idempotent; the server makes one otherwise.
    public var id: ItemID?
    /// Files only: the content itself (at most `SyncProtocol.maxInlineContent` bytes), stored as
    /// if uploaded to `PUT /v1/blobs/{digest}` first; it must hash to `digest`.
    public var content: Data?
    /// The device that saved the content, 1 to `ConflictVersion.maxDeviceBytes` bytes: the
    /// file's earlier versions say who made each (`EarlierVersion.device`).
    public var device: String?
    /// Links only, and required for them: the target text (`SymlinkTarget`).
    public var target: String?

    public init(
        parentID: ItemID, name: String, kind: ItemKind, digest: ContentDigest? = nil, size: Int64? = nil,
        mode: UInt32? = nil, created: Timestamp? = nil, modified: Timestamp? = nil,
        xattrs: [String: Data]? = nil, id: ItemID? = nil, content: Data? = nil, device: String? = nil, target: String? = nil
    ) {
        self.target = target
        self.content = content
        self.device = device
        self.parentID = parentID
        self.name = name
        self.kind = kind
        self.digest = digest
        self.size = size
        self.mode = mode
        self.created = created
        self.modified = modified
        self.xattrs = xattrs
        self.id = id
    }
}

/// `PUT /v1/containers/{c}/items/{id}/content`: point the file at new content.
public struct UpdateContentRequest: Codable, Sendable {
    public var baseRevision: Revision
    public var digest: ContentDigest
    public var size: Int64?
    public var modified: Timestamp?
    /// As in `CreateItemRequest`: the content inline, instead of a blob upload first.
    public var content: Data?
    /// As in `CreateItemRequest`: the device that saved it.
    public var device: String?
    public init(baseRevision: Revision, digest: ContentDigest, size: Int64? = nil, modified: Timestamp? = nil, content: Data? = nil, device: String? = nil) {
        self.content = content
        self.device = device
        self.baseRevision = baseRevision
        self.digest = digest
        self.size = size
        self.modified = modified
    }
}

/// `POST /v1/containers/{c}/items/{id}/conflicts`: an edit of a file refused for its stale base,
/// while the server has another device's content: kept beside the current content as a conflict
/// version. The answer is the item with its new revision.
public struct AddConflictVersionRequest: Codable, Sendable {
    public var version: ConflictVersion
    /// As in `CreateItemRequest`: the content inline, instead of a blob upload first.
    public var content: Data?
    public init(version: ConflictVersion, content: Data? = nil) {
        self.version = version
        self.content = content
    }
}

/// `POST /v1/containers/{c}/items/{id}/resolve`: resolves a file's conflicts as seen at
/// `baseRevision`. `keep` (one of `settled`, or nil to keep the current content) becomes the
/// current content as a new revision; the versions in `settled` go, and each of `copies`
/// (settled too) becomes a sibling file, in the same commit (`--keep-both`).
public struct ResolveConflictsRequest: Codable, Sendable {
    public var baseRevision: Revision
    public var settled: [ItemID]
    public var keep: ItemID?
    public var copies: [ItemID]
    public init(baseRevision: Revision, settled: [ItemID], keep: ItemID? = nil, copies: [ItemID] = []) {
        self.baseRevision = baseRevision
        self.settled = settled
        self.keep = keep
        self.copies = copies
    }

    enum CodingKeys: String, CodingKey { case baseRevision, settled, keep, copies }

    /// `copies` may be left out: none.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        baseRevision = try c.decode(Revision.self, forKey: .baseRevision)
        settled = try c.decode([ItemID].self, forKey: .settled)
        keep = try c.decodeIfPresent(ItemID.self, forKey: .keep)
        copies = try c.decodeIfPresent([ItemID].self, forKey: .copies) ?? []
    }
}

/// `GET /v1/containers/{c}/items/{id}/versions`: the file's earlier contents still kept, the
/// most recently replaced first.
public struct EarlierVersionList: Codable, Sendable {
    public var versions: [EarlierVersion]
    public init(versions: [EarlierVersion]) { self.versions = versions }
}

/// `POST /v1/containers/{c}/items/{id}/restore`: the earlier content of `revision` becomes the
/// file's content again, as a new revision from `baseRevision`.
public struct RestoreRequest: Codable, Sendable {
    public var baseRevision: Revision
    public var revision: Revision
    public init(baseRevision: Revision, revision: Revision) {
        self.baseRevision = baseRevision
        self.revision = revision
    }
}

/// `POST /v1/containers/{c}/batch`: several creates in one request (a folder of small files
/// copied in). Each is checked as if sent alone to `POST …/items` and succeeds or fails on its
/// own; the server stores all the inline contents first, then applies the creates in order and
/// commits all that succeed together.
public struct BatchRequest: Codable, Sendable {
    public var creates: [CreateItemRequest]
    public init(creates: [CreateItemRequest]) { self.creates = creates }
}

/// The answer to a `BatchRequest` (200): one result per create, in request order.
public struct BatchResponse: Codable, Sendable {
    public struct Result: Codable, Sendable {
        /// The created item (or, for a retried create, the one made the first time).
        public var item: ItemMetadata?
        /// Why this create was refused: what `POST …/items` would have answered.
        public var error: APIErrorBody.Detail?
        public init(item: ItemMetadata? = nil, error: APIErrorBody.Detail? = nil) {
            self.item = item
            self.error = error
        }
    }

    public var results: [Result]
    public init(results: [Result]) { self.results = results }
}

/// `PATCH /v1/containers/{c}/items/{id}`: rename, move, chmod, touch. Absent fields stay.
public struct UpdateItemRequest: Codable, Sendable {
    public var baseRevision: Revision
    public var name: String?
    public var parentID: ItemID?
    public var mode: UInt32?
    public var modified: Timestamp?
    public init(baseRevision: Revision, name: String? = nil, parentID: ItemID? = nil, mode: UInt32? = nil, modified: Timestamp? = nil) {
        self.baseRevision = baseRevision
        self.name = name
        self.parentID = parentID
        self.mode = mode
        self.modified = modified
    }
}

/// `PUT /v1/containers/{c}/items/{id}/xattrs`: replaces the item's synced attributes.
public struct SetXattrsRequest: Codable, Sendable {
    /// When given, the change is refused unless it is the item's current revision.
    public var baseRevision: Revision?
    public var xattrs: [String: Data]
    public init(baseRevision: Revision? = nil, xattrs: [String: Data]) {
        self.baseRevision = baseRevision
        self.xattrs = xattrs
    }
}

public struct DeleteResponse: Codable, Sendable {
    /// One tombstone per deleted item, the folder's descendants first.
    public var deleted: [ItemMetadata]
    public init(deleted: [ItemMetadata]) { self.deleted = deleted }
}

public struct BlobInfo: Codable, Sendable {
    public var digest: ContentDigest
    public var size: Int64
    public init(digest: ContentDigest, size: Int64) {
        self.digest = digest
        self.size = size
    }
}

/// `GET /v1/containers/{c}/changes?since=…`.
///
/// A server sends its stored item JSON as it is (`encoded`); a client decodes the whole page.
public struct ChangePage: Codable, Sendable {
    public var changes: [ItemChange]
    /// Pass as `since` next time.
    public var cursor: ChangeCursor
    /// More changes follow right away; ask again with `cursor`.
    public var hasMore: Bool
    public init(changes: [ItemChange], cursor: ChangeCursor, hasMore: Bool) {
        self.changes = changes
        self.cursor = cursor
        self.hasMore = hasMore
    }

    /// The JSON of a page whose items are JSON already (each an `ItemMetadata` encoding): the
    /// same document as encoding the page, with each item's bytes put in as they are.
    public static func encoded(_ changes: [(cursor: ChangeCursor, kind: ItemChange.Kind, item: Data)], cursor: ChangeCursor, hasMore: Bool) -> Data {
        var out = Data()
        out.reserveCapacity(changes.reduce(64) { $0 + $1.item.count + 64 })
        out.append(contentsOf: #"{"changes":["#.utf8)
        for (index, change) in changes.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: #"{"cursor":"#.utf8)
            appendJSONString(change.cursor.rawValue, to: &out)
            out.append(contentsOf: #","kind":"#.utf8)
            appendJSONString(change.kind.rawValue, to: &out)
            out.append(contentsOf: #","item":"#.utf8)
            out.append(change.item)
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: #"],"cursor":"#.utf8)
        appendJSONString(cursor.rawValue, to: &out)
        out.append(contentsOf: (hasMore ? #","hasMore":true}"# : #","hasMore":false}"#).utf8)
        return out
    }

    /// A JSON string literal: quotes, backslashes and control characters escaped.
    static func appendJSONString(_ string: String, to out: inout Data) {
        out.append(UInt8(ascii: "\""))
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                out.append(contentsOf: [UInt8(ascii: "\\"), byte])
            case 0..<0x20:
                out.append(contentsOf: String(format: "\\u%04x", byte).utf8)
            default:
                out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}

/// The `ready` event of the push stream: the client has every change up to `cursor`.
public struct StreamReady: Codable, Sendable {
    public var cursor: ChangeCursor
    public init(cursor: ChangeCursor) { self.cursor = cursor }
}

/// `POST /v1/containers/{c}/shares`: publish a read-only snapshot of a file or a folder.
public struct CreateShareRequest: Codable, Sendable {
    public var itemID: ItemID
    /// nil: until unshared. Must be in the future.
    public var expires: Timestamp?
    public init(itemID: ItemID, expires: Timestamp? = nil) {
        self.itemID = itemID
        self.expires = expires
    }
}

/// A share as its owner sees it (`POST` and `GET /v1/containers/{c}/shares`).
public struct ShareInfo: Codable, Sendable, Equatable {
    public var token: String
    /// Where anyone with the link fetches it, from the server's root: `/s/TOKEN`.
    public var path: String
    public var itemID: ItemID
    /// The item's name when shared.
    public var name: String
    public var kind: ItemKind
    public var created: Timestamp
    public var expires: Timestamp?
    public var downloads: Int64
    /// The files of the snapshot, and their bytes in all.
    public var files: Int
    public var size: Int64

    public init(token: String, path: String, itemID: ItemID, name: String, kind: ItemKind, created: Timestamp, expires: Timestamp?, downloads: Int64, files: Int, size: Int64) {
        self.token = token
        self.path = path
        self.itemID = itemID
        self.name = name
        self.kind = kind
        self.created = created
        self.expires = expires
        self.downloads = downloads
        self.files = files
        self.size = size
    }
}

public struct ShareList: Codable, Sendable {
    public var shares: [ShareInfo]
    public init(shares: [ShareInfo]) { self.shares = shares }
}

/// `GET /s/{token}` of a folder, asked by a program: the snapshot's files.
public struct ShareListing: Codable, Sendable, Equatable {
    public struct File: Codable, Sendable, Equatable {
        public var path: String
        public var size: Int64
        public var modified: Timestamp
        public init(path: String, size: Int64, modified: Timestamp) {
            self.path = path
            self.size = size
            self.modified = modified
        }
    }
    public var name: String
    public var expires: Timestamp?
    public var files: [File]
    public init(name: String, expires: Timestamp?, files: [File]) {
        self.name = name
        self.expires = expires
        self.files = files
    }
}
