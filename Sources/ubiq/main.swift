import Foundation

// Exit codes per SPEC: 0 success, 1 a user-facing failure (one line on stderr), 2 bad usage.
exit(await Ubiq.runMain())
