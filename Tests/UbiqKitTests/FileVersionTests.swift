import Foundation
import ItemModel
import TestSupport
import Testing
import UbiqKit

/// `FileVersion` over a conflict made on two real mounts of one account.
@Suite(.serialized) struct FileVersionTests {
    @Test func aConflictMadeOnTwoDevicesIsListedOnBothAndResolvedThroughAVersion() async throws {
        try await withDevices(["A", "B"]) { server, devices in
            let (a, b) = (devices[0], devices[1])
            // Both edit notes.txt from the same base while the server is away.
            let (current, loser) = try await editOnBothWhileOffline(server, a, b)

            let notesA = a.root.appendingPathComponent("notes.txt"), notesB = b.root.appendingPathComponent("notes.txt")
            for notes in [notesA, notesB] {
                try await eventually("\(notes.path) to show the conflict") { FileVersion.unresolvedConflictVersionsOfItem(at: notes)?.count == 1 }
                #expect(try UbiquitousItem.resourceValues(at: notes).ubiquitousItemHasUnresolvedConflicts)
            }

            // Each device lists the version as the same one, readable where it says.
            let onA = try #require(FileVersion.unresolvedConflictVersionsOfItem(at: notesA)?.first)
            let onB = try #require(FileVersion.unresolvedConflictVersionsOfItem(at: notesB)?.first)
            #expect(onA.persistentIdentifier == onB.persistentIdentifier && onA.isConflict && !onA.isResolved)
            #expect(onA.localizedNameOfSavingComputer == (loser == "edited on A\n" ? "A" : "B"))
            #expect(onA.size == Int64(loser.utf8.count) && onA.digest == sha256(Data(loser.utf8)).hex && onA.modificationDate != nil)
            #expect(try String(contentsOf: try #require(onA.url), encoding: .utf8) == loser)
            let currentVersion = try #require(FileVersion.currentVersionOfItem(at: notesA))
            #expect(currentVersion.size == Int64(current.utf8.count) && !currentVersion.isConflict && currentVersion.url == notesA)
            #expect(FileVersion.unresolvedConflictVersionsOfItem(at: a.root) == nil, "a folder has no versions")
            #expect(throws: UbiqKitError.self) { try onB.replaceItem(at: notesA) }

            // Resolved on B by making the conflict version current: on both devices.
            try onB.replaceItem(at: notesB)
            for (device, notes) in [(a, notesA), (b, notesB)] {
                try await eventually("\(device.name) to show the resolution") {
                    let values = try UbiquitousItem.resourceValues(at: notes)
                    let text = try await device.sh(#"cat "$M/notes.txt""#).stdout
                    return FileVersion.unresolvedConflictVersionsOfItem(at: notes) == [] && !values.ubiquitousItemHasUnresolvedConflicts
                        && values.ubiquitousItemIsUploaded && text == loser
                }
            }
            #expect(onA.isResolved)
            try FileVersion.removeOtherVersionsOfItem(at: notesA)

            // The server's earlier contents: the base among them, brought back through its version.
            let others = try FileVersion.otherVersionsOfItem(at: notesA, registry: a.registry)
            #expect(others.allSatisfy { $0.kind == .earlier && $0.url == nil })
            let base = try #require(others.first { $0.digest == sha256(Data("base\n".utf8)).hex }, "\(others)")
            #expect(base.localizedNameOfSavingComputer == "A")
            try base.replaceItem(at: notesA)
            try await eventually("B to read the base again") { try await b.sh(#"cat "$M/notes.txt""#).stdout == "base\n" }

            // Apple's way: each conflict version marked resolved, then the others removed. The
            // current content stays, on both devices.
            let (again, _) = try await editOnBothWhileOffline(server, a, b)
            let versions = try #require(FileVersion.unresolvedConflictVersionsOfItem(at: notesB))
            #expect(versions.count == 1 && versions.allSatisfy { !$0.isResolved })
            for version in versions { version.isResolved = true }
            #expect(versions.allSatisfy { $0.isResolved }, "resolved here at once")
            try FileVersion.removeOtherVersionsOfItem(at: notesB)
            for (device, notes) in [(a, notesA), (b, notesB)] {
                try await eventually("\(device.name) to show the versions resolved") {
                    let text = try await device.sh(#"cat "$M/notes.txt""#).stdout
                    return FileVersion.unresolvedConflictVersionsOfItem(at: notes) == [] && text == again
                }
            }
        }
    }
}
