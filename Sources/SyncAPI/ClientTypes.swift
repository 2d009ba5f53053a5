import ItemModel

/// One event of the push stream, as clients see it.
public enum ChangeStreamEvent: Sendable, Equatable {
    case change(ItemChange)
    /// The catch-up is done: every change up to `cursor` has been delivered.
    case ready(ChangeCursor)
    /// The container's key-value store is at this version: once after `ready`, then after
    /// each change to it. A client that holds an older one reads the changes since.
    case keyValues(version: Int64)
}

/// What can go wrong talking to the server, as the engine needs to tell it apart.
public enum RemoteError: Error, Sendable, Equatable {
    /// The server cannot be reached (refused, reset, timed out): retry later, we are offline.
    case unreachable(String)
    /// The server's certificate is not trusted (or TLS failed otherwise): retried, as when
    /// unreachable, but named, since waiting will not mend it.
    case untrustedServer(String)
    /// The token is not (or no longer) valid: expired, revoked, or its account removed (the
    /// server's words).
    case unauthorized(String)
    /// The protocol answered with an error code (409 conflicts carry the item as it is now).
    case refused(code: APIErrorCode, message: String, current: ItemMetadata?)
    /// Anything else unexpected (bad JSON from the server, 5xx).
    case protocolError(String)

    /// The server cannot be used now (unreachable, the token refused until `ubiq login`, or
    /// this account's requests past the server's rate): work waits for the connection instead
    /// of failing.
    public var meansOffline: Bool {
        switch self {
        case .unreachable, .untrustedServer, .unauthorized: true
        case .refused(.rateLimited, _, _): true
        case .refused, .protocolError: false
        }
    }

    public var isConflict: Bool {
        if case .refused(.revisionConflict, _, _) = self { return true }
        return false
    }

    public var code: APIErrorCode? {
        if case .refused(let code, _, _) = self { return code }
        return nil
    }
}
