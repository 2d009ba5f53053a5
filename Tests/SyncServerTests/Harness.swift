import Foundation
import ItemModel
import SyncAPI
import TestSupport

/// A live server with two accounts, alice and bob, each logged in.
struct Live {
    let server: ServerProcess
    let anonymous: TestHTTP
    let alice: TestHTTP
    let bob: TestHTTP
    let c = ContainerID.default
}

func withLive<T>(extraArguments: [String] = [], _ body: (Live) async throws -> T) async throws -> T {
    try await withServer(extraArguments: extraArguments) { server in
        try await server.addAccount("alice", password: "alice-pw")
        try await server.addAccount("bob", password: "bob-pw")
        let anonymous = TestHTTP(baseURL: server.baseURL)
        let live = Live(
            server: server, anonymous: anonymous,
            alice: try await anonymous.login("alice", "alice-pw"), bob: try await anonymous.login("bob", "bob-pw"))
        return try await body(live)
    }
}

extension Data {
    init(_ string: String) { self = Data(string.utf8) }
}
