import Foundation
import ItemModel
import SyncAPI
import TestSupport
import Testing

/// A fresh device's first sync: `ubiq mount` returns once the mount lists the container's
/// whole tree, so that what a script does right after it sees every item.
extension ConvergenceTests {
    @Test func aFreshDevicesFirstListingRightAfterMountIsWhole() async throws {
        try await withDevices([]) { server, _ in
            let http = try await TestHTTP(baseURL: server.baseURL).login("alice", "alice-pw")
            // 3,000 files in 30 folders: three pages of the change log and more.
            for f in 0..<30 {
                let folder = try await http.createFolder(.default, name: "f\(f)")
                for half in 0..<2 {
                    let creates = (0..<50).map { i -> CreateItemRequest in
                        let content = Data("f\(f) \(half * 50 + i)\n".utf8)
                        return CreateItemRequest(parentID: folder.id, name: "file-\(half * 50 + i).txt", kind: .file, digest: sha256(content), id: .random(), content: content)
                    }
                    let r = try await http.json(.POST, APIPath.batch(.default), BatchRequest(creates: creates))
                    let made = try r.decode(BatchResponse.self).results.filter { $0.item != nil }.count
                    #expect(r.status == 200 && made == 50)
                }
            }
            try await withMountedDevice("B", server: server) { b in
                // Right after `ubiq mount` returned, no waiting.
                let found = try await b.must(#"find "$M" -mindepth 1 | wc -l"#)
                #expect(found.trimmingCharacters(in: .whitespacesAndNewlines) == "3030")
                let files = try await b.must(#"ls -lR "$M" | grep -c '^-'"#)
                #expect(files.trimmingCharacters(in: .whitespacesAndNewlines) == "3000")
                let status = try await b.status()
                #expect(status.hasWholeTree)
            }
        }
    }
}
