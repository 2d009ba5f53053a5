import Foundation
import ItemModel
import SyncAPI
import TestSupport
import Testing

@Suite struct ItemRouteTests {
    @Test func createListGetRenameMoveChmodXattrsDelete() async throws {
        try await withLive { live in
            let (a, c) = (live.alice, live.c)
            let docs = try await a.createFolder(c, name: "Documents")
            let file = try await a.createFile(c, parent: docs.id, name: "notes.txt", content: Data("hello"))
            #expect(file.size == 5 && file.parentID == docs.id && file.kind == .file)
            #expect(try await a.send(.GET, APIPath.item(c, file.id)).decode(ItemMetadata.self) == file)
            let kids = try await a.send(.GET, APIPath.children(c, docs.id)).decode(ItemList.self)
            #expect(kids.items == [file])
            #expect(try await a.send(.GET, APIPath.children(c, file.id)).errorCode == .notAFolder)

            let archive = try await a.createFolder(c, name: "Archive")
            let moved = try await a.json(.PATCH, APIPath.item(c, file.id), UpdateItemRequest(baseRevision: file.revision, name: "old notes.txt", parentID: archive.id))
            #expect(moved.status == 200)
            let m = try moved.decode(ItemMetadata.self)
            #expect(m.name == "old notes.txt" && m.parentID == archive.id && m.revision != file.revision)

            let chmod = try await a.json(.PATCH, APIPath.item(c, file.id), UpdateItemRequest(baseRevision: m.revision, mode: 0o100600, modified: 42))
            let ch = try chmod.decode(ItemMetadata.self)
            #expect(ch.mode == 0o600 && ch.modified == 42, "file type bits are dropped, permission bits kept")

            let tagged = try await a.json(.PUT, APIPath.xattrs(c, file.id), SetXattrsRequest(baseRevision: ch.revision, xattrs: ["user.xdg.tags": Data("work")]))
            let t = try tagged.decode(ItemMetadata.self)
            #expect(t.xattrs == ["user.xdg.tags": Data("work")])
            let badX = try await a.json(.PUT, APIPath.xattrs(c, file.id), SetXattrsRequest(xattrs: ["user.ubiq.pinned": Data("1")]))
            #expect(badX.status == 400 && badX.errorCode == .invalidXattr)

            let noBase = try await a.send(.DELETE, APIPath.item(c, file.id))
            #expect(noBase.status == 400 && noBase.errorCode == .invalidRequest)
            let del = try await a.send(.DELETE, APIPath.item(c, file.id) + "?baseRevision=\(t.revision)")
            #expect(del.status == 200)
            #expect(try del.decode(DeleteResponse.self).deleted.map(\.id) == [file.id])
            #expect(try await a.send(.GET, APIPath.item(c, file.id)).errorCode == .itemNotFound)

            // Folders: not empty without recursive; the whole subtree with it.
            _ = try await a.createFile(c, parent: docs.id, name: "x", content: Data("x"))
            let refuse = try await a.send(.DELETE, APIPath.item(c, docs.id) + "?baseRevision=\(docs.revision)")
            #expect(refuse.status == 409 && refuse.errorCode == .folderNotEmpty)
            let rm = try await a.send(.DELETE, APIPath.item(c, docs.id) + "?baseRevision=\(docs.revision)&recursive=true")
            #expect(try rm.decode(DeleteResponse.self).deleted.count == 2)
            let root = try await a.send(.GET, APIPath.children(c, .root)).decode(ItemList.self)
            #expect(root.items.map(\.name) == ["Archive"])
        }
    }

    @Test func aConflictVersionIsKeptWithANewRevisionAndResolvedByChoice() async throws {
        try await withLive { live in
            let (a, c) = (live.alice, live.c)
            let file = try await a.createFile(c, parent: .root, name: "notes.txt", content: Data("current"))
            let edit = Data("the other edit")
            let version = ConflictVersion(id: .random(), digest: sha256(edit), size: Int64(edit.count), device: "laptop", modified: 7, base: file.revision)
            let added = try await a.json(.POST, APIPath.conflicts(c, file.id), AddConflictVersionRequest(version: version, content: edit))
            #expect(added.status == 200)
            let kept = try added.decode(ItemMetadata.self)
            #expect(kept.conflicts == [version] && kept.digest == file.digest && kept.revision.isNewer(than: file.revision))
            let changes = try await a.send(.GET, APIPath.changes(c)).decode(ChangePage.self).changes
            #expect(changes.last?.item == kept, "the version reaches other devices through the change log")
            let again = try await a.json(.POST, APIPath.conflicts(c, file.id), AddConflictVersionRequest(version: version))
            #expect(try again.decode(ItemMetadata.self) == kept, "a retried send adds nothing")

            let noDevice = ConflictVersion(id: .random(), digest: sha256(edit), size: Int64(edit.count), device: "", modified: 7, base: file.revision)
            #expect(try await a.json(.POST, APIPath.conflicts(c, file.id), AddConflictVersionRequest(version: noDevice)).errorCode == .invalidDevice)
            let unknown = try await a.json(.POST, APIPath.resolve(c, file.id), ResolveConflictsRequest(baseRevision: kept.revision, settled: [.random()]))
            #expect(unknown.status == 404 && unknown.errorCode == .versionNotFound)
            let stale = try await a.json(.POST, APIPath.resolve(c, file.id), ResolveConflictsRequest(baseRevision: file.revision, settled: [version.id]))
            #expect(stale.status == 409 && stale.errorCode == .revisionConflict)

            let resolved = try await a.json(.POST, APIPath.resolve(c, file.id), ResolveConflictsRequest(baseRevision: kept.revision, settled: [version.id], keep: version.id))
            let chosen = try resolved.decode(ItemMetadata.self)
            #expect(chosen.conflicts.isEmpty && chosen.digest == sha256(edit) && chosen.size == Int64(edit.count))
            #expect(try await a.send(.GET, APIPath.content(c, file.id)).body == edit, "the chosen version is the content now")
        }
    }

    @Test func earlierContentsAreListedAndRestored() async throws {
        try await withLive { live in
            let (a, c) = (live.alice, live.c)
            let file = try await a.createFile(c, parent: .root, name: "notes.txt", content: Data("one"))
            var current = file
            for text in ["two", "three"] {
                let digest = try await a.uploadBlob(Data(text))
                current = try await a.json(.PUT, APIPath.content(c, file.id), UpdateContentRequest(baseRevision: current.revision, digest: digest)).decode()
            }
            let listed = try await a.send(.GET, APIPath.versions(c, file.id)).decode(EarlierVersionList.self).versions
            #expect(listed.map(\.digest) == [sha256(Data("two")), sha256(Data("one"))], "most recently replaced first")
            #expect(listed.last?.revision == file.revision && listed.allSatisfy { $0.size == 3 })

            let unknown = try await a.json(.POST, APIPath.restore(c, file.id), RestoreRequest(baseRevision: current.revision, revision: Revision("424242")))
            #expect(unknown.status == 404 && unknown.errorCode == .versionNotFound, "\(unknown.text)")
            let stale = try await a.json(.POST, APIPath.restore(c, file.id), RestoreRequest(baseRevision: file.revision, revision: file.revision))
            #expect(stale.status == 409 && stale.errorCode == .revisionConflict)
            let restored: ItemMetadata = try await a.json(.POST, APIPath.restore(c, file.id), RestoreRequest(baseRevision: current.revision, revision: file.revision)).decode()
            #expect(restored.digest == file.digest && restored.revision.isNewer(than: current.revision))
            #expect(try await a.send(.GET, APIPath.content(c, file.id)).body == Data("one"), "the first content is current again")
            let changes = try await a.send(.GET, APIPath.changes(c)).decode(ChangePage.self).changes
            #expect(changes.last?.item == restored, "other devices hear of it through the change log")
            #expect(try await live.bob.send(.GET, APIPath.versions(c, file.id)).status == 404, "another account sees nothing")
        }
    }

    // 5 s: an upload's grant is itself collected past the retention if no create names it
    // by then, and on a loaded machine 1 s passed between a test's upload and its create.
    @Test func earlierContentsAreForgottenAfterTheRetention() async throws {
        try await withLive(extraArguments: ["--keep-versions", "5s"]) { live in
            let (a, c) = (live.alice, live.c)
            let file = try await a.createFile(c, parent: .root, name: "notes.txt", content: Data("one"))
            let digest = try await a.uploadBlob(Data("two"))
            let r = try await a.json(.PUT, APIPath.content(c, file.id), UpdateContentRequest(baseRevision: file.revision, digest: digest))
            #expect(r.status == 200)
            try await eventually(timeout: .seconds(20), "the earlier content to be forgotten") {
                try await a.send(.GET, APIPath.versions(c, file.id)).decode(EarlierVersionList.self).versions.isEmpty
            }
        }
    }

    @Test(.oneServerOnly) func contentsNothingNamesAreDeletedAfterTheRetentionAndNamedOnesStay() async throws {
        try await withLive(extraArguments: ["--keep-versions", "5s"]) { live in
            let (a, c) = (live.alice, live.c)
            let kept = try await a.createFile(c, parent: .root, name: "kept.txt", content: Data(String(repeating: "k", count: 100_000).utf8))
            let unnamed = try await a.uploadBlob(Data(String(repeating: "u", count: 100_000).utf8))
            let file = { (d: ContentDigest) in live.server.dataDirectory + "/blobs/\(d.hex.prefix(2))/\(d.hex)" }
            #expect(FileManager.default.fileExists(atPath: file(unnamed)))
            try await eventually(timeout: .seconds(20), "the unnamed content's file to be deleted") { !FileManager.default.fileExists(atPath: file(unnamed)) }
            #expect(try await a.send(.HEAD, APIPath.blob(unnamed)).status == 404, "and its grant taken back")
            #expect(FileManager.default.fileExists(atPath: file(kept.digest!)), "a live file's content stays")
            #expect(try await a.send(.GET, APIPath.content(c, kept.id)).body.count == 100_000)
            // Sent again, it is stored again.
            let again = try await a.uploadBlob(Data(String(repeating: "u", count: 100_000).utf8))
            let head = try await a.send(.HEAD, APIPath.blob(unnamed))
            #expect(again == unnamed && head.status == 200)
        }
    }

    @Test func badNamesAreRefusedWithAStableCodeAndChangeNothing() async throws {
        try await withLive { live in
            let (a, c) = (live.alice, live.c)
            _ = try await a.send(.PUT, APIPath.container(c))
            let before = try await a.send(.GET, APIPath.changes(c)).decode(ChangePage.self).cursor
            let bad = ["", ".", "..", "a/b", "nul\u{0}byte", String(repeating: "x", count: 256), String(repeating: "é", count: 128)]
            for name in bad {
                let r = try await a.json(.POST, APIPath.items(c), CreateItemRequest(parentID: .root, name: name, kind: .folder))
                #expect(r.status == 400 && r.errorCode == .invalidName, "\(name.debugDescription): \(r.status) \(r.text)")
            }
            // Not UTF-8: a lone surrogate escape cannot become a name.
            let raw = #"{"parentID":"root","name":"bad\udc80","kind":"folder"}"#
            let r = try await a.send(.POST, APIPath.items(c), headers: [("Content-Type", "application/json")], body: Data(raw))
            #expect(r.status == 400 && (r.errorCode == .invalidName || r.errorCode == .invalidRequest), "\(r.text)")
            // Raw bytes that are not UTF-8 at all.
            var bytes = Data(#"{"parentID":"root","name":"a"#.utf8)
            bytes.append(contentsOf: [0xFF, 0xFE])
            bytes.append(contentsOf: #"","kind":"folder"}"#.utf8)
            let r2 = try await a.send(.POST, APIPath.items(c), headers: [("Content-Type", "application/json")], body: bytes)
            #expect(r2.status == 400, "\(r2.text)")
            // Renames are checked the same way.
            let f = try await a.createFolder(c, name: "ok")
            let ren = try await a.json(.PATCH, APIPath.item(c, f.id), UpdateItemRequest(baseRevision: f.revision, name: "a/b"))
            #expect(ren.status == 400 && ren.errorCode == .invalidName)
            let after = try await a.send(.GET, APIPath.changes(c) + "?since=\(before)").decode(ChangePage.self)
            #expect(after.changes.map(\.item.name) == ["ok"], "only the valid create changed anything")
        }
    }

    @Test func otherBadInput() async throws {
        try await withLive { live in
            let (a, c) = (live.alice, live.c)
            let f = try await a.createFolder(c, name: "F")
            let sub = try await a.createFolder(c, parent: f.id, name: "G")
            let json = [("Content-Type", "application/json")]
            let cases: [(String, TestResponse, Int, APIErrorCode)] = [
                ("malformed JSON", try await a.send(.POST, APIPath.items(c), headers: json, body: Data("{nope")), 400, .invalidRequest),
                ("missing field", try await a.send(.POST, APIPath.items(c), headers: json, body: Data(#"{"name":"x"}"#)), 400, .invalidRequest),
                ("unknown item", try await a.send(.GET, APIPath.item(c, ItemID.random())), 404, .itemNotFound),
                ("malformed item id", try await a.send(.GET, "/v1/containers/default/items/NOT-AN-ID"), 400, .invalidItemID),
                ("unknown container", try await a.send(.GET, APIPath.children(try ContainerID("nope"), .root)), 404, .containerNotFound),
                ("malformed digest", try await a.send(.PUT, "/v1/blobs/xyz", body: Data("x")), 400, .invalidDigest),
                ("unknown route", try await a.send(.GET, "/v1/nothing/here"), 404, .routeNotFound),
                ("bad cursor", try await a.send(.GET, APIPath.changes(c) + "?since=banana"), 400, .invalidCursor),
                ("cursor from the future", try await a.send(.GET, APIPath.changes(c) + "?since=999999999"), 400, .invalidCursor),
                // Numbers a server never writes as a cursor; answered, they would be echoed back as one.
                ("cursor with a sign", try await a.send(.GET, APIPath.changes(c) + "?since=%2B1"), 400, .invalidCursor),
                ("cursor with a leading zero", try await a.send(.GET, APIPath.changes(c) + "?since=01"), 400, .invalidCursor),
                ("empty cursor", try await a.send(.GET, APIPath.changes(c) + "?since="), 400, .invalidCursor),
                ("stream from a cursor with a sign", try await a.send(.GET, APIPath.changeStream(c) + "?since=%2B1"), 400, .invalidCursor),
                ("limit not a number", try await a.send(.GET, APIPath.changes(c) + "?since=0&limit=many"), 400, .invalidRequest),
                ("limit zero", try await a.send(.GET, APIPath.changes(c) + "?since=0&limit=0"), 400, .invalidRequest),
                ("move into itself", try await a.json(.PATCH, APIPath.item(c, f.id), UpdateItemRequest(baseRevision: f.revision, parentID: f.id)), 400, .invalidMove),
                ("move below itself", try await a.json(.PATCH, APIPath.item(c, f.id), UpdateItemRequest(baseRevision: f.revision, parentID: sub.id)), 400, .invalidMove),
                ("rename root", try await a.json(.PATCH, APIPath.item(c, .root), UpdateItemRequest(baseRevision: Revision("1"), name: "r")), 400, .rootIsImmutable),
                ("name taken", try await a.json(.POST, APIPath.items(c), CreateItemRequest(parentID: .root, name: "F", kind: .folder)), 409, .nameExists),
                ("folder with content", try await a.json(.POST, APIPath.items(c), CreateItemRequest(parentID: .root, name: "H", kind: .folder, digest: .empty)), 400, .invalidRequest),
                ("content never uploaded", try await a.json(.POST, APIPath.items(c), CreateItemRequest(parentID: .root, name: "n", kind: .file, digest: sha256(Data("never")))), 404, .blobNotFound),
                ("oversized JSON", try await a.send(.POST, APIPath.items(c), headers: json, body: Data(count: 2 << 20)), 413, .payloadTooLarge),
            ]
            for (what, r, status, code) in cases {
                #expect(r.status == status && r.errorCode == code, "\(what): \(r.status) \(r.text)")
            }
            // None of it changed the tree.
            let root = try await a.send(.GET, APIPath.children(c, .root)).decode(ItemList.self)
            #expect(root.items.map(\.name) == ["F"])
        }
    }

    @Test func oversizedUploadIsRefusedAndNothingIsStored() async throws {
        try await withLive(extraArguments: ["--max-upload-bytes", "1000"]) { live in
            let big = Data(count: 5000)
            let r = try await live.alice.send(.PUT, APIPath.blob(sha256(big)), body: big)
            #expect(r.status == 413 && r.errorCode == .payloadTooLarge)
            #expect(try await live.alice.send(.HEAD, APIPath.blob(sha256(big))).status == 404)
            let small = Data(count: 1000)
            #expect(try await live.alice.send(.PUT, APIPath.blob(sha256(small)), body: small).status == 201)
        }
    }
}
