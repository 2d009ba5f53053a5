import Foundation
import NIOSSL

/// Which servers a client talks to and how it checks them. Certificates are always verified:
/// against the system's trusted authorities, or, with `caFile`, against the authorities in that
/// PEM file alone (a private CA). Plain `http://` reaches only this machine (loopback, or a
/// Unix socket) unless `insecure` says otherwise: the password and the token would cross the
/// network in clear.
public struct ServerTrust: Codable, Sendable, Equatable {
    public var caFile: String?
    public var insecure: Bool

    public init(caFile: String? = nil, insecure: Bool = false) {
        self.caFile = caFile
        self.insecure = insecure
    }

    /// The one line that says why `server` is refused, or nil.
    public func refusal(of server: String) -> String? {
        if let caFile {
            do { _ = try NIOSSLCertificate.fromPEMFile(caFile) } catch {
                return "--ca-file \(caFile) holds no PEM certificate that can be read (\(error))"
            }
        }
        guard !insecure else { return nil }
        for address in ServerURL.addresses(server) {
            guard let url = URL(string: address), url.scheme?.lowercased() == "http", let host = url.host, !Self.isLoopback(host) else { continue }
            return "\(address) is plain http to another machine: the password and every file would cross the network unencrypted; use https://, or pass --insecure on a network you trust"
        }
        return nil
    }

    static func isLoopback(_ host: String) -> Bool {
        let h = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]")).lowercased()
        return h == "localhost" || h.hasSuffix(".localhost") || h == "::1" || h.hasPrefix("127.")
    }

    /// What requests carry: nil for the system's authorities (the client's default).
    func tlsConfiguration() -> TLSConfiguration? {
        guard let caFile else { return nil }
        var c = TLSConfiguration.makeClientConfiguration()
        c.trustRoots = .file(caFile)
        return c
    }
}
