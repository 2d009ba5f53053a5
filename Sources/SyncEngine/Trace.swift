import ItemModel
import LocalState
import Logging

extension SyncEngine {
    /// A sync decision about one item, at debug level, with the item's path: what a replay of
    /// a race needs to tell which way each change went. The path costs a read of the index,
    /// paid only when debug logging is on (`ubiq mount --log-level debug`); inside a
    /// transaction, through its reader `r`.
    func trace(_ message: @autoclosure () -> String, ino: Int64, _ r: LocalReader? = nil) {
        guard logger.logLevel <= .debug else { return }
        let path = (try? r.map { try $0.path(of: ino) } ?? store.read { try $0.path(of: ino) }) ?? nil
        logger.debug("\(message())", metadata: ["item.ino": "\(ino)", "path": "\(path ?? "?")"])
    }

    /// A digest short enough for a log line.
    static func short(_ digest: ContentDigest?) -> String { digest.map { String($0.hex.prefix(8)) } ?? "-" }
}
