#if canImport(Glibc)
import Glibc
#endif

/// Where each running mount daemon says it is: one small file per mountpoint under
/// `$XDG_RUNTIME_DIR/ubiq/mounts/` (else `/tmp/ubiq-UID/mounts/`), holding the daemon's cache
/// folder (its control socket is `control.sock` there), its process ID and the mountpoint.
/// A daemon removes only its own entry.
public enum MountRegistry {
    public struct Entry: Equatable, Sendable {
        public var cacheDirectory: String
        public var daemon: pid_t?
        public var mountpoint: String
        public var controlSocket: String { cacheDirectory + "/control.sock" }
    }

    public static var directory: String {
        if let runtime = environment("XDG_RUNTIME_DIR"), !runtime.isEmpty { return runtime + "/ubiq/mounts" }
        return "/tmp/ubiq-\(getuid())/mounts"
    }

    /// The entry's file: named by a 64-bit FNV-1a hash of the mountpoint, which need not be
    /// secret, only stable and short enough for a file name (a mountpoint may not be). The
    /// entry names its mountpoint, so a collision reads as no entry, never as another mount's.
    static func file(_ mountpoint: String, in directory: String = MountRegistry.directory) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in mountpoint.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01b3
        }
        let hex = String(hash, radix: 16)
        return directory + "/" + String(repeating: "0", count: 16 - hex.count) + hex
    }

    /// Written to a temporary file and renamed: a reader never sees half an entry.
    public static func register(mountpoint: String, cacheDirectory: String) {
        var path = ""
        for part in directory.split(separator: "/") {
            path += "/" + part
            mkdir(path, 0o700)
        }
        let target = file(mountpoint)
        let temporary = target + ".\(getpid())"
        guard let out = fopen(temporary, "w") else { return }
        fputs("\(cacheDirectory)\n\(getpid())\n\(mountpoint)\n", out)
        fclose(out)
        if rename(temporary, target) != 0 { unlink(temporary) }
    }

    /// Only this daemon's own entry: a new mount of the same mountpoint may have registered
    /// while this one was finishing.
    public static func unregister(mountpoint: String) {
        guard entry(mountpoint)?.daemon == getpid() else { return }
        unlink(file(mountpoint))
    }

    /// The entry of the daemon serving `mountpoint`, if one registered (in `directory`: another
    /// session's registry, for a program that does not share the mounts' `XDG_RUNTIME_DIR`).
    public static func entry(_ mountpoint: String, in directory: String = MountRegistry.directory) -> Entry? {
        guard let entry = read(file(mountpoint, in: directory)), entry.mountpoint == mountpoint else { return nil }
        return entry
    }

    /// Every registered mount of this user (entries of daemons that died included).
    public static func entries() -> [Entry] {
        guard let dir = opendir(directory) else { return [] }
        defer { closedir(dir) }
        var found: [Entry] = []
        while let item = readdir(dir) {
            let name = withUnsafeBytes(of: item.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard !name.hasPrefix("."), !name.contains("."), let entry = read(directory + "/" + name) else { continue }
            found.append(entry)
        }
        return found
    }

    /// The cache folder of the daemon serving `mountpoint`, if one registered.
    public static func cacheDirectory(of mountpoint: String) -> String? { entry(mountpoint)?.cacheDirectory }

    /// The process ID of the daemon serving `mountpoint`, if one registered.
    public static func daemon(of mountpoint: String) -> pid_t? { entry(mountpoint)?.daemon ?? nil }

    static func read(_ path: String) -> Entry? {
        guard let input = fopen(path, "r") else { return nil }
        defer { fclose(input) }
        var text: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = fread(&buffer, 1, buffer.count, input)
            if n <= 0 { break }
            text += buffer[..<n]
        }
        let lines = text.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        guard lines.count >= 3, !lines[0].isEmpty, !lines[2].isEmpty else { return nil }
        return Entry(cacheDirectory: lines[0], daemon: pid_t(lines[1]), mountpoint: lines[2])
    }

    static func environment(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }
}
