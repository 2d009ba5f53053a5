import Foundation
import SyncAPI
import TestSupport
import Testing

/// The server over TLS with a private certificate authority, as an operator runs it on a
/// network: real certificates made by `openssl`, a real `ubiq-server --tls-cert`, real logins
/// and mounts that check them.
@Suite struct TLSTests {
    struct Keys {
        let work: TempDirectory
        let trusted: TestCertificateAuthority
        let other: TestCertificateAuthority
        var certificate: String { work.path + "/server.pem" }
        var key: String { work.path + "/server.key" }

        static func make() async throws -> Keys {
            let work = try TempDirectory("ubiq-tls")
            let keys = Keys(
                work: work, trusted: try await .make("trusted", in: work.path), other: try await .make("other", in: work.path))
            try await keys.trusted.issueServerCertificate(certificate: keys.certificate, key: keys.key)
            return keys
        }
    }

    /// A `ubiq` user of its own (its own configuration folder), outside any test device.
    struct Client {
        let home: TempDirectory
        var env: [String: String] { ProcessInfo.processInfo.environment.merging(["XDG_CONFIG_HOME": home.path + "/config"]) { $1 } }

        init() throws { home = try TempDirectory("ubiq-tls-client") }

        func ubiq(_ arguments: [String], stdin: String? = nil) async throws -> (status: Int32, stdout: String, stderr: String) {
            try await run(Binaries.path("ubiq"), arguments, stdin: stdin, environment: env)
        }

        func login(_ server: String, _ extra: [String] = [], password: String = "alice-pw") async throws -> (status: Int32, stdout: String, stderr: String) {
            try await ubiq(["login", "--server", server, "--user", "alice", "--password-stdin"] + extra, stdin: password + "\n")
        }
    }

    func withTLSServer<T>(_ keys: Keys, _ body: (ServerProcess) async throws -> T) async throws -> T {
        try await withServer(extraArguments: ["--tls-cert", keys.certificate, "--tls-key", keys.key]) { server in
            try await server.addAccount("alice", password: "alice-pw")
            return try await body(server)
        }
    }

    @Test func twoMountsSyncOverTLSWithAPrivateAuthority() async throws {
        let keys = try await Keys.make()
        defer { keys.work.remove() }
        try await withTLSServer(keys) { server in
            #expect(server.baseURL.hasPrefix("https://"))
            let trust = ["--ca-file", keys.trusted.certificate]
            try await withMountedDevice("A", server: server, loginArguments: trust) { a in
                try await withMountedDevice("B", server: server, loginArguments: trust) { b in
                    try await a.must(#"echo "over TLS" > "$M/secret.txt""#)
                    try await eventually("the file to reach B") { try await b.sh(#"cat "$M/secret.txt""#).stdout == "over TLS\n" }
                    #expect(try await a.ubiq(["status", "--mount", a.mountpoint]).stdout.contains("(connected)"))
                }
            }
            // Plain HTTP to the TLS port gets nothing.
            let plain = try await run("/usr/bin/curl", ["-sS", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:\(server.port)/health"])
            #expect(plain.stdout != "200", "\(plain)")
        }
    }

    @Test func aCertificateNotSignedByATrustedAuthorityIsRefused() async throws {
        let keys = try await Keys.make()
        defer { keys.work.remove() }
        try await withTLSServer(keys) { server in
            let client = try Client()
            let home = client.home
            defer { home.remove() }
            func login(_ extra: [String]) async throws -> (status: Int32, stdout: String, stderr: String) { try await client.login(server.baseURL, extra) }
            for extra in [[], ["--ca-file", keys.other.certificate]] {
                let refused = try await login(extra)
                #expect(refused.status == 1, "\(extra): \(refused)")
                #expect(refused.stderr.contains("certificate is not trusted"), "\(extra): \(refused.stderr)")
                #expect(!FileManager.default.fileExists(atPath: home.path + "/config/ubiq/login.json"), "nothing stored")
            }
            // A mount told to trust another authority comes up, says why it cannot sync, and
            // sends nothing.
            let mountpoint = home.path + "/mnt"
            try FileManager.default.createDirectory(atPath: mountpoint, withIntermediateDirectories: true)
            #expect(try await login(["--ca-file", keys.trusted.certificate]).status == 0)
            let mounted = try await client.ubiq(["mount", mountpoint, "--server", server.baseURL, "--cache", home.path + "/cache", "--ca-file", keys.other.certificate])
            #expect(mounted.status == 0, "\(mounted)")
            defer { _ = try? FileManager.default.removeItem(atPath: home.path + "/cache") }
            do {
                try await eventually("the mount to name the certificate") {
                    try await client.ubiq(["status", "--mount", mountpoint]).stdout.contains("certificate is not trusted")
                }
                #expect(try await client.ubiq(["unmount", mountpoint]).status == 0)
            } catch {
                _ = try? await run("/bin/fusermount3", ["-uz", mountpoint])
                throw error
            }
            let bad = try await login(["--ca-file", keys.key])
            #expect(bad.status == 2 && bad.stderr.contains("holds no PEM certificate"), "\(bad)")
            #expect(try await login(["--ca-file", keys.trusted.certificate]).status == 0)
        }
    }

    @Test func plainHTTPToAnotherMachineIsRefusedUnlessInsecure() async throws {
        let client = try Client()
        defer { client.home.remove() }
        // 192.0.2.0/24 is reserved for documentation: nothing answers there.
        let remote = "http://192.0.2.10:8420"
        let refused = try await client.login(remote)
        #expect(refused.status == 2, "\(refused)")
        #expect(refused.stderr.contains("plain http to another machine") && refused.stderr.contains("--insecure"), "\(refused.stderr)")
        let mount = try await client.ubiq(["mount", client.home.path, "--server", remote])
        #expect(mount.status != 0)
        // Told so, it tries (and finds nobody there).
        let tried = try await client.login(remote, ["--insecure"])
        #expect(tried.status == 1 && tried.stderr.contains("cannot reach"), "\(tried)")
    }

    @Test func aRenewedCertificateIsServedAfterSIGHUP() async throws {
        let keys = try await Keys.make()
        defer { keys.work.remove() }
        try await withTLSServer(keys) { server in
            let client = try Client()
            defer { client.home.remove() }
            func login(trusting ca: TestCertificateAuthority) async throws -> Int32 {
                try await client.login(server.baseURL, ["--ca-file", ca.certificate]).status
            }
            #expect(try await login(trusting: keys.trusted) == 0)
            // Renewed by the other authority, in place; a broken file first changes nothing.
            try "not a certificate".write(toFile: keys.certificate, atomically: true, encoding: .utf8)
            kill(server.pid, SIGHUP)
            #expect(try await login(trusting: keys.trusted) == 0, "a reload that fails keeps the certificate in use")
            try await keys.other.issueServerCertificate(certificate: keys.certificate, key: keys.key)
            kill(server.pid, SIGHUP)
            try await eventually("the server to read the new certificate") { server.printed().contains("reloaded \(keys.certificate)") }
            #expect(try await login(trusting: keys.other) == 0)
            #expect(try await login(trusting: keys.trusted) == 1)
            #expect(server.isRunning)
        }
    }
}
