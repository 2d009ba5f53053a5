import ItemModel
import LocalState

extension SyncEngine {
    /// Reports a file's conflict versions going from none to some (`conflictAppeared`) or back
    /// (`conflictResolved`), wherever a row takes the server's list: the change feed on every
    /// device, the answers to this device's own requests here. A list that only grew or shrank
    /// reports nothing: the file was in conflict before and still is.
    func noteConflicts(of row: LocalItem, hadConflicts: Bool, _ r: LocalReader, _ effects: inout EffectsAfterCommit) throws {
        guard hadConflicts == row.conflicts.isEmpty else { return }
        effects.events.append(MountEvent(
            hadConflicts ? .conflictResolved : .conflictAppeared, path: try r.path(of: row.ino),
            detail: hadConflicts ? nil : "\(row.conflicts.count) conflict version\(row.conflicts.count == 1 ? "" : "s")"))
    }
}
