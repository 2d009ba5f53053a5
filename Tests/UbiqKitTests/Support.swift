import Foundation
import SyncAPI
import Synchronization
import TestSupport
import UbiqKit

/// What an asynchronous sequence has delivered so far, read while it goes on: tests wait for an
/// element with `eventually` instead of sleeping.
final class Recorded<Element: Sendable>: Sendable {
    private let state = Mutex<(elements: [Element], ended: Bool, failure: String?)>(([], false, nil))
    private let task = Mutex<Task<Void, Never>?>(nil)

    init<S: AsyncSequence & Sendable>(_ sequence: S) where S.Element == Element {
        let started = Task {
            do {
                for try await element in sequence { self.state.withLock { $0.elements.append(element) } }
                self.state.withLock { $0.ended = true }
            } catch {
                self.state.withLock { ($0.ended, $0.failure) = (true, "\(error)") }
            }
        }
        task.withLock { $0 = started }
    }

    var elements: [Element] { state.withLock { $0.elements } }
    var ended: Bool { state.withLock { $0.ended } }
    var failure: String? { state.withLock { $0.failure } }

    func cancel() { task.withLock { $0?.cancel() } }
}

extension TestDevice {
    var root: URL { URL(fileURLWithPath: mountpoint, isDirectory: true) }

    /// Where this device's daemon registered: its own `XDG_RUNTIME_DIR`, as another machine's would be.
    var registry: MountRegistryLocation { MountRegistryLocation(directory: environment["XDG_RUNTIME_DIR"]! + "/ubiq/mounts") }
}

extension MetadataQuery.Event {
    var update: (added: [MetadataItem], changed: [MetadataItem], removed: [MetadataItem])? {
        if case .didUpdate(let added, let changed, let removed) = self { return (added, changed, removed) }
        return nil
    }

    var isFinishGathering: Bool {
        if case .didFinishGathering = self { return true }
        return false
    }
}
