import ControlSocket
import Foundation

/// One request to a mount daemon and its whole answer (`ControlExchange`), on a thread of its own.
///
/// A command (`ubiq status`, `ubiq versions`) asks its daemon one thing and exits. An HTTP
/// client's event loops, connection pool and the generic types they instantiate cost about
/// 10 ms of a command's start, more than most answers take; this costs a socket and a thread.
/// Streams (`ControlClient.lines`) stay on the HTTP client: they live long enough not to care.
enum SocketExchange {
    /// Runs the exchange on a new thread: its calls block, and the tasks of a process (the
    /// daemon's own routes, in a test that runs one) must keep their threads.
    static func run(socketPath: String, method: String, target: String, body: Data?, timeout: Duration) async throws -> ControlExchange.Answer {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                continuation.resume(with: Result {
                    try ControlExchange.exchange(
                        socketPath: socketPath, method: method, target: target, body: body.map { Array($0) },
                        timeoutSeconds: Int(timeout.components.seconds))
                })
            }
            thread.start()
        }
    }
}
