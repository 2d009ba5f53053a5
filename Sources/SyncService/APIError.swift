import Foundation
import ItemModel
import ServerStorage
import SyncAPI

/// A refusal the server answers with: one code from the protocol's table, a clear message, and
/// for conflicts the item as it is now. Transport-free: SyncServer turns it into an HTTP answer
/// (the status comes from `APIErrorCode.httpStatus`), the in-memory test remote into a
/// `RemoteError`.
public struct APIError: Error, Sendable {
    public let code: APIErrorCode
    public let message: String
    public var current: ItemMetadata?
    /// For `rate_limited`: the seconds after which a retry is welcome (`Retry-After`).
    public var retryAfter: Int?

    public init(_ code: APIErrorCode, _ message: String, current: ItemMetadata? = nil, retryAfter: Int? = nil) {
        self.code = code
        self.message = message
        self.current = current
        self.retryAfter = retryAfter
    }

    public var detail: APIErrorBody.Detail { .init(code: code, message: message, current: current) }
}

extension APIError {
    /// The one mapping from storage's refusals to the protocol's codes. Exhaustive on purpose.
    public init(_ error: StorageError) {
        switch error {
        case .accountExists(let n): self.init(.invalidRequest, "account '\(n)' already exists")
        case .accountNotFound: self.init(.unauthorized, "the account no longer exists")
        case .invalidAccountName(let n): self.init(.invalidRequest, "'\(n)' is not a valid account name")
        case .containerNotFound(let c): self.init(.containerNotFound, "no container '\(c)'")
        case .itemNotFound(let id): self.init(.itemNotFound, "no item '\(id)'")
        case .blobNotFound(let d): self.init(.blobNotFound, "no content with digest \(d); upload it first")
        case .invalidName(let why): self.init(.invalidName, why.description)
        case .invalidXattr(let why): self.init(.invalidXattr, why.description)
        case .notAFolder(let id): self.init(.notAFolder, "item '\(id)' is not a folder")
        case .notAFile(let id): self.init(.notAFile, "item '\(id)' is not a file")
        case .rootIsImmutable: self.init(.rootIsImmutable, "the root folder cannot be renamed, moved or deleted")
        case .invalidMove(let id): self.init(.invalidMove, "folder '\(id)' cannot move into itself or below itself")
        case .revisionConflict(let current):
            self.init(.revisionConflict, "the item changed since the base revision; it is now at \(current.revision)", current: current)
        case .nameExists(let existing):
            self.init(.nameExists, "the folder already holds an item named '\(existing.name)'", current: existing)
        case .folderNotEmpty(let id): self.init(.folderNotEmpty, "folder '\(id)' is not empty; pass recursive=true")
        case .sizeMismatch(let declared, let actual):
            self.init(.sizeMismatch, "declared size \(declared) but the content is \(actual) bytes")
        case .digestMismatch(let declared, let actual):
            self.init(.digestMismatch, "declared digest \(declared) but the body hashes to \(actual); nothing was stored")
        case .itemIDTaken(let id): self.init(.itemIDTaken, "item id '\(id)' is already used by another item")
        case .versionNotFound(let id): self.init(.versionNotFound, "the item has no conflict version '\(id)'")
        case .earlierVersionNotFound(let revision):
            self.init(.versionNotFound, "the file has no earlier version of revision \(revision) (never, or no longer kept)")
        case .invalidDevice(let name): self.init(.invalidDevice, "a device name must be 1 to \(ConflictVersion.maxDeviceBytes) bytes, not '\(name.prefix(80))'")
        case .invalidTarget(let why): self.init(.invalidTarget, "\(why)")
        case .unsyncedKind(let kind): self.init(.invalidRequest, "a \(kind.rawValue) stays on the device that made it: only files, folders and links are kept")
        case .invalidCursor(let c): self.init(.invalidCursor, "'\(c)' is not a cursor of this server")
        case .keyValueLimit(let refusal): self.init(refusal)
        case .diskFull: self.init(.insufficientStorage, "the server's disk is full; nothing was changed")
        }
    }

    /// A key-value write past a limit: one code per limit, and a message that names it.
    public init(_ refusal: KeyValueRefusal) {
        self.init(APIErrorCode(refusal), refusal.description + "; nothing was stored")
    }

    public init(_ error: BlobStoreError) {
        switch error {
        case .noSpace: self.init(.insufficientStorage, "the server's disk is full; nothing was stored")
        case .io(let op, let code): self.init(.internalError, "storage failed during \(op): \(String(cString: strerror(code)))")
        case .digestMismatch(let declared, let actual):
            self.init(.digestMismatch, "declared digest \(declared) but the body hashes to \(actual); nothing was stored")
        case .notFound(let d): self.init(.blobNotFound, "no content with digest \(d)")
        case .remote(let op, let detail): self.init(.internalError, "the blob store failed during \(op): \(detail)")
        }
    }

    /// The refusals a single operation inside a request can meet (a batch answers them per
    /// create); anything else is rethrown, to fail the whole request.
    public init(mapping error: any Error) throws {
        switch error {
        case let error as APIError: self = error
        case let error as StorageError: self.init(error)
        case let error as BlobStoreError: self.init(error)
        default: throw error
        }
    }
}

/// Checks of what a request names, before anything is looked up.
enum RequestChecks {
    static func wellFormed(_ id: ItemID) throws -> ItemID {
        guard id.isWellFormed else { throw APIError(.invalidItemID, "'\(id.rawValue.prefix(80))' is not an item id") }
        return id
    }

    static func validName(_ raw: String) throws -> ItemName {
        do { return try ItemName(raw) } catch { throw APIError(.invalidName, error.description) }
    }
}
