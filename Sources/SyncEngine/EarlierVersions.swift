import ItemModel
import LocalState
import SyncAPI

/// A file's earlier contents, which the server keeps for its retention: listed and restored on
/// request (`ubiq versions --all`, `ubiq restore`), online only, since only the server has them.
extension SyncEngine {
    /// Why an earlier version cannot be listed or restored, in words for the command line.
    public struct EarlierVersionRefusal: Error, Sendable {
        public let message: String
    }

    public func earlierVersions(of ino: Int64) async throws -> [EarlierVersion] {
        let item = try uploadedFile(ino)
        do { return try await remote.earlierVersions(of: item.itemID) } catch let error as RemoteError { throw Self.refusal(error) }
    }

    /// Makes the earlier content of `revision` the file's content again, as a new revision, and
    /// takes it here as any change from the server (the cached copy is replaced on next open).
    /// The server's revision of the file is the base, also when this device has not heard of
    /// it yet: the choice is of a content, not of a base.
    public func restore(_ ino: Int64, revision: Revision) async throws {
        let item = try uploadedFile(ino)
        var base = item.revision!
        for _ in 0..<3 {
            do {
                let result = try await remote.restore(item.itemID, RestoreRequest(baseRevision: base, revision: revision))
                try adoptMetadata(ino, result)
                observer.invalidate([.inode(ino)])
                return
            } catch let RemoteError.refused(code, _, current) where code == .revisionConflict && current != nil {
                base = current!.revision
            } catch let error as RemoteError {
                throw Self.refusal(error)
            }
        }
        throw EarlierVersionRefusal(message: "the file keeps changing on the server; try again")
    }

    func uploadedFile(_ ino: Int64) throws -> LocalItem {
        guard let item = try store.read({ try $0.item(ino) }), item.kind == .file else { throw EarlierVersionRefusal(message: "not a file") }
        guard item.revision != nil else { throw EarlierVersionRefusal(message: "the file has not reached the server yet: it has no earlier versions") }
        return item
    }

    static func refusal(_ error: RemoteError) -> EarlierVersionRefusal {
        switch error {
        case .refused(let code, _, _) where code == .versionNotFound:
            EarlierVersionRefusal(message: "the server keeps no earlier version of that revision (never, or no longer)")
        case .unreachable, .untrustedServer, .unauthorized:
            EarlierVersionRefusal(message: "earlier versions are on the server, which cannot be used now: \(describe(error))")
        default:
            EarlierVersionRefusal(message: describe(error))
        }
    }
}
