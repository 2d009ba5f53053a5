/// Where a read stands against the running download of one version of a file.
public enum ReadPosition: Sendable, Equatable {
    /// No download of that version runs.
    case notRunning
    /// Its bytes have landed: the file's size.
    case landed(size: Int64)
    /// Ahead of the download's front: its bytes are still to come.
    case ahead

    public var landedSize: Int64? {
        if case .landed(let size) = self { size } else { nil }
    }
}

/// Why an eviction was refused.
public enum EvictRefusal: Error, Sendable {
    /// The item has changes the server does not have yet.
    case unsentChanges
    /// The file is open.
    case inUse
}
