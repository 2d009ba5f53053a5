import ControlSocket

/// `ubiq query` as this executable answers it itself: the options it reads here, and the
/// request it makes of the daemon (`QueryOutputRequest`, the one `ubiq-full` makes).
///
/// It reads only what it can read exactly as `ubiq-full`'s parser does: anything else (help,
/// `--live`, `--explain`, an option it does not know, given twice, or without its value, not one
/// predicate, a scope that is not one of the three) is nil, and the command goes to `ubiq-full`,
/// which says what is wrong or does the rest.
struct QuickQuery {
    var request: QueryOutputRequest
    var mount: String?

    init?(_ arguments: ArraySlice<String>) {
        var predicate: String?
        var request = QueryOutputRequest(predicate: "")
        var mount: String?
        var seen: Set<String> = []
        var rest = arguments
        var positionalOnly = false
        while let argument = rest.popFirst() {
            if positionalOnly || !argument.hasPrefix("-") || argument == "-" {
                guard predicate == nil else { return nil }
                predicate = argument
                continue
            }
            if argument == "--" {
                positionalOnly = true
                continue
            }
            var name = argument
            var inlineValue: String?
            if let equals = argument.firstIndex(of: "=") {
                name = String(argument[..<equals])
                inlineValue = String(argument[argument.index(after: equals)...])
            }
            func value() -> String? {
                if let inlineValue { return inlineValue }
                guard let next = rest.first, !next.hasPrefix("-") else { return nil }
                return rest.popFirst()
            }
            if name != "--arg" {
                guard !seen.contains(name) else { return nil }
                seen.insert(name)
            }
            switch name {
            case "--count" where inlineValue == nil: request.count = true
            case "--json" where inlineValue == nil: request.json = true
            case "--arg":
                guard let v = value() else { return nil }
                request.arguments.append(v)
            case "--scope":
                guard let v = value(), ["all", "documents", "data"].contains(v) else { return nil }
                request.scope = v
            case "--sort":
                guard let v = value() else { return nil }
                request.sort = v
            case "--group-by":
                guard let v = value() else { return nil }
                request.groupBy = v
            case "--values":
                guard let v = value() else { return nil }
                request.values = v
            case "--mount":
                guard let v = value() else { return nil }
                mount = v
            default:
                return nil
            }
        }
        guard let predicate else { return nil }
        request.predicate = predicate
        self.request = request
        self.mount = mount
    }

    /// What the command prints and its exit status, or nil when the daemon cannot be asked or
    /// answers something only `ubiq-full` can say.
    func run() -> (output: [UInt8], toStandardError: Bool, status: Int32)? {
        let target = MountLookup.absolute(mount ?? ".")
        guard let (mountpoint, daemon) = MountLookup.mount(containing: target), let daemon,
            let answer = try? ControlExchange.exchange(
                socketPath: daemon.controlSocket, method: "GET", target: request.target(root: mountpoint), body: nil, timeoutSeconds: 120)
        else { return nil }
        switch answer.status {
        case 200: return (answer.body, false, 0)
        case 422: return (answer.body, !request.json, 2)
        default: return nil
        }
    }
}
