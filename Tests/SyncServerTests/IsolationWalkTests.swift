import Foundation
import ItemModel
import NIOHTTP1
import ServerStorage
import SyncAPI
@testable import SyncServer
import TestSupport
import Testing

/// Isolation as a property: bob walks every `/v1` route the server registers, with alice's
/// container name, item IDs, revision, digest, share token and change cursor in every place
/// they fit, and gets 404 every time, never her data. The walk is driven by the router's own
/// list, so a route added later is walked too (or the test names the capture it cannot fill).
@Suite struct IsolationWalkTests {
    struct Alices {
        let container = "iCloud.com.example.alices"
        let secretName = "alice-secret-name.txt"
        let secretBytes = "alice's secret bytes 7f3a"
        let secretValue = "alice-kv-secret-value"
        var file: ItemMetadata
        var folder: ItemMetadata
        var token: String
        var cursor: String

        /// What must never reach bob: her names, bytes and values (IDs bob sends may come back
        /// in an error's message: he knew them already).
        var secrets: [String] { [secretName, secretBytes, secretValue, "alice-folder-name", Data(secretBytes.utf8).base64EncodedString()] }
    }

    @Test func bobReachesNothingOfAlicesThroughAnyRoute() async throws {
        try await withLive(extraArguments: ["--share-rate", "0"]) { live in
            let alices = try await Self.aliceMakesThings(live)
            // His own default container, with a file: lookups in it reach the item, not the container.
            #expect(try await live.bob.send(.PUT, APIPath.container(live.c)).status == 201)
            _ = try await live.bob.createFile(live.c, name: "bob.txt", content: Data("bob's".utf8))
            let templates = try RegisteredRoutes.all().filter { $0.template.hasPrefix("/v1/") }
            #expect(templates.count >= 30, "the router lists its routes: \(templates.count)")
            var walked = 0
            for (method, template) in templates {
                let captures = Set(template.split(separator: "/").filter { $0.hasPrefix("{") }.map { String($0.dropFirst().dropLast()) })
                guard !captures.isEmpty else { continue }
                #expect(captures.isSubset(of: ["container", "item", "digest", "token", "key"]), "\(method) \(template): a capture the walk cannot fill")
                // Her container's name in his requests: his account has none by that name.
                if captures.contains("container") && !(method == "PUT" && template == "/v1/containers/{container}") {
                    let r = try await send(live, alices, method, template, container: alices.container)
                    #expect(r.status == 404 && r.errorCode == .containerNotFound, "\(method) \(template) in her container: \(r.status) \(r.text)")
                    try expectNoSecret(r, alices, "\(method) \(template)")
                    walked += 1
                }
                // His own container, her IDs: every route that names an item, a share or a
                // content. (A key is a name in his own store, not hers: see below.)
                if !captures.isDisjoint(with: ["item", "digest", "token"]) && !(method == "PUT" && template == "/v1/blobs/{digest}") {
                    let r = try await send(live, alices, method, template, container: "default")
                    #expect(r.status == 404 && r.errorCode != .containerNotFound && r.errorCode != .routeNotFound,
                            "\(method) \(template) with her IDs: \(r.status) \(r.text)")
                    try expectNoSecret(r, alices, "\(method) \(template)")
                    walked += 1
                }
            }
            #expect(walked >= 25, "\(walked) requests walked")

            // Routes of his own container that take her IDs in the body.
            let bob = live.bob
            let create = try await bob.json(.POST, APIPath.items(live.c), CreateItemRequest(parentID: alices.folder.id, name: "x", kind: .folder))
            #expect(create.status == 404 && create.errorCode == .itemNotFound, "\(create.text)")
            let batch = try await bob.json(.POST, APIPath.batch(live.c), BatchRequest(creates: [CreateItemRequest(parentID: alices.folder.id, name: "x", kind: .folder)]))
            #expect(try batch.decode(BatchResponse.self).results.first?.error?.code == .itemNotFound, "\(batch.text)")
            // A batch into her container's name, even one with nothing valid to create: 404.
            let emptyBatch = try await bob.json(.POST, "/v1/containers/\(alices.container)/batch", BatchRequest(creates: []))
            #expect(emptyBatch.status == 404 && emptyBatch.errorCode == .containerNotFound, "\(emptyBatch.text)")
            let share = try await bob.json(.POST, APIPath.shares(live.c), CreateShareRequest(itemID: alices.file.id))
            #expect(share.status == 404 && share.errorCode == .itemNotFound, "\(share.text)")
            let named = try await bob.json(.POST, APIPath.items(live.c), CreateItemRequest(parentID: .root, name: "n", kind: .file, digest: alices.file.digest))
            #expect(named.status == 404 && named.errorCode == .blobNotFound, "naming her content without sending it: \(named.text)")
            // Her cursor in his log, his listings, his key-value store, his container of her
            // container's name: his own things only.
            for path in [APIPath.changes(live.c) + "?since=\(alices.cursor)", APIPath.changes(live.c), APIPath.containers,
                         APIPath.keyValues(live.c), APIPath.shares(live.c), APIPath.children(live.c, .root)] {
                let r = try await bob.send(.GET, path)
                // PostgreSQL counts cursors per container: hers may lie ahead of his log, which
                // then refuses it as any cursor it never handed out.
                let refusedAsAhead = ServerProcess.replicated && path.contains("?since=") && r.status == 400 && r.errorCode == .invalidCursor
                #expect(r.status == 200 || refusedAsAhead, "\(path): \(r.status) \(r.text)")
                try expectNoSecret(r, alices, path)
                #expect(!r.text.contains(alices.file.id.rawValue) && !r.text.contains(alices.token), "\(path): \(r.text)")
            }
            let his = try await bob.send(.PUT, "/v1/containers/\(alices.container)")
            #expect(his.status == 201, "a container of his own by that name")
            let listed = try await bob.send(.GET, APIPath.children(try ContainerID(alices.container), .root))
            #expect(try listed.decode(ItemList.self).items.isEmpty)
            // The same bytes uploaded by him are his own upload (the server keeps one copy), and
            // other bytes under her digest are refused.
            let wrong = try await bob.send(.PUT, APIPath.blob(try #require(alices.file.digest)), body: Data("not hers".utf8))
            #expect(wrong.status == 422 && wrong.errorCode == .digestMismatch, "\(wrong.text)")
            // Her things are untouched.
            let hers = try await live.alice.send(.GET, APIPath.content(try ContainerID(alices.container), alices.file.id))
            #expect(hers.text == alices.secretBytes)
            #expect(try await live.anonymous.send(.GET, APIPath.publicShare(alices.token)).text == alices.secretBytes)
        }
    }

    static func aliceMakesThings(_ live: Live) async throws -> Alices {
        let alice = live.alice
        let c = "iCloud.com.example.alices"
        #expect(try await alice.send(.PUT, "/v1/containers/\(c)").status == 201)
        let container = try ContainerID(c)
        let folder = try await alice.createFolder(container, name: "alice-folder-name")
        let file = try await alice.createFile(container, parent: folder.id, name: "alice-secret-name.txt", content: Data("alice's secret bytes 7f3a".utf8))
        // Copies of her files in her default container too: his default container holds other IDs.
        _ = try await alice.createFile(live.c, name: "alice-secret-name.txt", content: Data("alice's secret bytes 7f3a".utf8))
        let shared = try await alice.json(.POST, APIPath.shares(container), CreateShareRequest(itemID: file.id))
        let token = try shared.decode(ShareInfo.self).token
        #expect(try await alice.send(.PUT, APIPath.keyValue(container, "alice-key"), body: Data(#""alice-kv-secret-value""#.utf8)).status == 200)
        #expect(try await alice.send(.PUT, APIPath.keyValue(live.c, "alice-key"), body: Data(#""alice-kv-secret-value""#.utf8)).status == 200)
        let page = try await alice.send(.GET, APIPath.changes(container)).decode(ChangePage.self)
        return Alices(file: file, folder: folder, token: token, cursor: page.cursor.rawValue)
    }

    /// One request as bob: `template` filled with `container` and her IDs, with a body that
    /// passes the route's checks of form so that the lookup is what answers.
    func send(_ live: Live, _ a: Alices, _ method: String, _ template: String, container: String) async throws -> TestResponse {
        let digest = try #require(a.file.digest)
        var path = template
            .replacingOccurrences(of: "{container}", with: container)
            .replacingOccurrences(of: "{item}", with: a.file.id.rawValue)
            .replacingOccurrences(of: "{digest}", with: digest.hex)
            .replacingOccurrences(of: "{token}", with: a.token)
            .replacingOccurrences(of: "{key}", with: "alice-key")
        let rev = a.file.revision
        let body: Data?
        switch (method, template.split(separator: "/").last.map(String.init) ?? "") {
        case ("PATCH", _): body = try JSONEncoder().encode(UpdateItemRequest(baseRevision: rev, name: "renamed"))
        case ("DELETE", "{item}"): body = nil; path += "?baseRevision=\(rev.rawValue)"
        case ("PUT", "content"): body = try JSONEncoder().encode(UpdateContentRequest(baseRevision: rev, digest: digest))
        case ("PUT", "xattrs"): body = try JSONEncoder().encode(SetXattrsRequest(baseRevision: rev, xattrs: ["user.x": Data("y".utf8)]))
        case ("POST", "conflicts"):
            body = try JSONEncoder().encode(AddConflictVersionRequest(version: ConflictVersion(id: .random(), digest: digest, size: a.file.size, device: "bob", modified: 1, base: rev)))
        case ("POST", "resolve"): body = try JSONEncoder().encode(ResolveConflictsRequest(baseRevision: rev, settled: []))
        case ("POST", "restore"): body = try JSONEncoder().encode(RestoreRequest(baseRevision: rev, revision: rev))
        case ("POST", "items"): body = try JSONEncoder().encode(CreateItemRequest(parentID: a.folder.id, name: "x", kind: .folder))
        case ("POST", "batch"): body = try JSONEncoder().encode(BatchRequest(creates: [CreateItemRequest(parentID: a.folder.id, name: "x", kind: .folder)]))
        case ("POST", "shares"): body = try JSONEncoder().encode(CreateShareRequest(itemID: a.file.id))
        case ("PUT", "{key}"): body = Data(#""bob's""#.utf8)
        case ("PUT", _): body = Data(a.secretBytes.utf8)
        default: body = nil
        }
        let headers = body == nil ? [] : [("Content-Type", "application/json")]
        // The push stream answers at once with an error, or streams: a short deadline is enough.
        return try await live.bob.send(HTTPMethod(rawValue: method), path, headers: headers, body: body, timeout: .seconds(10))
    }

    func expectNoSecret(_ r: TestResponse, _ a: Alices, _ what: String) throws {
        for secret in a.secrets { #expect(!r.text.contains(secret), "\(what) answered something of hers: \(r.text.prefix(300))") }
    }
}
