import AsyncHTTPClient
import Foundation
import SyncAPI

/// The server addresses a user writes: `http://HOST[:PORT]`, `https://…`, or `unix:/PATH` for a
/// server on a Unix socket of this machine (each user's embedded server); or several `http(s)`
/// addresses separated by commas, the replicas of one deployment, which a client tries in turn
/// (`SyncHTTPClient`). The text is what logins, mounts and status show; requests go to
/// `requestBase`, the form the HTTP client takes.
public enum ServerURL {
    public static let usage =
        "--server takes an http:// or https:// URL (for example http://127.0.0.1:8420), several separated by commas (replicas), or unix:PATH"

    /// The address without a trailing slash (each of a list's), or nil when it is none of the
    /// forms above.
    public static func normalized(_ text: String) -> String? {
        if let path = UnixSocketAddress.path(in: text) {
            return path.hasPrefix("/") && !path.contains("\0") ? text : nil
        }
        var bases: [String] = []
        for part in text.split(separator: ",", omittingEmptySubsequences: false) {
            let base = part.hasSuffix("/") ? String(part.dropLast()) : String(part)
            guard let url = URL(string: base), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https",
                  let host = url.host, !host.isEmpty
            else { return nil }
            bases.append(base)
        }
        return bases.joined(separator: ",")
    }

    /// Each address of a normalized text: one, or a list's (a `unix:` path is one, whatever
    /// it holds).
    public static func addresses(_ server: String) -> [String] {
        if UnixSocketAddress.path(in: server) != nil { return [server] }
        return server.split(separator: ",").map(String.init)
    }

    /// What request paths are appended to, for one address: a `unix:` address becomes
    /// `http+unix://` with the socket's path percent-encoded as the host.
    public static func requestBase(_ server: String) -> String {
        guard let path = UnixSocketAddress.path(in: server), let url = URL(httpURLWithSocketPath: path, uri: "") else { return server }
        var text = url.absoluteString
        if text.hasSuffix("/") { text.removeLast() }
        return text
    }
}
