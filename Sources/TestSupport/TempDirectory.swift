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

/// Waits for `condition` with a deadline, checking again at each short interval: tests wait
/// for events, they do not sleep and hope.
public func eventually(
    timeout: Duration = .seconds(10), _ what: String, _ condition: () async throws -> Bool
) async throws {
    let clock = ContinuousClock()
    let deadline = clock.now + timeout
    while true {
        if try await condition() { return }
        if clock.now >= deadline { throw TestSupportError("timed out after \(timeout) waiting for \(what)") }
        try await Task.sleep(for: .milliseconds(10))
    }
}
