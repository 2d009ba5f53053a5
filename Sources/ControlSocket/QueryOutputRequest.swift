/// What `ubiq query` asks its daemon for (`GET /query/output`, see `ControlPath.queryOutput`):
/// the one request both ways of running the command make, so that they print the same.
public struct QueryOutputRequest: Equatable, Sendable {
    public var predicate: String
    /// The values of `%K` and `%@`, in order.
    public var arguments: [String] = []
    public var scope = "all"
    public var sort: String?
    public var groupBy: String?
    public var values: String?
    public var count = false
    public var json = false

    public init(predicate: String) { self.predicate = predicate }

    /// The request's target, `root` being the mountpoint the paths are printed under.
    public func target(root: String) -> String {
        "/query/output?" + queryString(root: root)
    }

    /// The parameters, which `/query/live` takes too.
    public func queryString(root: String) -> String {
        let parameters: [(String, String)] = [
            ("q", predicate), ("args", Self.jsonArray(arguments)), ("scope", scope), ("sort", sort ?? ""), ("group", groupBy ?? ""),
            ("values", values ?? ""), ("count", count ? "1" : "0"), ("json", json ? "1" : "0"), ("root", root),
        ]
        return parameters.map { Self.percentEncoded($0.0) + "=" + Self.percentEncoded($0.1) }.joined(separator: "&")
    }

    /// Every byte but the unreserved ones (RFC 3986) as `%XX`: `+` and `&` included, which a
    /// query string would otherwise read as a space and a separator.
    static func percentEncoded(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                out += "%" + hex(byte)
            }
        }
        return out
    }

    /// A JSON array of strings (RFC 8259 escapes), as `/query` takes its `args`.
    static func jsonArray(_ strings: [String]) -> String {
        "[" + strings.map { string in
            var out = "\""
            for scalar in string.unicodeScalars {
                switch scalar {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                case "\n": out += "\\n"
                case "\r": out += "\\r"
                case "\t": out += "\\t"
                case _ where scalar.value < 0x20: out += "\\u00" + hex(UInt8(scalar.value))
                default: out.unicodeScalars.append(scalar)
                }
            }
            return out + "\""
        }.joined(separator: ",") + "]"
    }

    static func hex(_ byte: UInt8) -> String {
        let digits = Array("0123456789ABCDEF")
        return String(digits[Int(byte >> 4)]) + String(digits[Int(byte & 0xF)])
    }
}
