import ArgumentParser
import Foundation
import SyncAPI
import SyncClient

/// What `ubiq login` stores (mode 0600): later mounts use it.
struct StoredLogin: Codable {
    var server: String
    var user: String
    var token: String
    /// How the server's certificate is checked; absent in logins stored before it existed.
    var trust: ServerTrust?

    static func load() -> StoredLogin? {
        guard let data = FileManager.default.contents(atPath: Paths.loginFile) else { return nil }
        return try? JSONDecoder().decode(StoredLogin.self, from: data)
    }

    func save() throws {
        try FileManager.default.createDirectory(atPath: Paths.config, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let data = try JSONEncoder().encode(self)
        let tmp = Paths.loginFile + ".tmp"
        // Created 0600 before any byte of the token is written.
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Failure("cannot write \(tmp)") }
        _ = data.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        fsync(fd)
        close(fd)
        guard rename(tmp, Paths.loginFile) == 0 else { throw Failure("cannot write \(Paths.loginFile)") }
    }
}

/// `--ca-file` and `--insecure`, as `ubiq login` and `ubiq mount` take them.
struct TrustOptions: ParsableArguments {
    @Option(help: "PEM file of the certificate authorities to trust for the server, instead of the system's (a private CA).") var caFile: String?
    @Flag(help: "Allow plain http:// to a server on another machine: the password and files cross the network unencrypted.") var insecure = false

    var value: ServerTrust { ServerTrust(caFile: caFile.map(Paths.absolute), insecure: insecure) }
    var given: Bool { caFile != nil || insecure }

    /// A usage error (exit 2) with the one line `ServerTrust` gives.
    func check(_ server: String) throws {
        if let why = value.refusal(of: server) { throw ValidationError(why) }
    }
}

struct Login: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "login", abstract: "Log in to a sync server and store the token for later mounts.")

    @Option(help: "The server's URL, for example http://127.0.0.1:8420, or unix:PATH for a server on a Unix socket.") var server: String
    @Option(help: "Account name.") var user: String
    @Flag(help: "Read the password from the first line of standard input.") var passwordStdin = false
    @OptionGroup var trust: TrustOptions

    func validate() throws {
        guard let base = ServerURL.normalized(server) else { throw ValidationError(ServerURL.usage) }
        try trust.check(base)
    }

    func run() async throws {
        let password: String
        if passwordStdin {
            guard let line = readLine(strippingNewline: true) else { throw Failure("no password on standard input") }
            password = line
        } else {
            guard isatty(0) != 0 else { throw Failure("standard input is not a terminal: pass --password-stdin") }
            guard let p = getpass("Password for \(user): ") else { throw Failure("no password given") }
            password = String(cString: p)
        }
        let base = ServerURL.normalized(server) ?? server
        do {
            let response = try await SyncHTTPClient.login(
                server: base, user: user, password: password, device: ProcessInfo.processInfo.hostName, trust: trust.value)
            try StoredLogin(server: base, user: response.account, token: response.token, trust: trust.value).save()
            print("logged in to \(base) as \(response.account)")
        } catch RemoteError.refused(_, let message, _) {
            throw Failure("login refused: \(message)")
        } catch RemoteError.unauthorized(let why) {
            throw Failure("login refused: \(why)")
        } catch RemoteError.untrustedServer(let why) {
            throw Failure("\(base): \(why); --ca-file names the authority to trust")
        } catch let error as RemoteError {
            throw Failure("cannot reach \(base): \(error)")
        }
    }
}

struct Logout: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "logout",
        abstract: "Revoke this device's login token on its server and forget it. Running mounts keep their local changes and wait for `ubiq login`.")

    func run() async throws {
        guard let login = StoredLogin.load() else { throw Failure("not logged in") }
        // Forgotten here first: whatever the server says, this device no longer holds it.
        if unlink(Paths.loginFile) != 0 && errno != ENOENT {
            throw Failure("cannot remove \(Paths.loginFile): \(String(cString: strerror(errno)))")
        }
        do {
            try await SyncHTTPClient.logout(server: login.server, token: login.token, trust: login.trust ?? ServerTrust())
            print("logged out of \(login.server)")
        } catch RemoteError.unauthorized {
            print("logged out of \(login.server) (the server no longer knew the token)")
        } catch let error as RemoteError {
            throw Failure("forgot the login, but \(login.server) could not revoke the token (\(error)): it works until it expires, or `ubiq-server account revoke` ends it")
        }
    }
}
