import SyncAPI

func describe(_ error: RemoteError) -> String {
    switch error {
    case .unreachable: "the server cannot be reached"
    case .untrustedServer(let why): why
    case .unauthorized(let why): "the server refused the login token (\(why)): run `ubiq login`"
    case .refused(_, let message, _): message
    case .protocolError(let m): m
    }
}
