import Foundation
import TestSupport
import Testing

/// The runner every live test starts its commands with.
@Suite struct CommandRunnerTests {
    /// The background `sleep` inherits what the shell was given, Foundation's socket for
    /// noticing the exit included: the shell's exit must be seen all the same.
    @Test func aCommandEndsWhenItExitsThoughItsChildLivesOn() async throws {
        let started = ContinuousClock.now
        let result = try await run("/bin/sh", ["-c", "sleep 60 >/dev/null 2>&1 </dev/null & echo $!; exit 3"], timeout: .seconds(20))
        if let sleeper = Int32(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) { kill(sleeper, SIGKILL) }
        #expect(result.status == 3)
        #expect(ContinuousClock.now - started < .seconds(20))
    }
}
