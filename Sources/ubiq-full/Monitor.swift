import ArgumentParser
import Dispatch
import Foundation
import MountDaemon
import SyncAPI
import SyncClient

struct Monitor: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "monitor",
        abstract: "Show the mount's events as they happen, one per line, until interrupted.")
    @Option(help: "The mount to watch; without it, the mount of the current directory.") var mount: String?
    @Flag(help: "One JSON object per line (keys sorted).") var json = false

    /// An event as the daemon sends it; read loosely, so that a kind this build does not know
    /// is still shown.
    struct Event: Decodable {
        var time: String?
        var kind: String
        var path: String?
        var from: String?
        var detail: String?

        var line: String {
            "\(time ?? "-") \(kind) \(path ?? "-")" + (from.map { " (from \($0))" } ?? "") + (detail.map { ": \($0)" } ?? "")
        }
    }

    func run() async throws {
        let (mountpoint, control) = try MountTable.control(of: mount)
        do { let _: MountStatusReport = try await control.get(ControlPath.status) } catch {
            throw Failure("the daemon of \(mountpoint) does not answer: \(error)")
        }
        try await Self.follow(control, ControlPath.events, of: mountpoint) { line in
            json ? line : (try? JSONDecoder().decode(Event.self, from: Data(line.utf8)))?.line
        }
    }

    /// Prints what `shown` makes of each line of the daemon's stream at `path` (nil: nothing),
    /// each as it comes, also into a pipe, until a signal ends the command (exit 0) or the
    /// mount goes away (exit 1).
    static func follow(_ control: ControlClient, _ path: String, of mountpoint: String, shown: (String) -> String?) async throws {
        let signals = endOnSignals()
        defer { signals.forEach { $0.cancel() } }
        do {
            for try await line in control.lines(path) {
                if let text = shown(line) { print(text) }
                fflush(nil)
            }
        } catch {
            throw Failure("the mount at \(mountpoint) went away: \(error)")
        }
        throw Failure("the mount at \(mountpoint) went away")
    }

    /// SIGINT and SIGTERM are how a monitor is meant to end: exit 0, with what was printed.
    static func endOnSignals() -> [DispatchSourceSignal] {
        [SIGINT, SIGTERM].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler {
                fflush(nil)
                Foundation.exit(0)
            }
            source.resume()
            return source
        }
    }
}
