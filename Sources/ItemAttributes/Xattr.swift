#if canImport(Glibc)
import Glibc
#endif

// <sys/xattr.h> is not part of the Glibc module; these are its two calls, as glibc exports them.
@_silgen_name("getxattr")
func c_getxattr(_ path: UnsafePointer<CChar>, _ name: UnsafePointer<CChar>, _ value: UnsafeMutableRawPointer?, _ size: Int) -> Int
@_silgen_name("setxattr")
func c_setxattr(_ path: UnsafePointer<CChar>, _ name: UnsafePointer<CChar>, _ value: UnsafeRawPointer?, _ size: Int, _ flags: Int32) -> Int32

/// An item's extended attributes by path, as text: how the command line and programs read an
/// item's `user.ubiq.*` state and ask the mount for actions (docs/SEMANTICS.md, "Extended
/// attributes").
public enum Xattr {
    /// The attribute's value; nil when the item or the attribute is missing.
    public static func get(_ path: String, _ name: String) -> String? {
        // The size first: a list of conflict versions may be longer than a page. A value that
        // grows between the two calls (`current` becoming `downloaded`) is read again.
        while true {
            let size = c_getxattr(path, name, nil, 0)
            guard size >= 0 else { return nil }
            var buffer = [UInt8](repeating: 0, count: max(size, 1))
            let n = c_getxattr(path, name, &buffer, buffer.count)
            if n < 0 && errno == ERANGE { continue }
            guard n >= 0 else { return nil }
            return String(decoding: buffer.prefix(n), as: UTF8.self)
        }
    }

    /// 0, or the errno of the refusal.
    public static func set(_ path: String, _ name: String, _ value: String) -> Int32 {
        let bytes = Array(value.utf8)
        return c_setxattr(path, name, bytes, bytes.count, 0) == 0 ? 0 : errno
    }
}
