import AsyncHTTPClient
import Foundation
import ItemModel
import NIOCore
import NIOHTTP1
import SyncAPI

public func sha256(_ data: Data) -> ContentDigest { ContentDigest.of(data) }

public struct TestResponse: Sendable {
    public let status: Int
    public let headers: HTTPHeaders
    public let body: Data

    public func decode<T: Decodable>(_ type: T.Type = T.self) throws -> T {
        do { return try JSONDecoder().decode(T.self, from: body) } catch {
            throw TestSupportError("cannot decode \(T.self) from \(status) \(String(decoding: body.prefix(500), as: UTF8.self)): \(error)")
        }
    }

    /// The protocol error code, when the body is an error.
    public var errorCode: APIErrorCode? { (try? JSONDecoder().decode(APIErrorBody.self, from: body))?.error.code }
    public var error: APIErrorBody.Detail? { (try? JSONDecoder().decode(APIErrorBody.self, from: body))?.error }
    public var text: String { String(decoding: body, as: UTF8.self) }
}

/// A raw HTTP client for tests: sends exactly what the test says, so malformed input can be sent too.
public struct TestHTTP: Sendable {
    public let baseURL: String
    public var token: String?

    public init(baseURL: String, token: String? = nil) {
        self.baseURL = baseURL
        self.token = token
    }

    public func send(
        _ method: HTTPMethod, _ path: String, headers: [(String, String)] = [], body: Data? = nil,
        timeout: Duration = .seconds(30)
    ) async throws -> TestResponse {
        var request = HTTPClientRequest(url: baseURL + path)
        request.method = method
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        let response = try await HTTPClient.shared.execute(request, timeout: .init(timeout))
        // execute's deadline covers the answer's head only. A body that never ends (a push
        // stream the server should have refused) must fail the test, not hang the run.
        let collected = try await withThrowingTaskGroup(of: ByteBuffer?.self) { group in
            group.addTask { try await response.body.collect(upTo: 1 << 30) }
            group.addTask { try await Task.sleep(for: timeout); return nil }
            defer { group.cancelAll() }
            guard case let body?? = try await group.next() else {
                throw TestSupportError("\(method) \(path): the answer's body did not end within \(timeout)")
            }
            return body
        }
        return TestResponse(status: Int(response.status.code), headers: response.headers, body: Data(collected.readableBytesView))
    }

    public func json<T: Encodable>(_ method: HTTPMethod, _ path: String, _ value: T) async throws -> TestResponse {
        try await send(method, path, headers: [("Content-Type", "application/json")], body: try JSONEncoder().encode(value))
    }

    /// Logs in and returns a client carrying the token.
    public func login(_ user: String, _ password: String) async throws -> TestHTTP {
        let r = try await json(.POST, APIPath.token, TokenRequest(user: user, password: password))
        guard r.status == 201 else { throw TestSupportError("login failed: \(r.status) \(r.text)") }
        return TestHTTP(baseURL: baseURL, token: try r.decode(TokenResponse.self).token)
    }

    // Conveniences for the common steps of a test; each checks its own status.

    @discardableResult
    public func uploadBlob(_ content: Data) async throws -> ContentDigest {
        let digest = sha256(content)
        let r = try await send(.PUT, APIPath.blob(digest), body: content)
        guard r.status == 201 else { throw TestSupportError("blob upload failed: \(r.status) \(r.text)") }
        return digest
    }

    public func createFile(_ container: ContainerID, parent: ItemID = .root, name: String, content: Data) async throws -> ItemMetadata {
        let digest = try await uploadBlob(content)
        let r = try await json(.POST, APIPath.items(container), CreateItemRequest(parentID: parent, name: name, kind: .file, digest: digest))
        guard r.status == 201 else { throw TestSupportError("create failed: \(r.status) \(r.text)") }
        return try r.decode()
    }

    public func createFolder(_ container: ContainerID, parent: ItemID = .root, name: String) async throws -> ItemMetadata {
        let r = try await json(.POST, APIPath.items(container), CreateItemRequest(parentID: parent, name: name, kind: .folder))
        guard r.status == 201 else { throw TestSupportError("mkdir failed: \(r.status) \(r.text)") }
        return try r.decode()
    }
}

/// One Server-Sent Event.
public struct ServerEvent: Sendable {
    public var name: String
    public var id: String?
    public var data: String
}

/// Reads a push stream event by event until cancelled.
public struct EventStreamReader: Sendable {
    public let events: AsyncThrowingStream<ServerEvent, Error>
    let task: Task<Void, Never>

    public func cancel() { task.cancel() }

    public static func open(_ http: TestHTTP, path: String) -> EventStreamReader {
        let (events, sink) = AsyncThrowingStream<ServerEvent, Error>.makeStream()
        let task = Task {
            do {
                var request = HTTPClientRequest(url: http.baseURL + path)
                if let token = http.token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
                let response = try await HTTPClient.shared.execute(request, timeout: .hours(1))
                guard response.status == .ok else {
                    throw TestSupportError("stream answered \(response.status.code)")
                }
                var pending = ""
                var event = ServerEvent(name: "message", id: nil, data: "")
                for try await chunk in response.body {
                    pending += String(buffer: chunk)
                    while let newline = pending.firstIndex(of: "\n") {
                        let line = String(pending[..<newline])
                        pending = String(pending[pending.index(after: newline)...])
                        if line.isEmpty {
                            if !event.data.isEmpty { sink.yield(event) }
                            event = ServerEvent(name: "message", id: nil, data: "")
                        } else if line.hasPrefix(":") {
                            continue
                        } else if line.hasPrefix("event: ") {
                            event.name = String(line.dropFirst(7))
                        } else if line.hasPrefix("id: ") {
                            event.id = String(line.dropFirst(4))
                        } else if line.hasPrefix("data: ") {
                            event.data += String(line.dropFirst(6))
                        }
                    }
                }
                sink.finish()
            } catch {
                sink.finish(throwing: error)
            }
        }
        return EventStreamReader(events: events, task: task)
    }
}
