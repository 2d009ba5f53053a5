import Foundation
import ItemModel
import SyncAPI
import TestSupport
import Testing

/// Failures `RandomConvergenceTests` found, each reduced to its few steps.
extension CrashAndDiskTests {
    /// Seed 20261129: B edits `f` offline while the server's content of `f` moves on (an API
    /// client) and A renames `f` to `g`. Once B is back, its edit becomes a conflict version,
    /// and B must show the file as `g`, as A and the server do.
    @Test
    func aRenameReachesTheDeviceWhoseEditBecameAConflictVersion() async throws {
        try await withRelayedDevices { server, devices, relays in
            let (a, b) = (devices[0], devices[1])
            let http = try await TestHTTP(baseURL: server.baseURL).login("alice", "alice-pw")
            let file = try await http.createFile(.default, name: "f", content: Data("base\n".utf8))
            for device in devices {
                try await device.expectEventually("\(device.name) to read f", devices: devices) {
                    try await device.sh(#"cat "$M/f""#).stdout == "base\n"
                }
            }
            relays[1].cut()
            try await b.must(#"printf 'B\n' | tee -a "$M/f" >/dev/null"#)
            let content = Data("base\nH\n".utf8)
            let r = try await http.json(.PUT, APIPath.content(.default, file.id), UpdateContentRequest(baseRevision: file.revision, digest: sha256(content), content: content))
            #expect(r.status == 200)
            try await a.expectEventually("A to read the API's edit", devices: devices) {
                try await a.sh(#"cat "$M/f""#).stdout == "base\nH\n"
            }
            try await a.must(#"mv "$M/f" "$M/g""#)
            try await a.waitUntilUploaded()
            relays[1].rejoin()
            try await b.waitUntilUploaded()
            try await b.expectEventually("B to show g only, with its edit as a conflict version", devices: devices) {
                try await b.sh(#"cd "$M" && ls && getfattr --only-values -n user.ubiq.hasUnresolvedConflicts g"#).stdout == "g\n1"
            }
        }
    }
}
