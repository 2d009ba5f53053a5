import ArgumentParser
import ControlSocket
import Foundation

struct Ubiq: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ubiq",
        abstract: "Mount a ubiq cloud container as a directory and manage what is kept on this device.",
        subcommands: [Mount.self, Unmount.self, Login.self, Logout.self, Status.self, Monitor.self, Download.self, Evict.self, Pin.self, Unpin.self, Versions.self, Resolve.self, Restore.self, Share.self, Unshare.self, Query.self, KeyValues.self, WhoAmICommand.self, Server.self])

    static func runMain() async -> Int32 {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
            return 0
        } catch let failure as Failure {
            FileHandle.standardError.write(Data("ubiq: \(failure.description)\n".utf8))
            return 1
        } catch let code as ExitCode {
            // The command printed its own lines already (one per failed path).
            return code.rawValue
        } catch {
            let code = exitCode(for: error)
            if code == .success {
                print(fullMessage(for: error))
                return 0
            }
            if code == .validationFailure {
                FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
                return 2
            }
            FileHandle.standardError.write(Data("ubiq: \(fullMessage(for: error))\n".utf8))
            return 1
        }
    }
}

/// A failure the user should read: one line on stderr, exit 1.
struct Failure: Error, CustomStringConvertible {
    let description: String
    init(_ message: String) { description = message }
}

func printError(_ line: String) {
    FileHandle.standardError.write(Data("ubiq: \(line)\n".utf8))
}

enum Paths {
    static var env: [String: String] { ProcessInfo.processInfo.environment }
    static var home: String { env["HOME"] ?? "/root" }
    static func xdg(_ name: String, _ fallback: String) -> String {
        if let v = env[name], !v.isEmpty { return v }
        return home + "/" + fallback
    }
    static var config: String { xdg("XDG_CONFIG_HOME", ".config") + "/ubiq" }
    static var cache: String { xdg("XDG_CACHE_HOME", ".cache") + "/ubiq" }
    static var data: String { xdg("XDG_DATA_HOME", ".local/share") + "/ubiq" }
    static var loginFile: String { config + "/login.json" }

    /// The directory of the running `ubiq` binary, where `ubiq-server` is built beside it.
    static var binaryDirectory: String {
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: exe).deletingLastPathComponent().path
    }

    static func absolute(_ path: String) -> String { MountLookup.absolute(path) }
}
