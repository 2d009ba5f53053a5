import ItemModel

/// When the background may try again to download a file whose last download failed.
///
/// Pinned files and `ubiq download` requests are started by maintenance passes, and every
/// download's end asks for a pass. Without a pause, a file whose download kept failing (a
/// digest that never matches, a server error, a server that drops the transfer while the
/// push stream stays up) was fetched again at every pass: up to ten times a second, a whole
/// file each time. Each failure doubles the pause, from 1 s up to 5 minutes. A new version
/// of the file (another digest) or a connection that comes back starts afresh, and an open
/// never waits for it: a reader asks now.
struct DownloadRetries: Sendable {
    struct Entry: Sendable {
        var digest: ContentDigest
        var failures: Int
        var notBefore: ContinuousClock.Instant
    }

    private(set) var entries: [Int64: Entry] = [:]

    static let firstPause: Duration = .seconds(1)
    static let longestPause: Duration = .seconds(300)

    /// The pause after `failures` failures in a row.
    static func pause(afterFailures failures: Int) -> Duration {
        var pause = firstPause
        for _ in 1..<max(failures, 1) {
            pause *= 2
            if pause >= longestPause { return longestPause }
        }
        return pause
    }

    /// Records a failed download of `digest`; returns when the next try is due.
    mutating func failed(_ ino: Int64, digest: ContentDigest, at now: ContinuousClock.Instant) -> ContinuousClock.Instant {
        let failures = entries[ino].map { $0.digest == digest ? $0.failures + 1 : 1 } ?? 1
        let due = now + Self.pause(afterFailures: failures)
        entries[ino] = Entry(digest: digest, failures: failures, notBefore: due)
        return due
    }

    mutating func succeeded(_ ino: Int64) {
        entries[ino] = nil
    }

    /// The connection came back: what failed while it was going may work now.
    mutating func forgetAll() {
        entries.removeAll()
    }

    /// False while the pause after a failed download of this version runs.
    func isDue(_ ino: Int64, digest: ContentDigest?, at now: ContinuousClock.Instant) -> Bool {
        guard let entry = entries[ino], entry.digest == digest else { return true }
        return now >= entry.notBefore
    }
}
