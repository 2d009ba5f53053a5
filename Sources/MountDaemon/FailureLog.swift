import FuseKit
import Glibc
import Logging
import VFS

/// One log line per kernel request the mount fails, with the request, the node and the error.
/// Left out are the answers that are no failure of the mount: ENOENT (a name looked up that
/// is not there), ENODATA (an attribute asked for that is not set), ERANGE (a caller probing
/// the size of a buffer) and EOPNOTSUPP (what the mount does not offer, such as ACLs, which
/// `ls -l` and `cp -a` ask of every file); these come by the thousand.
struct FailureLog: Sendable {
    static let notFailures: Set<Int32> = [ENOENT, ENODATA, ERANGE, EOPNOTSUPP]

    let logger: Logger

    /// The errno to answer with, logged unless it is one of `notFailures`.
    func errno(_ request: RequestKind, _ node: UInt64, _ error: FSError) -> Int32 {
        let code = error.errno
        if !Self.notFailures.contains(code) {
            logger.info("request failed", metadata: [
                "request": "\(request.rawValue)", "item.ino": "\(node)", "errno": "\(code)", "error": "\(error)",
            ])
        }
        return code
    }

    /// `errno` for a request answered later, from another thread.
    func `for`(_ request: RequestKind, _ node: UInt64) -> @Sendable (FSError) -> Int32 {
        { error in errno(request, node, error) }
    }
}
