import Foundation
import LocalState
import SyncAPI
import SyncClient

/// Which account's state a cache folder shows (docs/SEMANTICS.md, "Account changes"). Each
/// server, account and container has a folder of its own under `accounts/`; an account the
/// server now knows under another identity (removed and added again, or another server at the
/// same address) gets a fresh one, and the old state is set aside beside it, kept for when that
/// identity answers again.
enum AccountFolders {
    /// The account's identity, if the server answers within a few seconds: a mount must come
    /// up offline too, and then the identity is checked when the server is reached.
    static func identity(_ configuration: MountConfiguration) async -> String? {
        let client = SyncHTTPClient(baseURL: configuration.serverURL, token: configuration.token, container: configuration.container,
                                    requestDeadline: .seconds(3), freshToken: configuration.freshToken, trust: configuration.trust)
        let identity = try? await client.whoami().identity
        await client.shutdown()
        return identity
    }

    /// Puts the account's folder in place for `identity` (nil: not known, offline): a folder
    /// holding another identity's state goes aside, and one set aside for this identity comes back.
    static func arrange(_ configuration: MountConfiguration, identity: String?) throws {
        guard let identity else { return }
        let fm = FileManager.default
        let folder = configuration.accountDirectory
        if fm.fileExists(atPath: folder + "/state.sqlite"), let held = try heldIdentity(folder), held != identity {
            try move(folder, to: aside(folder, held))
        }
        if !fm.fileExists(atPath: folder), fm.fileExists(atPath: aside(folder, identity)) {
            try move(aside(folder, identity), to: folder)
        }
    }

    /// Records which account the cache folder shows now; true when it showed another one last
    /// time (another folder, or the same folder under another identity).
    static func noteShown(_ configuration: MountConfiguration, identity: String?) -> Bool {
        let file = configuration.cacheDirectory + "/shown-account"
        let folder = URL(fileURLWithPath: configuration.accountDirectory).lastPathComponent
        let now = folder + " " + (identity ?? "")
        let before = (try? String(contentsOfFile: file, encoding: .utf8))?.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
        try? now.write(toFile: file, atomically: true, encoding: .utf8)
        guard let before, before.count == 2 else { return false }
        return before[0] != folder || (identity != nil && !before[1].isEmpty && before[1] != identity)
    }

    static func aside(_ folder: String, _ identity: String) -> String { folder + ".aside-" + identity.prefix(16) }

    /// The identity recorded in a folder's state, read with a connection of its own that is
    /// closed before the folder may move.
    static func heldIdentity(_ folder: String) throws -> String? {
        try LocalStore(path: folder + "/state.sqlite").read { try $0.accountIdentity() }
    }

    static func move(_ from: String, to: String) throws {
        guard rename(from, to) == 0 else {
            throw MountDaemonError.setup("cannot move \(from) to \(to): \(String(cString: strerror(errno)))")
        }
    }
}
