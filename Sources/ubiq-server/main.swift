import Foundation
import NIOCore
import NIOPosix

// Swift concurrency runs on the server's event loops: a request's handler then continues on
// the thread that read it, instead of hopping to the cooperative pool and back. On two cores
// each hop that wakes an idle CPU cost hundreds of microseconds of a download's first byte.
// Called first thing, on the main thread, before any task exists, as NIO requires.
NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
// Exit codes (docs/CLI.md): 0 success, 1 a user-facing failure (one line on stderr), 2 bad usage.
exit(await UbiqServer.runMain())
