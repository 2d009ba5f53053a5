import Foundation
import ItemModel
import LocalState
import SyncAPI
import SyncClient
import SyncEngine
import VFS

/// What the control socket needs of the server to share items: the mount daemon conforms
/// `SyncHTTPClient` (the consumer owns the protocol).
protocol ShareLinks: Sendable {
    func createShare(of id: ItemID, expires: Timestamp?) async throws -> ShareInfo
    func shares() async throws -> [ShareInfo]
    func removeShare(token: String) async throws
}

extension SyncHTTPClient: ShareLinks {}

/// `ubiq share`, `ubiq unshare` and `ubiq share --list`, through the control socket: the item
/// found by its path as the kernel finds it, its content checked to be on the server (a share
/// serves the server's snapshot, which must be what this device shows), and the server asked.
struct ShareControl: Sendable {
    let links: any ShareLinks
    let fs: FileSystem
    let engine: SyncEngine
    let serverURL: String

    func share(path: String, expires: Duration?) async -> ShareReport {
        do {
            let item = try onServer(path)
            let until = expires.map { WallClock.now() + Int64($0.components.seconds) * 1_000_000_000 }
            let info = try await links.createShare(of: item.itemID, expires: until)
            let shown = line(info, path: path)
            try engine.store.write { try $0.noteShare(Self.known(shown)) }
            return ShareReport(shares: [shown])
        } catch {
            return ShareReport(error: describe(error, path))
        }
    }

    func unshare(path: String) async -> ShareReport {
        do {
            let item = try found(path)
            let mine = try await links.shares().filter { $0.itemID == item.itemID }
            for share in mine { try await links.removeShare(token: share.token) }
            try engine.store.write { try $0.forgetShares(of: item.itemID) }
            if mine.isEmpty { return ShareReport(error: "\(path) is not shared") }
            return ShareReport(removed: mine.count)
        } catch {
            return ShareReport(error: describe(error, path))
        }
    }

    func list() async -> ShareReport {
        do {
            let all = try await links.shares()
            let lines = try engine.store.read { r in
                try all.map { info in line(info, path: try r.item(id: info.itemID).flatMap { try r.path(of: $0.ino) }) }
            }
            // The whole list: what this mount shows of shares is the server's now.
            try engine.store.write { try $0.replaceKnownShares(lines.map(Self.known)) }
            return ShareReport(shares: lines)
        } catch {
            return ShareReport(error: "\(error)")
        }
    }

    static func known(_ line: ShareLine) -> KnownShare {
        KnownShare(token: line.share.token, itemID: line.share.itemID, url: line.url, expires: line.share.expires)
    }

    func line(_ info: ShareInfo, path: String?) -> ShareLine {
        ShareLine(path: path, url: serverURL.hasSuffix("/") ? String(serverURL.dropLast()) + info.path : serverURL + info.path, share: info)
    }

    struct Refusal: Error, CustomStringConvertible {
        let description: String
    }

    func found(_ path: String) throws -> LocalItem {
        do throws(FSError) { return try fs.item(atPath: path) } catch {
            throw Refusal(description: "\(path): \(String(cString: strerror(error.errno)))")
        }
    }

    /// The item at `path`, when what it shows is on the server: a file with no change of its
    /// own still to send, or a folder with none below it (local-only items below it aside: they
    /// are in no snapshot). Anything else is refused: the link would serve something other than
    /// what this device shows.
    func onServer(_ path: String) throws -> LocalItem {
        let item = try found(path)
        guard item.kind == .file || item.kind == .folder else { throw Refusal(description: "\(path): only a file or a folder can be shared") }
        let unsent = try engine.store.read { r -> Bool in
            if try r.isExcluded(item.ino) { return true }
            let all = item.kind == .folder ? try r.descendants(of: item.ino) + [item] : [item]
            return try all.contains { row in
                guard row.kind.isSynced else { return false }
                let waiting = try row.revision == nil || row.content == .dirty || r.pendingOps(for: row.ino) > 0
                // Only a waiting row walks up: nearly every row has no change to send.
                return try waiting && !r.isExcluded(row.ino)
            }
        }
        if unsent { throw Refusal(description: "\(path) has changes that are not on the server yet (or is local-only); share it once `ubiq status` shows it uploaded") }
        return item
    }

    func describe(_ error: Error, _ path: String) -> String {
        if let refusal = error as? Refusal { return refusal.description }
        if let remote = error as? RemoteError { return "\(path): the server refused: \(remote)" }
        return "\(path): \(error)"
    }
}
