/// A server on a Unix socket of this machine, written `unix:PATH` wherever a server's address
/// (`ubiq login`, `ubiq mount`) or a listen address (`ubiq-server --listen`) is taken.
public enum UnixSocketAddress {
    public static let scheme = "unix:"
    /// A socket's path fills `sun_path`, 108 bytes with its NUL.
    public static let longestPath = 107

    /// The socket's path in `unix:PATH`; nil for any other form of address.
    public static func path(in address: String) -> String? {
        address.hasPrefix(scheme) ? String(address.dropFirst(scheme.count)) : nil
    }

    public static func address(of path: String) -> String { scheme + path }
}
