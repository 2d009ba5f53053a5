import Foundation
import ItemModel
import SyncAPI
import TestSupport
import Testing

@Suite struct AuthAndContainerTests {
    @Test func healthNeedsNoTokenButV1Does() async throws {
        try await withLive { live in
            let health = try await live.anonymous.send(.GET, "/health")
            #expect(health.status == 200)
            #expect(try health.decode(HealthResponse.self).protocolVersion == SyncProtocol.version)
            for path in ["/v1/containers", "/v1/containers/default/items/root", "/v1/no-such-route", "/v1/blobs/\(ContentDigest.empty.hex)"] {
                let r = try await live.anonymous.send(.GET, path)
                #expect(r.status == 401 && r.errorCode == .unauthorized, "\(path): \(r.status)")
            }
            let forged = TestHTTP(baseURL: live.server.baseURL, token: "forged")
            #expect(try await forged.send(.GET, "/v1/containers").errorCode == .unauthorized)
        }
    }

    @Test func loginRefusesWrongPasswordAndUnknownUserAlike() async throws {
        try await withLive { live in
            let wrong = try await live.anonymous.json(.POST, APIPath.token, TokenRequest(user: "alice", password: "nope"))
            let unknown = try await live.anonymous.json(.POST, APIPath.token, TokenRequest(user: "mallory", password: "nope"))
            #expect(wrong.status == 401 && wrong.errorCode == .invalidCredentials)
            #expect(unknown.status == 401 && unknown.errorCode == .invalidCredentials)
            #expect(wrong.error?.message == unknown.error?.message)
        }
    }

    @Test func containersAreCreatedExplicitlyOrOnFirstWriteAndListed() async throws {
        try await withLive { live in
            #expect(try await live.alice.send(.GET, APIPath.containers).decode(ContainerList.self).containers.isEmpty)
            #expect(try await live.alice.send(.GET, APIPath.container(live.c)).errorCode == .containerNotFound)
            #expect(try await live.alice.send(.PUT, APIPath.container(live.c)).status == 201)
            #expect(try await live.alice.send(.PUT, APIPath.container(live.c)).status == 200)
            let app = try ContainerID("iCloud.com.example.app")
            _ = try await live.alice.createFolder(app, name: "Documents")
            let list = try await live.alice.send(.GET, APIPath.containers).decode(ContainerList.self)
            #expect(list.containers.map(\.id.rawValue) == ["default", "iCloud.com.example.app"])
            // A refused first write does not leave a container behind.
            let refused = try await live.alice.json(.POST, APIPath.items(try ContainerID("never")), CreateItemRequest(parentID: .root, name: "a/b", kind: .folder))
            #expect(refused.status == 400)
            #expect(try await live.alice.send(.GET, APIPath.container(try ContainerID("never"))).errorCode == .containerNotFound)
            let bad = try await live.alice.send(.PUT, "/v1/containers/bad%20name")
            #expect(bad.status == 400 && bad.errorCode == .invalidContainerID)
        }
    }

    @Test func concurrentCreatesOfOneContainerAnswer201Once() async throws {
        try await withLive { live in
            let alice = live.alice
            for round in 0..<4 {
                let c = try ContainerID("race-\(round)")
                let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                    for _ in 0..<6 { group.addTask { try await alice.send(.PUT, APIPath.container(c)).status } }
                    return try await group.reduce(into: [Int]()) { $0.append($1) }
                }
                #expect(statuses.filter { $0 == 201 }.count == 1, "round \(round): \(statuses)")
                #expect(statuses.filter { $0 == 200 }.count == 5, "round \(round): \(statuses)")
            }
        }
    }

    @Test func anAccountNeverSeesAnotherAccountsContainersOrItems() async throws {
        try await withLive { live in
            let file = try await live.alice.createFile(live.c, name: "secret.txt", content: Data("alice only"))
            let folder = try await live.alice.createFolder(live.c, name: "Private")
            #expect(try await live.bob.send(.GET, APIPath.containers).decode(ContainerList.self).containers.isEmpty)
            // 404, not 403: bob cannot even tell that alice's container or items exist.
            let probes: [(String, APIErrorCode)] = [
                (APIPath.container(live.c), .containerNotFound),
                (APIPath.item(live.c, file.id), .containerNotFound),
                (APIPath.content(live.c, file.id), .containerNotFound),
                (APIPath.children(live.c, folder.id), .containerNotFound),
                (APIPath.changes(live.c), .containerNotFound),
                (APIPath.blob(file.digest!), .blobNotFound),
            ]
            for (path, code) in probes {
                let r = try await live.bob.send(.GET, path)
                #expect(r.status == 404 && r.errorCode == code, "\(path)")
            }
            #expect(try await live.bob.send(.HEAD, APIPath.blob(file.digest!)).status == 404)
            // Bob's own container of the same name is a different one.
            _ = try await live.bob.send(.PUT, APIPath.container(live.c))
            #expect(try await live.bob.send(.GET, APIPath.item(live.c, file.id)).errorCode == .itemNotFound)
            let patch = try await live.bob.json(.PATCH, APIPath.item(live.c, file.id), UpdateItemRequest(baseRevision: file.revision, name: "stolen"))
            #expect(patch.status == 404)
            #expect(try await live.bob.send(.GET, APIPath.children(live.c, .root)).decode(ItemList.self).items.isEmpty)
            // And alice's file is untouched.
            #expect(try await live.alice.send(.GET, APIPath.item(live.c, file.id)).decode(ItemMetadata.self) == file)
        }
    }

    @Test(.oneServerOnly) func accountCommandsListAndRemove() async throws {
        try await withServer { server in
            try await server.addAccount("carol", password: "pw")
            let list = try await run(Binaries.path("ubiq-server"), ["account", "list", "--data", server.dataDirectory])
            #expect(list.status == 0 && list.stdout.split(separator: "\n") == ["carol"])
            let dup = try await run(Binaries.path("ubiq-server"), ["account", "add", "carol", "--password-stdin", "--data", server.dataDirectory], stdin: "x\n")
            #expect(dup.status == 1 && dup.stderr.contains("already exists"))
            let http = try await TestHTTP(baseURL: server.baseURL).login("carol", "pw")
            let removed = try await run(Binaries.path("ubiq-server"), ["account", "remove", "carol", "--data", server.dataDirectory])
            #expect(removed.status == 0)
            #expect(try await http.send(.GET, APIPath.containers).status == 401)
            // The data folder may come before the subcommand too, as `git -C` does.
            let before = try await run(Binaries.path("ubiq-server"), ["--data", server.dataDirectory, "account", "add", "dave", "--password-stdin"], stdin: "pw\n")
            #expect(before.status == 0, "\(before.stderr)")
            let listed = try await run(Binaries.path("ubiq-server"), ["--data=\(server.dataDirectory)", "account", "list"])
            #expect(listed.status == 0 && listed.stdout.split(separator: "\n") == ["dave"], "\(listed.stdout) \(listed.stderr)")
            let usage = try await run(Binaries.path("ubiq-server"), ["--no-such-flag"])
            #expect(usage.status == 2)
        }
    }
}
