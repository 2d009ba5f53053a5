import Foundation

/// A fresh folder under the system temp dir, removed by `remove()`.
public struct TempDirectory: Sendable {
    public let path: String

    public init(_ label: String = "ubiq-test") throws {
        let base = FileManager.default.temporaryDirectory.path
        var template = Array("\(base)/\(label)-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw TestSupportError("mkdtemp failed: errno \(errno)") }
        path = String(cString: made)
    }

    public func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}

public struct TestSupportError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// How long a wait for an event may take before the test calls it a hang. A guard, not a
/// measure: the whole suite runs its tests side by side on two cores, and there a wait that
/// takes milliseconds alone came within a whisker of 10 s (one CI run timed out three).
public let waitLimit: Duration = .seconds(30)

/// Waits for `condition` with a deadline, checking again at each short interval: tests wait
/// for events, they do not sleep and hope. `what` is read at the deadline, so it may say what
/// was last seen.
public func eventually(
    timeout: Duration = waitLimit, _ what: @autoclosure () -> String, _ condition: () async throws -> Bool
) async throws {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while true {
        if try await condition() { return }
        if clock.now >= deadline { throw TestSupportError("timed out after \(timeout) waiting for \(what())") }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// Runs `body` with a deadline: its result, or a failure once `timeout` passes (the body is
/// cancelled then). For waits on a stream of events, which `eventually` cannot poll.
public func withDeadline<T: Sendable>(
    _ timeout: Duration = waitLimit, _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: timeout)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else { throw TestSupportError("timed out after \(timeout)") }
        return value
    }
}
