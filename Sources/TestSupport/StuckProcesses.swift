import Foundation

/// What a process that missed its deadline, and everything it started, is waiting on in the
/// kernel: for each, its command line, state, wait channel and kernel stack. A command on a
/// mount that hangs is a FUSE request nobody answers, and this names the call it hangs in.
/// Kernel stacks are readable by root only; an ordinary user's run shows the rest.
public enum StuckProcesses {
    public static func report(below root: Int32) -> String {
        var lines: [String] = []
        for pid in [root] + descendants(of: root) {
            lines.append("  pid \(pid) `\(commandLine(pid))` state \(field(pid, "stat", 2) ?? "?") waits in \(read("/proc/\(pid)/wchan") ?? "?")")
            if let stack = read("/proc/\(pid)/stack"), !stack.isEmpty {
                lines += stack.split(separator: "\n").prefix(12).map { "    " + $0 }
            }
        }
        return lines.joined(separator: "\n")
    }

    /// Each thread of `pid` that is blocked in the kernel somewhere other than a plain wait for
    /// work (futex, epoll, a read of the FUSE device) or running, with its stack.
    public static func threads(of pid: Int32) -> String {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        var lines: [String] = []
        for tid in tasks.sorted() {
            let base = "/proc/\(pid)/task/\(tid)"
            let wchan = read(base + "/wchan") ?? "?"
            lines.append("  thread \(tid) (\(read(base + "/comm") ?? "?")) waits in \(wchan)")
            if let stack = read(base + "/stack"), !stack.isEmpty, wchan != "0", !["futex", "epoll", "fuse_dev_do_read"].contains(where: { wchan.contains($0) }) {
                lines += stack.split(separator: "\n").prefix(12).map { "    " + $0 }
            }
        }
        return lines.joined(separator: "\n")
    }

    /// The number of requests each FUSE connection has sent and not yet had answered.
    public static func fuseRequestsWaiting() -> String {
        let root = "/sys/fs/fuse/connections"
        let connections = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return connections.sorted().map { "  connection \($0): \(read("\(root)/\($0)/waiting") ?? "?") waiting" }.joined(separator: "\n")
    }

    static func descendants(of root: Int32) -> [Int32] {
        var parents: [Int32: [Int32]] = [:]
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = Int32(entry), let parent = field(pid, "stat", 3).flatMap({ Int32($0) }) else { continue }
            parents[parent, default: []].append(pid)
        }
        var found: [Int32] = []
        var next = [root]
        while let pid = next.popLast() {
            let children = parents[pid] ?? []
            found += children
            next += children
        }
        return found
    }

    static func commandLine(_ pid: Int32) -> String {
        guard let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { return "?" }
        return String(decoding: data, as: UTF8.self).split(separator: "\0").joined(separator: " ")
    }

    /// Field `index` (0-based) of `/proc/PID/stat`, counted after the command name, which may
    /// hold spaces and is the one field in parentheses.
    static func field(_ pid: Int32, _ file: String, _ index: Int) -> String? {
        guard let text = read("/proc/\(pid)/\(file)"), let close = text.lastIndex(of: ")") else { return nil }
        let rest = text[text.index(after: close)...].split(separator: " ")
        return index >= 2 && index - 2 < rest.count ? String(rest[index - 2]) : nil
    }

    static func read(_ path: String) -> String? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
