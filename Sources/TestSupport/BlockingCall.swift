import Dispatch
import Synchronization

/// Runs async work to its end for a synchronous caller: a test's expectations about the
/// in-memory server (`remote.tree()`, `remote.otherDevice.createFile(…)`) read as plain calls,
/// while the server behind them is async.
///
/// The work runs on a serial queue of its own, never on the cooperative pool: the caller
/// blocks one of the pool's threads (there may be two), and work that waited for a free one
/// could wait forever. Never call it from that queue.
public enum BlockingCall {
    static let executor = QueueExecutor()

    public static func run<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
        let done = DispatchSemaphore(value: 0)
        let outcome = Outcome<T>()
        Task(executorPreference: executor) {
            do { outcome.set(.success(try await body())) } catch { outcome.set(.failure(error)) }
            done.signal()
        }
        done.wait()
        return try outcome.get()
    }

    final class Outcome<T: Sendable>: Sendable {
        let value = Mutex<Result<T, any Error>?>(nil)
        func set(_ result: Result<T, any Error>) { value.withLock { $0 = result } }
        func get() throws -> T { try value.withLock { $0! }.get() }
    }

    final class QueueExecutor: TaskExecutor {
        let queue = DispatchQueue(label: "ubiq.test-support.blocking-call")

        func enqueue(_ job: consuming ExecutorJob) {
            let job = UnownedJob(job)
            let executor = asUnownedTaskExecutor()
            queue.async { job.runSynchronously(on: executor) }
        }
    }
}
