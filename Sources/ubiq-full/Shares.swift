import ArgumentParser
import Foundation
import ItemModel
import MountDaemon
import MountInfo
import SyncAPI
import SyncClient

/// `ubiq share PATH`: a link on the server to a read-only snapshot of the file or folder, as
/// `URLForPublishingUbiquitousItemAtURL` gives (docs/SEMANTICS.md, "Share links"). The mount's
/// daemon checks that what the item shows is on the server, and asks the server.
struct Share: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "share", abstract: "Print a link anyone can fetch a read-only copy of the item from, as it is now (with --list, every share).")
    @Argument(help: "A file or folder inside a mount whose content is on the server.") var path: String?
    @Option(help: "How long the link works: \(DurationText.usage). Without it, until `ubiq unshare`.") var expires: String?
    @Flag(help: "List the container's shares instead.") var list = false
    @Option(help: "The mount to list the shares of, with --list.") var mount: String?
    @Flag(help: "JSON: one object per share.") var json = false

    func validate() throws {
        if list && path != nil { throw ValidationError("give a PATH or --list, not both") }
        if !list && path == nil { throw ValidationError("give the PATH to share, or --list") }
        if let expires, DurationText.parse(expires) == nil { throw ValidationError("--expires takes \(DurationText.usage), not '\(expires)'") }
    }

    func run() async throws {
        let report: ShareReport
        if list {
            let (mountpoint, control) = try MountTable.control(of: mount)
            report = try await Self.ask(control, ControlPath.shares, post: false, mountpoint: mountpoint)
        } else {
            let (control, inMount) = try Self.control(for: path ?? "")
            var query = "?path=" + APIPath.percentEncoded(inMount)
            if let expires, let duration = DurationText.parse(expires) { query += "&expires=\(duration.components.seconds)" }
            report = try await Self.ask(control, ControlPath.share + query, post: true, mountpoint: path ?? "")
        }
        if let error = report.error { throw Failure(error) }
        for line in report.shares {
            if json {
                var object: [String: Any] = [
                    "url": line.url, "token": line.share.token, "name": line.share.name, "kind": line.share.kind.rawValue,
                    "created": WallClock.isoSeconds(of: line.share.created), "downloads": line.share.downloads,
                    "files": line.share.files, "size": line.share.size,
                ]
                if let path = line.path { object["path"] = path }
                if let expires = line.share.expires { object["expires"] = WallClock.isoSeconds(of: expires) }
                print(jsonLine(object))
            } else if list {
                let expiry = line.share.expires.map { "until " + WallClock.isoSeconds(of: $0) } ?? "no expiry"
                print("\(line.path ?? "(\(line.share.name), gone)")  \(line.url)  \(expiry)  \(line.share.downloads) downloads")
            } else {
                print(line.url)
                print("  \(line.share.expires.map { "expires " + WallClock.isoSeconds(of: $0) } ?? "no expiry"); \(line.share.files) file\(line.share.files == 1 ? "" : "s"), \(line.share.size) bytes")
            }
        }
    }

    /// The daemon of the mount `path` is in, and the path from that mount's top.
    static func control(for path: String) throws -> (ControlClient, String) {
        let absolute = try requireInMount(path)
        guard let top = MountInfo.ubiqMount(containing: absolute) else { throw Failure("\(path) is not inside a ubiq mount") }
        return (try Versions.control(of: absolute), String(absolute.dropFirst(top == "/" ? 0 : top.count)))
    }

    static func ask(_ control: ControlClient, _ request: String, post: Bool, mountpoint: String) async throws -> ShareReport {
        do {
            // The daemon waits for the server: longer than a status call.
            return post ? try await control.post(request, timeout: .seconds(70)) : try await control.get(request, timeout: .seconds(70))
        } catch {
            throw Failure("the daemon of \(mountpoint) does not answer: \(error)")
        }
    }
}

/// `ubiq unshare PATH`: every link to the item stops working (404).
struct Unshare: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "unshare", abstract: "Remove every share of an item: its links stop working.")
    @Argument(help: "A shared file or folder inside a mount.") var path: String

    func run() async throws {
        let (control, inMount) = try Share.control(for: path)
        let report = try await Share.ask(control, ControlPath.unshare + "?path=" + APIPath.percentEncoded(inMount), post: true, mountpoint: path)
        if let error = report.error { throw Failure(error) }
        print("removed \(report.removed ?? 0) share\(report.removed == 1 ? "" : "s") of \(path)")
    }
}
