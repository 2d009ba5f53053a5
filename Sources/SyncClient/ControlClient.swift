import AsyncHTTPClient
import ControlSocket
import Foundation
import NIOCore
import NIOHTTP1
import SyncAPI

/// Talks to a mount daemon over its control socket.
public struct ControlClient: Sendable {
    public let socketPath: String

    public init(socketPath: String) { self.socketPath = socketPath }

    public enum Failure: Error, CustomStringConvertible {
        case noDaemon(String)
        case answered(Int, String)
        public var description: String {
            switch self {
            case .noDaemon(let why): "no mount daemon answers (\(why))"
            case .answered(let status, let body): "the mount daemon answered \(status): \(body)"
            }
        }
    }

    func url(_ path: String) -> String {
        let escaped = socketPath.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? socketPath
        return "http+unix://\(escaped)\(path)"
    }

    public func get<T: Decodable>(_ path: String, timeout: Duration = .seconds(10)) async throws -> T {
        try await call(.GET, path, timeout: timeout)
    }

    public func post<T: Decodable>(_ path: String, timeout: Duration = .seconds(10)) async throws -> T {
        try await call(.POST, path, timeout: timeout)
    }

    /// POSTs `body` (the daemon reads it as the route says).
    public func post<T: Decodable>(_ path: String, body: Data, timeout: Duration = .seconds(10)) async throws -> T {
        try await call(.POST, path, body: body, timeout: timeout)
    }

    /// The raw answer to `GET path`: for answers that are not `Codable` (`KeyValuePage`).
    public func data(_ path: String, timeout: Duration = .seconds(10)) async throws -> Data {
        try await exchange(.GET, path, body: nil, timeout: timeout)
    }

    func call<T: Decodable>(_ method: HTTPMethod, _ path: String, body: Data? = nil, timeout: Duration) async throws -> T {
        try JSONDecoder().decode(T.self, from: try await exchange(method, path, body: body, timeout: timeout))
    }

    /// One call, over a socket of its own (`SocketExchange`), not the HTTP client.
    func exchange(_ method: HTTPMethod, _ path: String, body: Data?, timeout: Duration) async throws -> Data {
        let answer = try await answer(method, path, body: body, timeout: timeout)
        guard answer.status == 200 else { throw Failure.answered(answer.status, String(decoding: answer.body, as: UTF8.self)) }
        return Data(answer.body)
    }

    /// The answer to one call whatever its status: for routes whose statuses say more than
    /// success or failure (`ControlPath.queryOutput`).
    public func answer(_ method: HTTPMethod, _ path: String, body: Data? = nil, timeout: Duration = .seconds(10)) async throws -> ControlExchange.Answer {
        do {
            return try await SocketExchange.run(socketPath: socketPath, method: method.rawValue, target: path, body: body, timeout: timeout)
        } catch {
            throw Failure.noDaemon("\(error)")
        }
    }

    /// Streams the lines of `GET path` until the daemon ends it or the task is cancelled.
    public func lines(_ path: String) -> AsyncThrowingStream<String, Error> {
        let request = HTTPClientRequest(url: url(path))
        return AsyncThrowingStream { continuation in
            let task = Task {
                do {
                    let response = try await SyncHTTPClient.shared.execute(request, deadline: .distantFuture)
                    guard response.status == .ok else {
                        let body = try await response.body.collect(upTo: 1 << 20)
                        throw Failure.answered(Int(response.status.code), String(buffer: body))
                    }
                    // Bytes until a newline: a chunk may end inside a character.
                    var pending: [UInt8] = []
                    for try await chunk in response.body {
                        pending += chunk.readableBytesView
                        while let nl = pending.firstIndex(of: UInt8(ascii: "\n")) {
                            continuation.yield(String(decoding: pending[..<nl], as: UTF8.self))
                            pending.removeSubrange(...nl)
                        }
                    }
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
}
