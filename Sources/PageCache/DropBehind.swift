import Glibc

/// Lets a sequential stream through a file release the page cache it leaves behind.
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
    /// before the boundary this read reached. Dirty pages are not dropped (the kernel only
    /// drops clean pages); see `afterWrite`.
    public static func afterRead(fd: Int32, range: Range<Int64>) {
        guard let boundary = crossedBoundary(range) else { return }
        let start = boundary - 2 * block
        guard start >= block else { return }
        _ = posix_fadvise(fd, off_t(start), off_t(block), POSIX_FADV_DONTNEED)
    }

    /// After `range` of `fd` was written in a sequential pass: starts the writeback of the block
    /// it completed (on Linux, DONTNEED starts writeback of dirty pages and drops only clean
    /// ones, which a just-written block has none of), so that a reader's `afterRead` finds the
    /// block clean and can drop it. Without it the block stays dirty, and in memory, for up to
    /// 30 seconds.
    public static func afterWrite(fd: Int32, range: Range<Int64>) {
        guard let boundary = crossedBoundary(range), boundary - block >= block else { return }
        _ = posix_fadvise(fd, off_t(boundary - block), off_t(block), POSIX_FADV_DONTNEED)
    }

    /// The block boundary at or before `range`'s end when `range` reached it, else nil.
    public static func crossedBoundary(_ range: Range<Int64>) -> Int64? {
        guard !range.isEmpty, range.lowerBound / block != range.upperBound / block else { return nil }
        return range.upperBound / block * block
    }
}
