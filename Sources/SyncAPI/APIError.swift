import ItemModel

/// The protocol's one table of error codes. Each code has one HTTP status; the server answers
/// `{"error":{"code":…,"message":…}}` and clients switch on `code`, never on the message.
/// docs/SYNC_PROTOCOL.md lists the same table.
public enum APIErrorCode: String, Codable, Sendable, CaseIterable {
    case unauthorized = "unauthorized"
    case invalidCredentials = "invalid_credentials"
    case tokenExpired = "token_expired"
    case invalidRequest = "invalid_request"
    case invalidName = "invalid_name"
    case invalidContainerID = "invalid_container_id"
    case invalidItemID = "invalid_item_id"
    case invalidDigest = "invalid_digest"
    case invalidCursor = "invalid_cursor"
    case invalidXattr = "invalid_xattr"
    case invalidDevice = "invalid_device"
    case invalidTarget = "invalid_target"
    case invalidMove = "invalid_move"
    case notAFolder = "not_a_folder"
    case notAFile = "not_a_file"
    case rootIsImmutable = "root_is_immutable"
    case routeNotFound = "route_not_found"
    case containerNotFound = "container_not_found"
    case itemNotFound = "item_not_found"
    case shareNotFound = "share_not_found"
    case shareExpired = "share_expired"
    case versionNotFound = "version_not_found"
    case blobNotFound = "blob_not_found"
    case methodNotAllowed = "method_not_allowed"
    case revisionConflict = "revision_conflict"
    case nameExists = "name_exists"
    case folderNotEmpty = "folder_not_empty"
    case itemIDTaken = "item_id_taken"
    case payloadTooLarge = "payload_too_large"
    case rateLimited = "rate_limited"
    case kvTooManyKeys = "kv_too_many_keys"
    case kvKeyTooLong = "kv_key_too_long"
    case kvValueTooLarge = "kv_value_too_large"
    case kvStoreTooLarge = "kv_store_too_large"
    case rangeNotSatisfiable = "range_not_satisfiable"
    case digestMismatch = "digest_mismatch"
    case sizeMismatch = "size_mismatch"
    case insufficientStorage = "insufficient_storage"
    case internalError = "internal_error"

    /// Exhaustive on purpose: a new code forces a decision about its status.
    public var httpStatus: Int {
        switch self {
        case .unauthorized, .invalidCredentials, .tokenExpired: 401
        case .invalidRequest, .invalidName, .invalidContainerID, .invalidItemID, .invalidDigest,
             .invalidCursor, .invalidXattr, .invalidDevice, .invalidTarget, .invalidMove, .notAFolder, .notAFile, .rootIsImmutable,
             .sizeMismatch, .kvKeyTooLong:
            400
        case .routeNotFound, .containerNotFound, .itemNotFound, .versionNotFound, .blobNotFound, .shareNotFound: 404
        case .shareExpired: 410
        case .methodNotAllowed: 405
        case .revisionConflict, .nameExists, .folderNotEmpty, .itemIDTaken: 409
        case .payloadTooLarge, .kvTooManyKeys, .kvValueTooLarge, .kvStoreTooLarge: 413
        case .rangeNotSatisfiable: 416
        case .rateLimited: 429
        case .digestMismatch: 422
        case .internalError: 500
        case .insufficientStorage: 507
        }
    }
}

extension APIErrorCode {
    /// The code of a key-value write past a limit: one per limit.
    public init(_ refusal: KeyValueRefusal) {
        switch refusal {
        case .tooManyKeys: self = .kvTooManyKeys
        case .keyLength: self = .kvKeyTooLong
        case .valueSize: self = .kvValueTooLarge
        case .storeSize: self = .kvStoreTooLarge
        }
    }

    /// A key-value write refused for a limit (`quotaViolation` on a mount).
    public var isKeyValueLimit: Bool { [.kvTooManyKeys, .kvKeyTooLong, .kvValueTooLarge, .kvStoreTooLarge].contains(self) }
}

/// The body of every error response.
public struct APIErrorBody: Codable, Sendable, Equatable {
    public struct Detail: Codable, Sendable, Equatable {
        public var code: APIErrorCode
        public var message: String
        /// On `revision_conflict` and `name_exists`: the item as it is now on the server.
        public var current: ItemMetadata?

        public init(code: APIErrorCode, message: String, current: ItemMetadata? = nil) {
            self.code = code
            self.message = message
            self.current = current
        }
    }

    public var error: Detail

    public init(_ detail: Detail) { self.error = detail }
}
