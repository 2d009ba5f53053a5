import Glibc

/// Lets a sequential pass through a file release the page cache it leaves behind.
///
/// Why: a file streamed once (a blob the server sends, a cache file the mount serves to the
/// kernel, which keeps its own copy of what it read) would otherwise stay in the page cache
/// twice over. On a virtual machine whose free memory is handed back to the host, every page
/// the cache takes anew is also a fault in the host: a 1 GiB stream into fresh pages ran at
/// half the rate of one that reuses the pages it just released. Dropping behind keeps one
/// small working set that is reused.
///
/// The first block of a file is never dropped: a file's head is what is read again (a type
/// sniff, a thumbnail, the first bytes a user waits for). Blocks are 2 MiB and aligned, because
/// the kernel keeps large folios of up to 2 MiB and cannot drop part of one. A block is dropped
/// one block late, so that a reply still in flight for the block just finished reads its pages
/// from memory.
public enum DropBehind {
    public static let block: Int64 = 2 << 20

    /// After `range` of `fd` was read in a sequential pass: drops the block that ended a block
    /// before the boundary this read reached, and asks again for the block before that one.
    /// The kernel drops only clean pages; for dirty ones (a download just wrote them) Linux
    /// starts their writeback instead, so the second ask, a block later, usually finds them
    /// clean (what is still dirty then stays until the kernel writes it back as usual).
    ///
    /// `passStart`: where this pass began, when the caller knows. Nothing before it is dropped:
    /// a ranged read far into a file (another reader's seek) must not drop what the pass that
    /// is still reading the start of the file needs next.
    public static func afterRead(fd: Int32, range: Range<Int64>, passStart: Int64 = 0) {
        guard let boundary = crossedBoundary(range) else { return }
        for start in [boundary - 2 * block, boundary - 3 * block] where start >= max(block, passStart) {
            _ = posix_fadvise(fd, off_t(start), off_t(block), POSIX_FADV_DONTNEED)
        }
    }

    /// The block boundary at or before `range`'s end when `range` reached it, else nil.
    public static func crossedBoundary(_ range: Range<Int64>) -> Int64? {
        guard !range.isEmpty, range.lowerBound / block != range.upperBound / block else { return nil }
        return range.upperBound / block * block
    }
}
