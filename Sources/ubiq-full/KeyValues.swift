import ArgumentParser
import Foundation
import ItemModel
import MountInfo
import SyncAPI
import SyncClient

/// `ubiq kv`: the container's key-value store (NSUbiquitousKeyValueStore), through the mount's
/// daemon, so that it works offline and a write goes up when the server can be reached.
struct KeyValues: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "kv", abstract: "Read and write the container's key-value store.",
        subcommands: [Get.self, Assign.self, Remove.self, List.self, Watch.self])

    struct Where: ParsableArguments {
        @Option(help: "The mount whose store to use (default: the one containing the working directory).") var mount: String?
        func control() throws -> ControlClient { try MountTable.control(of: mount).control }
    }

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "get",
            abstract: "Print a key's value: a string as its text, data as its bytes, anything else as JSON. Exit 1 when the key has none.")
        @Argument(help: "The key.") var key: String
        @Flag(help: "Print {\"key\":…,\"value\":…} with the value's JSON as stored.") var json = false
        @OptionGroup var place: Where

        func run() async throws {
            let page = try await KeyValues.page(place.control(), key: key)
            guard let entry = page.entries.first, let value = entry.value else { throw Failure("no value for the key '\(key)'") }
            if json { return try KeyValues.printLine(entry) }
            FileHandle.standardOutput.write(KeyValues.plain(value))
        }
    }

    struct Assign: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Set a key: to VALUE as a string, to VALUE read as JSON (--json), or to a file's bytes (--file).")
        @Argument(help: "The key: 1 to 64 bytes of UTF-8.") var key: String
        @Argument(help: "The value (not with --file).") var value: String?
        @Flag(help: "VALUE is JSON: a number, true/false, an array, an object, or a quoted string.") var json = false
        @Option(help: "Store this file's bytes as data.") var file: String?
        @OptionGroup var place: Where

        func validate() throws {
            guard (value == nil) != (file == nil) else { throw ValidationError("give either VALUE or --file PATH") }
            if file != nil && json { throw ValidationError("--json is for VALUE, not --file") }
        }

        func run() async throws {
            let document: Data
            if let file {
                guard let bytes = FileManager.default.contents(atPath: file) else { throw Failure("cannot read \(file)") }
                document = KeyValueDocument.data(bytes)
            } else if json {
                document = Data(value!.utf8)
            } else {
                let encoder = JSONEncoder()
                encoder.outputFormatting = .withoutEscapingSlashes
                document = try encoder.encode(value!)
            }
            let report: KeyValueWriteReport = try await place.control().post(
                ControlPath.keyValueSet + "?" + ControlPath.keyParameter(key), body: document)
            if let error = report.error { throw Failure(error) }
        }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "remove", abstract: "Remove a key (no error when it has no value).")
        @Argument(help: "The key.") var key: String
        @OptionGroup var place: Where

        func run() async throws {
            let report: KeyValueWriteReport = try await place.control().post(ControlPath.keyValueRemove + "?" + ControlPath.keyParameter(key))
            if let error = report.error { throw Failure(error) }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "Print every key and its value's JSON, a tab between them, ordered by key.")
        @Flag(help: "One {\"key\":…,\"value\":…} per line.") var json = false
        @OptionGroup var place: Where

        func run() async throws {
            for entry in try await KeyValues.page(place.control(), key: nil).entries {
                if json { try KeyValues.printLine(entry) } else { FileHandle.standardOutput.write(Data((entry.key + "\t").utf8) + (entry.value ?? Data()) + Data("\n".utf8)) }
            }
        }
    }

    struct Watch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "watch",
            abstract: "Print each change of the store as it happens, with its reason and keys, until interrupted.")
        @Flag(help: "{\"reason\":…,\"keys\":[…]} per line.") var json = false
        @OptionGroup var place: Where

        func run() async throws {
            let (mountpoint, control) = try MountTable.control(of: place.mount)
            try await Monitor.follow(control, ControlPath.keyValueWatch, of: mountpoint) { line in
                if json { return line }
                guard let notice = try? JSONDecoder().decode(KeyValueNotice.self, from: Data(line.utf8)) else { return nil }
                return notice.reason.rawValue + (notice.keys.isEmpty ? "" : ": " + notice.keys.joined(separator: ", "))
            }
        }
    }

    static func page(_ control: ControlClient, key: String?) async throws -> KeyValuePage {
        let query = key.map { "?" + ControlPath.keyParameter($0) } ?? ""
        return try KeyValuePage(json: try await control.data(ControlPath.keyValues + query))
    }

    /// `{"key":…,"value":…}`, the value as stored.
    static func printLine(_ entry: KeyValueEntry) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .withoutEscapingSlashes
        FileHandle.standardOutput.write(Data(#"{"key":"#.utf8) + (try encoder.encode(entry.key)) + Data(#","value":"#.utf8) + (entry.value ?? Data()) + Data("}\n".utf8))
    }

    /// A string's text with a newline, data's bytes as they are, anything else as its JSON.
    static func plain(_ value: Data) -> Data {
        if let bytes = KeyValueDocument.bytes(of: value) { return bytes }
        if let text = try? JSONDecoder().decode(String.self, from: value) { return Data((text + "\n").utf8) }
        return value + Data("\n".utf8)
    }
}

/// `ubiq whoami`: the account, container and server a mount shows, and the account's identity
/// token; outside a mount, those of the stored login (asked of its server).
struct WhoAmICommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "whoami", abstract: "Show the account, container, server and identity token.")
    @Flag(help: "One JSON object.") var json = false
    @Option(help: "The mount to ask (default: the one containing the working directory, else the stored login).") var mount: String?

    func run() async throws {
        let report: WhoAmIReport
        if mount != nil || MountInfo.ubiqMount(containing: Paths.absolute(FileManager.default.currentDirectoryPath)) != nil {
            let (mountpoint, control) = try MountTable.control(of: mount)
            do { report = try await control.get(ControlPath.whoami) } catch { throw Failure("the daemon of \(mountpoint) does not answer: \(error)") }
        } else {
            guard let login = StoredLogin.load() else { throw Failure("not inside a ubiq mount and not logged in: run it in a mount, or `ubiq login` first") }
            let client = SyncHTTPClient(baseURL: login.server, token: login.token, container: .default, trust: login.trust ?? ServerTrust())
            defer { Task { await client.shutdown() } }
            do {
                let answer = try await client.whoami()
                report = WhoAmIReport(account: answer.account, container: "-", server: login.server, identityToken: answer.identity)
            } catch RemoteError.unauthorized {
                throw Failure("\(login.server) no longer accepts the stored login: run `ubiq login` again")
            } catch let error as RemoteError {
                throw Failure("cannot reach \(login.server): \(error)")
            }
        }
        if json {
            print(String(decoding: try outputEncoder().encode(report), as: UTF8.self))
        } else {
            print("account:   \(report.account)")
            print("container: \(report.container)")
            print("server:    \(report.server)")
            print("identity:  \(report.identityToken ?? "(not known yet: the server was never reached from this mount)")")
        }
    }
}
