#if canImport(Glibc)
import Glibc
#endif
import MountInfo

/// Which mount a path is in, and where its daemon answers.
public enum MountLookup {
    /// `path` made absolute against the working directory, with `.`, `..` and repeated slashes
    /// taken out by their text (links are not followed): the path as the user wrote it, which is
    /// what the mount table holds for a mount made there.
    public static func absolute(_ path: String) -> String {
        var base = ""
        if !path.hasPrefix("/"), let cwd = getcwd(nil, 0) {
            base = String(cString: cwd)
            free(cwd)
        }
        var parts: [Substring] = []
        for part in (base + "/" + path).split(separator: "/") {
            switch part {
            case ".": continue
            case "..": _ = parts.popLast()
            default: parts.append(part)
            }
        }
        return "/" + parts.joined(separator: "/")
    }

    /// The ubiq mount containing `path` (absolute), and its daemon's entry if one registered.
    public static func mount(containing path: String) -> (mountpoint: String, daemon: MountRegistry.Entry?)? {
        guard let mountpoint = MountInfo.ubiqMount(containing: path) else { return nil }
        return (mountpoint, MountRegistry.entry(mountpoint))
    }
}
