import Glibc
import ItemModel

/// Every way a file-system operation can fail, and the one errno table that maps them.
public enum FSError: Error, Sendable, Equatable {
    case notFound
    case exists
    case notEmpty
    case notADirectory
    case isADirectory
    case invalidName(ItemName.Invalid)
    case nameTooLong
    case invalidTarget(SymlinkTarget.Invalid)
    /// Hard links and device nodes: refused (docs/SEMANTICS.md).
    case notPermitted
    case notSupported
    case invalidArgument
    case busyWithUnsentChanges
    case readOnlyAttribute
    case noAttribute
    case attributeTooLarge
    case badHandle
    /// The kernel's name led to an item that is gone (a remote change arrived between its
    /// lookup and this request): ESTALE makes the kernel walk the path again, once, and open
    /// or create what is there now.
    case stale
    case noSpace
    /// Past the largest file the cache folder's file system holds.
    case fileTooLarge
    /// The versions folder and its files cannot be changed.
    case readOnlyFileSystem
    /// Content could not be fetched or stored; the item's error attribute says why.
    case io

    /// A failed write's errno as its writer sees it: a full disk or quota is ENOSPC, a size past
    /// what the cache folder holds EFBIG, never EIO.
    public init(writeFailure code: Int32) {
        switch code {
        case ENOSPC, EDQUOT: self = .noSpace
        case EFBIG: self = .fileTooLarge
        default: self = .io
        }
    }

    /// Exhaustive on purpose: a new case forces a decision.
    public var errno: Int32 {
        switch self {
        case .notFound: ENOENT
        case .exists: EEXIST
        case .notEmpty: ENOTEMPTY
        case .notADirectory: ENOTDIR
        case .isADirectory: EISDIR
        case .invalidName(let why):
            switch why {
            case .tooLong: ENAMETOOLONG
            case .empty, .dotOrDotDot, .containsSlash, .containsNUL, .notUTF8: EINVAL
            }
        case .nameTooLong: ENAMETOOLONG
        case .invalidTarget(let why): why == .tooLong ? ENAMETOOLONG : EINVAL
        case .notPermitted: EPERM
        case .notSupported: EOPNOTSUPP
        case .invalidArgument: EINVAL
        case .busyWithUnsentChanges: EBUSY
        case .readOnlyAttribute: EPERM
        case .noAttribute: ENODATA
        case .attributeTooLarge: E2BIG
        case .badHandle: EBADF
        case .stale: ESTALE
        case .noSpace: ENOSPC
        case .fileTooLarge: EFBIG
        case .readOnlyFileSystem: EROFS
        case .io: EIO
        }
    }
}
