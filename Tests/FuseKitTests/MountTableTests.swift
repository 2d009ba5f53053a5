import Foundation
import MountInfo
import Testing

/// The mount table is read to its end: the kernel hands /proc/self/mountinfo out a page (about
/// 4 KiB) at a time, and a reader that stops after the first answer misses every later mount.
@Suite struct MountTableTests {
    @Test(.enabled(if: geteuid() == 0, "mounts tmpfs, which needs root"))
    func everyMountIsListedPastTheTablesFirstPage() throws {
        let base = try makeTemporaryDirectory("mount-table")
        var mounted: [String] = []
        defer {
            for path in mounted.reversed() { _ = umount2(path, Int32(MNT_DETACH)) }
            for i in 0..<60 { rmdir("\(base)/m\(i)") }
            rmdir(base)
        }
        for i in 0..<60 {
            let path = "\(base)/m\(i)"
            guard mkdir(path, 0o700) == 0, mount("tmpfs", path, "tmpfs", 0, "size=64k") == 0 else {
                throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
            }
            mounted.append(path)
        }
        let raw = try #require(FileManager.default.contents(atPath: "/proc/self/mountinfo"))
        let listed = Set(MountInfo.table().map(\.mountpoint))
        #expect(mounted.allSatisfy(listed.contains), "\(mounted.filter { !listed.contains($0) }.count) of 60 missing; one read gave \(raw.count) bytes")
    }
}
