import ArgumentParser
import DataFolderLock
import Foundation

/// `ubiq server …`: the user's embedded server, which `ubiq mount` starts when there is no
/// login and leaves running after the last unmount (another mount, or a second device of the
/// tour, may use it).
struct Server: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "server",
        abstract: "Show, start or stop your embedded server (the one `ubiq mount` uses without a login).",
        subcommands: [ServerStatus.self, ServerStart.self, ServerStop.self],
        defaultSubcommand: ServerStatus.self)
}

struct ServerStatus: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Whether your embedded server runs, its address and the mounts using it.")
    @Flag(help: "One JSON object.") var json = false

    func run() async throws {
        let holder = EmbeddedServer.runningPID
        let mounts = holder == nil ? [] : await EmbeddedServer.mountsUsingIt()
        if json {
            var object: [String: Any] = ["url": EmbeddedServer.url, "data": EmbeddedServer.dataDirectory, "running": holder != nil, "mounts": mounts]
            if let holder { object["pid"] = Int(holder) }
            print(jsonLine(object))
            return
        }
        print("server:  \(holder.map { "running (pid \($0))" } ?? "not running")")
        print("address: \(EmbeddedServer.url)")
        print("data:    \(EmbeddedServer.dataDirectory)")
        print("mounts:  \(mounts.isEmpty ? "none" : mounts.joined(separator: ", "))")
    }
}

struct ServerStart: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "start", abstract: "Start your embedded server (mounts that use it reconnect).")

    func run() async throws {
        try await EmbeddedServer.start()
        let pid = EmbeddedServer.runningPID.map { " (pid \($0))" } ?? ""
        print("the embedded server runs at \(EmbeddedServer.url)\(pid)")
    }
}

struct ServerStop: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stop", abstract: "Stop your embedded server. Mounts that use it go offline, keep every change, and reconnect when it runs again.")

    func run() async throws {
        let mounts = await EmbeddedServer.mountsUsingIt()
        guard let pid = try await EmbeddedServer.stop() else {
            print("the embedded server is not running")
            return
        }
        print("stopped the embedded server (pid \(pid))")
        if !mounts.isEmpty {
            print("offline until it runs again (`ubiq server start`, or the next `ubiq mount` without a login): \(mounts.joined(separator: ", "))")
        }
    }
}
