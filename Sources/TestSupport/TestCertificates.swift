import Foundation

/// A certificate authority of a test's own, made with the real `openssl` command, and server
/// certificates it signs for `127.0.0.1` and `localhost`: what an operator with a private CA
/// gives `ubiq-server --tls-cert` and a client's `--ca-file`.
public struct TestCertificateAuthority: Sendable {
    public let folder: String
    public let name: String
    /// The CA's certificate: what a client trusts.
    public var certificate: String { "\(folder)/\(name)-ca.pem" }
    var key: String { "\(folder)/\(name)-ca.key" }

    public static func make(_ name: String, in folder: String) async throws -> TestCertificateAuthority {
        let ca = TestCertificateAuthority(folder: folder, name: name)
        try await openssl([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
            "-subj", "/CN=ubiq test CA \(name)", "-keyout", ca.key, "-out", ca.certificate,
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        ])
        return ca
    }

    /// A server certificate and key signed by this CA, written to `certificate` and `key`.
    public func issueServerCertificate(certificate: String, key: String) async throws {
        let request = "\(certificate).csr", extensions = "\(certificate).ext"
        try "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n".write(toFile: extensions, atomically: true, encoding: .utf8)
        try await Self.openssl([
            "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", key, "-out", request,
        ])
        try await Self.openssl([
            "x509", "-req", "-in", request, "-CA", self.certificate, "-CAkey", self.key, "-CAcreateserial", "-days", "2",
            "-extfile", extensions, "-out", certificate,
        ])
    }

    static func openssl(_ arguments: [String]) async throws {
        let r = try await run("/usr/bin/openssl", arguments)
        guard r.status == 0 else { throw TestSupportError("openssl \(arguments.first ?? "") failed: \(r.stderr)") }
    }
}
