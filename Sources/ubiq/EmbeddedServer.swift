import Foundation
import SyncAPI
import SyncClient

/// The embedded default: with no server and no login, `ubiq mount` uses a local `ubiq-server`
/// (started when needed) on a local data folder, with a local account whose random password
/// and token are kept in `$XDG_CONFIG_HOME/ubiq/embedded.json` (mode 0600).
enum EmbeddedServer {
    static let url = "http://127.0.0.1:8420"
    static let account = "local"
    static var stateFile: String { Paths.config + "/embedded.json" }
    static var dataDirectory: String { Paths.data + "/server" }

    struct State: Codable {
        var password: String
        var token: String?
    }

    static func ensure() async throws -> StoredLogin {
        if (try? await SyncHTTPClient.health(server: url)) == nil {
            try await start()
        }
        try FileManager.default.createDirectory(atPath: Paths.config, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        var state: State
        if let data = FileManager.default.contents(atPath: stateFile), let s = try? JSONDecoder().decode(State.self, from: data) {
            state = s
        } else {
            state = State(password: randomPassword(), token: nil)
            try addAccount(password: state.password)
        }
        if let token = state.token { return StoredLogin(server: url, user: account, token: token) }
        let response: TokenResponse
        do {
            response = try await SyncHTTPClient.login(server: url, user: account, password: state.password)
        } catch {
            throw Failure("cannot log in to the embedded server at \(url): \(error)")
        }
        state.token = response.token
        try write(state)
        return StoredLogin(server: url, user: account, token: response.token)
    }

    static func serverBinary() throws -> String {
        let path = Paths.binaryDirectory + "/ubiq-server"
        guard access(path, X_OK) == 0 else { throw Failure("ubiq-server is not beside ubiq (\(path)); build it or pass --server") }
        return path
    }

    static func start() async throws {
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let log = Paths.data + "/server.log"
        _ = try Spawn.detached(executable: try serverBinary(), arguments: ["ubiq-server", "--data", dataDirectory, "--listen", "127.0.0.1:8420"], log: log)
        let clock = ContinuousClock()
        let deadline = clock.now + .seconds(20)
        while clock.now < deadline {
            if (try? await SyncHTTPClient.health(server: url)) != nil { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw Failure("the embedded server did not start; see \(log)")
    }

    static func addAccount(password: String) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try serverBinary())
        process.arguments = ["account", "add", account, "--password-stdin", "--data", dataDirectory]
        let input = Pipe()
        process.standardInput = input
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        input.fileHandleForWriting.write(Data((password + "\n").utf8))
        try input.fileHandleForWriting.close()
        process.waitUntilExit()
        // An account left by an earlier embedded.json that was removed: start over with a new one.
        if process.terminationStatus != 0 {
            throw Failure("cannot create the local account; remove \(dataDirectory) or pass --server")
        }
        try write(State(password: password, token: nil))
    }

    static func write(_ state: State) throws {
        let data = try JSONEncoder().encode(state)
        let fd = open(stateFile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Failure("cannot write \(stateFile)") }
        _ = data.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        fsync(fd)
        close(fd)
    }

    static func randomPassword() -> String {
        var g = SystemRandomNumberGenerator()
        return (0..<4).map { _ in String(g.next() as UInt64, radix: 36) }.joined()
    }
}
