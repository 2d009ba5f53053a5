import Foundation

// Exit codes (docs/CLI.md): 0 success, 1 a user-facing failure (one line on stderr), 2 bad usage.
exit(await Ubiq.runMain())
