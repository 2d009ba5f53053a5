import Foundation
import NIOCore
import NIOSSL
import Synchronization

/// The server's certificate chain and private key, read from PEM files, and read again on
/// `reload` (SIGHUP): a renewed certificate (certbot, a private CA) is served from the next
/// handshake on, without a restart or a dropped connection. A reload that fails keeps the
/// pair in use, so a half-written file never takes the server off the air.
public final class TLSCertificates: Sendable {
    public let certificateFile: String
    public let keyFile: String
    private let current: Mutex<(chain: [NIOSSLCertificateSource], key: NIOSSLPrivateKeySource)>

    public init(certificateFile: String, keyFile: String) throws {
        self.certificateFile = certificateFile
        self.keyFile = keyFile
        current = Mutex(try Self.read(certificateFile: certificateFile, keyFile: keyFile))
    }

    public func reload() throws {
        let pair = try Self.read(certificateFile: certificateFile, keyFile: keyFile)
        current.withLock { $0 = pair }
    }

    static func read(certificateFile: String, keyFile: String) throws -> (chain: [NIOSSLCertificateSource], key: NIOSSLPrivateKeySource) {
        let chain = try NIOSSLCertificate.fromPEMFile(certificateFile)
        guard !chain.isEmpty else { throw TLSFileError("\(certificateFile) holds no certificate") }
        let key = try NIOSSLPrivateKey(file: keyFile, format: .pem)
        // A key that does not match the certificate would fail every handshake: refuse it here.
        var probe = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        probe.minimumTLSVersion = .tlsv12
        _ = try NIOSSLContext(configuration: probe)
        return (chain.map { .certificate($0) }, .privateKey(key))
    }

    /// TLS 1.2 and later, with the pair in use at each handshake.
    func serverConfiguration() -> TLSConfiguration {
        let pair = current.withLock { $0 }
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: pair.chain, privateKey: pair.key)
        configuration.minimumTLSVersion = .tlsv12
        configuration.sslContextCallback = { [self] _, promise in
            let pair = current.withLock { $0 }
            var override = NIOSSLContextConfigurationOverride()
            override.certificateChain = pair.chain
            override.privateKey = pair.key
            promise.succeed(override)
        }
        return configuration
    }
}

public struct TLSFileError: Error, CustomStringConvertible {
    public let description: String
    init(_ description: String) { self.description = description }
}
