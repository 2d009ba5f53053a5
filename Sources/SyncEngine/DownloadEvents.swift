import Foundation

/// What `ubiq monitor` hears of downloads: a start, a few progress reports, an end.
extension Downloads {
    /// Progress goes out at most this often per file: the sink lands every chunk, which would
    /// be thousands of events a second.
    static let progressInterval: Duration = .milliseconds(500)

    /// Looks the file's path up (from the download's task, never an opener's thread) and
    /// reports the start; progress and the end report the same path.
    func announceStart(_ ino: Int64, generation: UInt64) {
        let path = try? store.read { try $0.path(of: ino) }
        let current = state.withLock { s -> Bool in
            guard s.active[ino]?.generation == generation else { return false }
            s.active[ino]?.path = path
            s.active[ino]?.lastProgress = .now
            return true
        }
        if current { observer.event(MountEvent(.downloadStarted, path: path, detail: "\(activeSize(ino)) bytes")) }
    }

    func activeSize(_ ino: Int64) -> Int64 { state.withLock { $0.active[ino]?.size ?? 0 } }

    /// Inside `state`'s lock, after a range landed: the progress event that is due, if any.
    static func progressDue(_ active: inout Active) -> MountEvent? {
        guard let last = active.lastProgress, last.duration(to: .now) >= progressInterval else { return nil }
        active.lastProgress = .now
        let landed = active.ranges.total
        let percent = active.size == 0 ? 100 : Int(landed * 100 / active.size)
        return MountEvent(.downloadProgress, path: active.path, detail: "\(percent)%")
    }
}
