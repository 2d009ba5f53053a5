import Foundation

/// `NAME (conflicted copy from DEVICE YYYY-MM-DD HHMMSS).EXT`: the name of a kept copy says which
/// device it came from and when (docs/SEMANTICS.md, "Decisions"). Made on the mount (a name
/// taken on the server) and on the server (`ubiq resolve --keep-both`).
public enum ConflictNaming {
    /// `attempt` 2 and up number the copy (`… 010203 2)`), for when the first name is taken.
    public static func conflictedCopyName(_ name: String, device: String, at time: Timestamp, attempt: Int = 1) -> String {
        var t = time_t(time / 1_000_000_000)
        var tm = tm()
        gmtime_r(&t, &tm)
        let stamp = String(format: "%04d-%02d-%02d %02d%02d%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec)
        let (base, ext) = split(name)
        let suffix = " (conflicted copy from \(device) \(stamp)\(attempt > 1 ? " \(attempt)" : ""))\(ext)"
        // Never produce a name the server refuses: trim the base if the whole is too long.
        var trimmed = base
        while (trimmed + suffix).utf8.count > ItemName.maxByteCount && !trimmed.isEmpty { trimmed.removeLast() }
        return trimmed + suffix
    }

    /// The name an item takes for a moment while it is in the way of another and its own
    /// change is on its way: hidden (a leading dot) and unique by the item's ID. Used on the
    /// mount (a remote item arrives) and on the server (a cycle of local renames is sent).
    public static func movingName(_ id: ItemID) -> String { ".ubiq-moving-\(id.rawValue)" }

    static func split(_ name: String) -> (String, String) {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return (name, "") }
        return (String(name[..<dot]), String(name[dot...]))
    }
}
