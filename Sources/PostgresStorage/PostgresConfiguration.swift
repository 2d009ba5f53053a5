import Foundation

/// Where the PostgreSQL metadata store connects, and as whom.
///
/// Given as a connection URL, `postgres://USER@HOST:PORT/DATABASE?OPTIONS` (`postgresql://`
/// too). The password is never part of it: a URL ends up on command lines, in `ps` and in
/// logs. It comes from a file (mode 0600, its first line) or from the environment's
/// `PGPASSWORD`, as libpq's own tools take it.
public struct PostgresConfiguration: Sendable, Equatable {
    public var host: String
    public var port: Int
    public var user: String
    public var database: String
    public var password: String?
    /// `sslmode` from the URL: `disable` (the default: a server on this host or a private
    /// network), `prefer` or `require`.
    public var tls: TLSMode
    /// At most this many connections at once (`pool_max` in the URL; 20 by default).
    public var maximumConnections: Int
    /// How long a connection attempt may take (`connect_timeout` in seconds, as libpq's).
    public var connectTimeout: Duration

    public enum TLSMode: String, Sendable, Equatable {
        case disable, prefer, require
    }

    /// Where the password comes from. Never the command line.
    public enum PasswordSource: Sendable, Equatable {
        /// `PGPASSWORD` of the given environment (the process's, usually); none when unset.
        case environment([String: String])
        /// The first line of a file, which should be readable by the server's user only.
        case file(String)
        /// No password (trust or peer authentication).
        case none
    }

    public struct Invalid: Error, Sendable, Equatable, CustomStringConvertible {
        public let description: String
        init(_ description: String) { self.description = description }
    }

    public init(
        host: String, port: Int = 5432, user: String, database: String, password: String?, tls: TLSMode = .disable,
        maximumConnections: Int = 20, connectTimeout: Duration = .seconds(10)
    ) {
        self.host = host
        self.port = port
        self.user = user
        self.database = database
        self.password = password
        self.tls = tls
        self.maximumConnections = maximumConnections
        self.connectTimeout = connectTimeout
    }

    /// Reads a connection URL; a password inside it is refused (see the type's comment).
    public init(url text: String, password source: PasswordSource) throws {
        guard let url = URLComponents(string: text), let scheme = url.scheme, ["postgres", "postgresql"].contains(scheme) else {
            throw Invalid("not a postgres:// URL: \(text)")
        }
        if url.password != nil {
            throw Invalid("the URL holds a password: give it in PGPASSWORD or a password file instead")
        }
        guard let host = url.host, !host.isEmpty else { throw Invalid("the URL names no host: \(text)") }
        guard let user = url.user, !user.isEmpty else { throw Invalid("the URL names no user: \(text)") }
        let path = url.path.hasPrefix("/") ? String(url.path.dropFirst()) : url.path
        guard !path.isEmpty, !path.contains("/") else { throw Invalid("the URL names no database: \(text)") }
        self.init(host: host, port: url.port ?? 5432, user: user, database: path, password: nil)
        for item in url.queryItems ?? [] {
            let value = item.value ?? ""
            switch item.name {
            case "sslmode":
                guard let mode = TLSMode(rawValue: value) else { throw Invalid("sslmode must be disable, prefer or require: \(value)") }
                tls = mode
            case "pool_max":
                guard let n = Int(value), n >= 1 else { throw Invalid("pool_max must be a positive number: \(value)") }
                maximumConnections = n
            case "connect_timeout":
                guard let n = Int(value), n >= 1 else { throw Invalid("connect_timeout must be a positive number of seconds: \(value)") }
                connectTimeout = .seconds(n)
            default:
                // An option this store does not know would silently do nothing.
                throw Invalid("unknown option in the URL: \(item.name)")
            }
        }
        password = try Self.password(from: source)
    }

    static func password(from source: PasswordSource) throws -> String? {
        switch source {
        case .environment(let environment):
            return environment["PGPASSWORD"]
        case .file(let path):
            guard let data = FileManager.default.contents(atPath: path) else { throw Invalid("cannot read the password file \(path)") }
            let text = String(decoding: data, as: UTF8.self)
            return String(text.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
        case .none:
            return nil
        }
    }
}

extension PostgresConfiguration: CustomStringConvertible {
    /// The URL it stands for, never the password: a configuration ends up in logs and test output.
    public var description: String {
        "postgres://\(user)@\(host):\(port)/\(database)?sslmode=\(tls.rawValue)&pool_max=\(maximumConnections)"
            + " (password: \(password == nil ? "none" : "given"))"
    }
}
