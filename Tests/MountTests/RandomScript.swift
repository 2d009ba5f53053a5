import Foundation
import TestSupport

/// One seed's random operations, round by round, for the two mounts (shell scripts of ordinary
/// tools) and the third writer (steps through the server's HTTP API).
///
/// Every content a writer closes carries tokens, lines like `<A.12.7>` that occur nowhere else,
/// so that a checker can look for them in the server's files and conflict versions. A shell step
/// that wrote and closed its tokens prints `+TOKEN`; `tee` reports a failed write or close.
///
/// The last round only keeps: it appends, makes new files under new names, renames to new
/// names, makes folders and sets attributes, and never overwrites, truncates, deletes, or
/// renames over a name. The earlier rounds do anything.
struct RandomScript {
    enum HTTPStep {
        case create(folder: String, name: String, token: String)
        case append(path: String, token: String)
        case delete(path: String)
        case rename(path: String, to: String)
    }

    struct Round {
        var a: String
        var b: String
        var http: [HTTPStep]
        var keeps: Bool
    }

    /// What happens to the links while the rounds run.
    enum Disruption: Equatable {
        case none
        /// The server is killed and started again (same port) while this round runs.
        case restart(round: Int)
        /// The device's link is cut before `round` and mended after the last round.
        case cut(device: Int, round: Int)
        case both(restartRound: Int, cutDevice: Int, cutRound: Int)

        var restartRound: Int? {
            switch self {
            case .restart(let r), .both(let r, _, _): r
            default: nil
            }
        }
        var cut: (device: Int, round: Int)? {
            switch self {
            case .cut(let d, let r): (d, r)
            case .both(_, let d, let r): (d, r)
            default: nil
            }
        }
    }

    static let roundCount = 3
    static let folders = ["", "d0", "d1", "d0/e"]
    static let names = ["f0", "f1", "f2", "f3"]

    let seed: UInt64
    let folder: String
    var rounds: [Round] = []
    var disruption = Disruption.none
    private var rng: SeededGenerator
    private var counter = 0

    init(seed: UInt64, folder: String) {
        self.seed = seed
        self.folder = folder
        rng = SeededGenerator(seed: seed)
        switch pick(12) {
        case 0..<8: disruption = .none
        case 8, 9: disruption = .restart(round: 1 + pick(Self.roundCount - 1))
        case 10: disruption = .cut(device: pick(2), round: 1)
        default: disruption = .both(restartRound: 1 + pick(Self.roundCount - 1), cutDevice: pick(2), cutRound: 1)
        }
        for r in 0..<Self.roundCount {
            let keeps = r == Self.roundCount - 1
            let a = (0..<5).map { _ in shellStep("A", keeps: keeps) }.joined(separator: "\n")
            let b = (0..<5).map { _ in shellStep("B", keeps: keeps) }.joined(separator: "\n")
            let http = (0..<2).map { _ in httpStep(keeps: keeps) }
            rounds.append(Round(a: "cd \"$M/\(folder)\" || exit 1\n" + a, b: "cd \"$M/\(folder)\" || exit 1\n" + b, http: http, keeps: keeps))
        }
    }

    private mutating func pick(_ n: Int) -> Int { Int(rng.next() % UInt64(n)) }
    private mutating func anyFolder() -> String { Self.folders[pick(Self.folders.count)] }
    private mutating func anyPath() -> String { Self.join(anyFolder(), Self.names[pick(Self.names.count)]) }
    private mutating func token(_ writer: String) -> String {
        counter += 1
        return "<\(writer).\(folder).\(counter)>"
    }
    private mutating func freshName(_ writer: String) -> String {
        counter += 1
        return "n\(writer)\(counter)"
    }

    static func join(_ folder: String, _ name: String) -> String { folder.isEmpty ? name : folder + "/" + name }

    private mutating func shellStep(_ w: String, keeps: Bool) -> String {
        let p = anyPath()
        let dir = anyFolder()
        let d = dir.isEmpty ? "." : dir
        let step: String
        switch keeps ? [1, 1, 1, 8, 9, 5, 7][pick(7)] : pick(9) {
        case 0:
            let t = token(w)
            step = "[ -d \(d) ] && printf '\(t)\\n' | tee \(Self.join(dir, Self.names[pick(Self.names.count)])) >/dev/null && echo '+\(t)'"
        case 1:
            let t = token(w)
            step = "[ -f \(p) ] && printf '\(t)\\n' | tee -a \(p) >/dev/null && echo '+\(t)'"
        case 2: step = "[ -f \(p) ] && truncate -s \(pick(12)) \(p)"
        case 3: step = "[ -f \(p) ] && [ -d \(d) ] && mv -f \(p) \(Self.join(dir, Self.names[pick(Self.names.count)]))"
        case 4: step = "rm -f \(p)"
        case 5: step = "mkdir -p \(["d0", "d1", "d0/e"][pick(3)])"
        case 6: step = pick(2) == 0 ? "rm -rf \(["d1", "d0/e"][pick(2)])" : "rmdir \(["d0", "d1", "d0/e"][pick(3)])"
        case 7: step = "[ -e \(p) ] && setfattr -n user.t.k\(pick(3)) -v \(w)\(pick(1000)) \(p)"
        case 8: step = "[ -f \(p) ] && [ -d \(d) ] && mv -n \(p) \(Self.join(dir, freshName(w)))"
        default:
            let t = token(w)
            step = "[ -d \(d) ] && printf '\(t)\\n' | tee \(Self.join(dir, freshName(w))) >/dev/null && echo '+\(t)'"
        }
        return step + " 2>/dev/null || true"
    }

    private mutating func httpStep(keeps: Bool) -> HTTPStep {
        switch keeps ? [1, 1, 4][pick(3)] : pick(5) {
        case 0: .create(folder: anyFolder(), name: Self.names[pick(Self.names.count)], token: token("H"))
        case 1: .append(path: anyPath(), token: token("H"))
        case 2: .delete(path: anyPath())
        case 3: .rename(path: anyPath(), to: Self.names[pick(Self.names.count)])
        default: .create(folder: anyFolder(), name: freshName("H"), token: token("H"))
        }
    }
}

extension RandomScript: CustomStringConvertible {
    /// The seed's operations, round by round, for a failure message.
    var description: String {
        var text = "disruption: \(disruption)\n"
        for (r, round) in rounds.enumerated() {
            text += "round \(r)\(round.keeps ? " (keeps)" : ""):\n[A]\n\(round.a)\n[B]\n\(round.b)\n[API] \(round.http)\n"
        }
        return text
    }
}
