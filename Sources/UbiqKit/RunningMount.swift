import ControlSocket
import Foundation
import MountInfo
import SyncAPI

/// Where UbiqKit finds running mounts: the registry folder their daemons write
/// (`MountRegistry`), one entry per mountpoint naming its control socket.
public struct MountRegistryLocation: Sendable, Hashable {
    public var directory: String

    public init(directory: String) { self.directory = directory }

    /// This user's registry as this process's environment names it:
    /// `$XDG_RUNTIME_DIR/ubiq/mounts`, else `/tmp/ubiq-UID/mounts`. A program started outside
    /// the session that made the mounts (cron, a system service) may have another
    /// `XDG_RUNTIME_DIR`, and then names the session's registry with `init(directory:)`.
    public static var standard: MountRegistryLocation { MountRegistryLocation(directory: MountRegistry.directory) }
}

/// Why UbiqKit could not do what it was asked.
public enum UbiqKitError: Error, CustomStringConvertible, Sendable, Equatable {
    /// No running mount of that container (or none at all) is registered.
    case noMount(String)
    /// The path is not inside a ubiq mount.
    case notInMount(String)
    /// The mount's daemon did not answer.
    case daemonUnreachable(String)
    /// The daemon answered with a refusal, in its words.
    case refused(String)
    /// A predicate the daemon cannot run, with the offset of its offending token (Unicode
    /// scalars from 0) when it names one.
    case invalidPredicate(String, position: Int?)
    /// A system call on the item failed with this errno.
    case posix(Int32, path: String)
    /// A value the key-value store cannot hold.
    case unsupportedValue(String)

    public var description: String {
        switch self {
        case .noMount(let what): "no running ubiq mount: \(what)"
        case .notInMount(let path): "\(path) is not inside a ubiq mount"
        case .daemonUnreachable(let why): "the mount's daemon does not answer: \(why)"
        case .refused(let why): why
        case .invalidPredicate(let why, let position): position.map { "at \($0): \(why)" } ?? why
        case .posix(let code, let path): "\(path): \(String(cString: strerror(code)))"
        case .unsupportedValue(let why): why
        }
    }
}

/// One mount whose daemon registered: where it is mounted and where its control socket is.
struct RunningMount: Sendable, Equatable {
    let mountpoint: String
    let controlSocket: String

    var root: URL { URL(fileURLWithPath: mountpoint, isDirectory: true) }

    /// The lines of `GET target`, an answer that goes on (a live query, the store's changes),
    /// until the daemon ends it (the sequence ends) or fails (it throws). A thread of its own
    /// waits on the socket; the consumer's cancellation cuts the connection.
    func lines(_ target: String) -> AsyncThrowingStream<String, Error> {
        AsyncThrowingStream { continuation in
            let connection: ControlConnection
            do { connection = try ControlConnection(socketPath: controlSocket) } catch {
                continuation.finish(throwing: UbiqKitError.daemonUnreachable("\(error)"))
                return
            }
            continuation.onTermination = { _ in connection.shutdown() }
            Thread {
                do {
                    try connection.lines(target) { continuation.yield($0) }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: UbiqKitError.daemonUnreachable("\(error)"))
                }
            }.start()
        }
    }

    /// Every ubiq mount of this process's mount table that has an entry in `registry`, in the
    /// order they were mounted. A mount without an entry is another session's, or its daemon died.
    static func all(in registry: MountRegistryLocation) -> [RunningMount] {
        MountInfo.ubiqMountpoints().compactMap { mountpoint in
            MountRegistry.entry(mountpoint, in: registry.directory).map { RunningMount(mountpoint: mountpoint, controlSocket: $0.controlSocket) }
        }
    }

    /// The mount holding `url`, and the item's path from the mount's top (`/a/b`; `/` for the top).
    static func containing(_ url: URL, in registry: MountRegistryLocation) throws(UbiqKitError) -> (mount: RunningMount, path: String) {
        let absolute = MountLookup.absolute(url.path)
        guard let mountpoint = MountInfo.ubiqMount(containing: absolute) else { throw .notInMount(url.path) }
        guard let entry = MountRegistry.entry(mountpoint, in: registry.directory) else {
            throw .noMount("no daemon is registered for \(mountpoint) in \(registry.directory)")
        }
        let inside = String(absolute.dropFirst(mountpoint == "/" ? 0 : mountpoint.count))
        return (RunningMount(mountpoint: mountpoint, controlSocket: entry.controlSocket), inside.isEmpty ? "/" : inside)
    }

    /// One request answered with JSON, blocking: for the calls Apple's API makes synchronous.
    /// The daemon answers from its local state, so a call takes about a millisecond; `timeout`
    /// bounds each wait on the socket for a daemon that hangs.
    func call<T: Decodable>(_ method: String, _ target: String, body: Data? = nil, timeout: Int = 10) throws(UbiqKitError) -> T {
        let data = try exchange(method, target, body: body, timeout: timeout)
        do { return try JSONDecoder().decode(T.self, from: data) } catch {
            throw .daemonUnreachable("an answer this UbiqKit does not read (\(error))")
        }
    }

    /// The body of a 200 answer.
    func exchange(_ method: String, _ target: String, body: Data? = nil, timeout: Int = 10) throws(UbiqKitError) -> Data {
        let answer: ControlExchange.Answer
        do {
            answer = try ControlExchange.exchange(socketPath: controlSocket, method: method, target: target, body: body.map { Array($0) }, timeoutSeconds: timeout)
        } catch {
            throw .daemonUnreachable("\(error)")
        }
        guard answer.status == 200 else { throw .refused("the mount's daemon answered \(answer.status): \(String(decoding: answer.body, as: UTF8.self))") }
        return Data(answer.body)
    }

    func whoami() throws(UbiqKitError) -> WhoAmIReport { try call("GET", ControlPath.whoami, timeout: 5) }
}

/// What an object of UbiqKit works on: a given container's mount, or the default one looked up
/// at each use (a mount made or remade later is found).
struct MountTarget: Sendable, Hashable {
    var containerURL: URL?
    var registry: MountRegistryLocation

    func mount() throws(UbiqKitError) -> RunningMount {
        if let containerURL { return try RunningMount.containing(containerURL, in: registry).mount }
        guard let found = UbiquityContainer.defaultMount(in: registry) else { throw .noMount("none is registered in \(registry.directory)") }
        return found.mount
    }
}
