import Foundation
import SyncAPI
import Testing

extension TestDevice {
    /// Waits until the mount has sent every local change (`ubiq status --json`).
    public func waitUntilUploaded(timeout: Duration = .seconds(60)) async throws {
        try await eventually(timeout: timeout, "\(name) to finish uploading") {
            (try? await self.status())?.pendingUploads == 0
        }
    }

    public func status() async throws -> MountStatusReport {
        let r = try await ubiq(["status", "--json", "--mount", mountpoint])
        guard r.status == 0 else { throw TestSupportError("status failed: \(r.stderr)") }
        return try JSONDecoder().decode(MountStatusReport.self, from: Data(r.stdout.utf8))
    }
}

/// A and B each write notes.txt from the same base while the server is away; once it is
/// back, both show the conflict and read the current version. Returns the current content
/// and the one kept as a conflict version.
public func editOnBothWhileOffline(_ server: ServerProcess, _ a: TestDevice, _ b: TestDevice) async throws -> (current: String, loser: String) {
    try await a.must(#"echo base > "$M/notes.txt""#)
    try await a.waitUntilUploaded()
    try await eventually("B to read the base") { (try await b.sh(#"cat "$M/notes.txt""#)).stdout == "base\n" }
    server.kill9()
    try await eventually("A and B to notice they are offline") {
        let (onA, onB) = (try await a.status().connected, try await b.status().connected)
        return !onA && !onB
    }
    try await a.must(#"echo "edited on A" > "$M/notes.txt""#)
    try await b.must(#"echo "edited on B" > "$M/notes.txt""#)
    try await server.restart(samePort: true)

    // Nobody is stuck: every change is sent, and both show the conflict.
    try await a.waitUntilUploaded(timeout: .seconds(30))
    try await b.waitUntilUploaded(timeout: .seconds(30))
    for device in [a, b] {
        try await eventually(timeout: .seconds(20), "\(device.name) to show the conflict") {
            try await device.xattr("notes.txt", "user.ubiq.hasUnresolvedConflicts") == "1"
        }
        #expect(try await device.xattr("notes.txt", "user.ubiq.isUploaded") == "1")
        #expect(try await device.xattr("notes.txt", "user.ubiq.uploadingError") == nil)
    }
    // Both devices read the current version, and nothing written was lost: the other edit
    // is the conflict version.
    let current = try await a.must(#"cat "$M/notes.txt""#)
    try await eventually("B to read the current version") { try await b.sh(#"cat "$M/notes.txt""#).stdout == current }
    let loser = try #require(["edited on A\n", "edited on B\n"].first { $0 != current }, "current is one of the edits: \(current)")
    return (current, loser)
}
