import Foundation
import OpenFiles
import Synchronization

/// What a large file's upload tells as its bytes go out: the status's percentage at every
/// chunk, and `ubiq monitor` an `uploadProgress` event at most every `interval` (the client
/// hands over a chunk each megabyte, which would be hundreds of events a second).
final class UploadProgress: Sendable {
    static let interval: Duration = .milliseconds(500)

    let ino: Int64
    let path: String?
    let size: Int64
    let openFiles: OpenFiles
    let observer: any MountObserver
    private let lastEvent: Mutex<ContinuousClock.Instant>

    init(ino: Int64, path: String?, size: Int64, openFiles: OpenFiles, observer: any MountObserver) {
        self.ino = ino
        self.path = path
        self.size = size
        self.openFiles = openFiles
        self.observer = observer
        // The start was just told (`uploadStarted`): the first progress comes an interval later.
        lastEvent = Mutex(.now)
    }

    /// `bytes` have gone out so far.
    @Sendable func sent(_ bytes: Int64) {
        openFiles.uploadProgress(ino, sent: bytes, of: size)
        let due = lastEvent.withLock { last -> Bool in
            guard last.duration(to: .now) >= Self.interval else { return false }
            last = .now
            return true
        }
        guard due else { return }
        let percent = size == 0 ? 100 : Int(bytes * 100 / size)
        observer.event(MountEvent(.uploadProgress, path: path, detail: "\(percent)%"))
    }
}
