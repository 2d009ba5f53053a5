#if canImport(Glibc)
import Glibc
#endif

/// The mounts of this process's namespace, from /proc/self/mountinfo. Glibc only: the quick
/// command path (`ubiq`) reads it too, and links no Foundation.
public enum MountInfo {
    public struct Entry: Sendable, Equatable {
        public var mountpoint: String
        /// `fuse.ubiq` for a ubiq mount.
        public var type: String
    }

    /// Every mount, in mount order (reading it needs no access to the mounts themselves, so a
    /// dead or hung one is fine). Read as bytes: one mount point elsewhere whose name is not
    /// UTF-8 must not hide the rest.
    public static func table() -> [Entry] {
        guard let file = fopen("/proc/self/mountinfo", "r") else { return [] }
        defer { fclose(file) }
        var line: UnsafeMutablePointer<CChar>?
        var capacity = 0
        defer { free(line) }
        var table: [Entry] = []
        while getline(&line, &capacity, file) > 0, let line {
            // "36 35 98:0 /root /mnt/point rw,noatime master:1 - ext3 /dev/root rw"
            // Field 5 is the mount point; the type follows the " - " separator.
            let text = String(cString: line)
            let halves = text.split(separator: " - ", maxSplits: 1)
            guard halves.count == 2 else { continue }
            let fields = halves[0].split(separator: " ")
            guard fields.count >= 5, let type = halves[1].split(separator: " ").first else { continue }
            table.append(Entry(mountpoint: unescape(fields[4]), type: String(type)))
        }
        return table
    }

    /// The ubiq mounts.
    public static func ubiqMountpoints() -> [String] {
        table().filter { $0.type == "fuse.ubiq" }.map(\.mountpoint)
    }

    /// The ubiq mount that contains `path`, an absolute path (the longest matching mountpoint).
    public static func ubiqMount(containing path: String) -> String? {
        ubiqMountpoints().filter { path == $0 || path.hasPrefix($0 == "/" ? "/" : $0 + "/") }.max { $0.count < $1.count }
    }

    /// mountinfo writes space, tab, newline and backslash as 3-digit octal escapes ("\040").
    static func unescape(_ field: Substring) -> String {
        var bytes: [UInt8] = []
        let utf8 = Array(field.utf8)
        var i = 0
        while i < utf8.count {
            if utf8[i] == UInt8(ascii: "\\"), i + 3 < utf8.count,
                let value = UInt8(String(decoding: utf8[(i + 1)...(i + 3)], as: UTF8.self), radix: 8)
            {
                bytes.append(value)
                i += 4
            } else {
                bytes.append(utf8[i])
                i += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
