import Crypto
import Foundation

/// An access key and its secret, and the session token that temporary credentials come with.
public struct S3Credentials: Sendable, Equatable {
    public var accessKeyID: String
    public var secretAccessKey: String
    public var sessionToken: String?

    public init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil) {
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
    }
}

/// AWS Signature Version 4 in the `Authorization` header: the canonical request, the string to
/// sign and the signature, each kept so that tests compare them with AWS's published examples.
public struct SigV4Signer: Sendable {
    public let credentials: S3Credentials
    public let region: String
    public let service: String

    public init(credentials: S3Credentials, region: String, service: String = "s3") {
        self.credentials = credentials
        self.region = region
        self.service = service
    }

    /// What is signed of a request.
    public struct Request: Sendable {
        public var method: String
        /// The path as sent: already URI-encoded (`S3Path.encode`), never encoded again here.
        public var encodedPath: String
        /// Query parameters, not encoded; a parameter without a value has the empty string.
        public var query: [(name: String, value: String)]
        /// Every header to sign, `host` and `x-amz-date` included.
        public var headers: [(name: String, value: String)]
        /// The hex SHA-256 of the body, or `UNSIGNED-PAYLOAD`.
        public var payloadHash: String

        public init(method: String, encodedPath: String, query: [(name: String, value: String)] = [], headers: [(name: String, value: String)], payloadHash: String) {
            self.method = method
            self.encodedPath = encodedPath
            self.query = query
            self.headers = headers
            self.payloadHash = payloadHash
        }
    }

    public struct Signed: Sendable {
        public var canonicalRequest: String
        public var stringToSign: String
        public var signature: String
        public var signedHeaders: String
        /// The `Authorization` header's value.
        public var authorization: String
    }

    /// The hex SHA-256 of the empty body.
    public static let emptyPayloadHash = hex(SHA256.hash(data: Data()))
    /// For a body streamed as it is read, whose hash is not known when the headers go.
    public static let unsignedPayload = "UNSIGNED-PAYLOAD"

    public func sign(_ request: Request, at date: Date) -> Signed {
        let (amzDate, day) = Self.timestamps(date)
        // Names lowercased and sorted; values trimmed, inner runs of spaces made one, the values
        // of a repeated name joined with commas.
        var byName: [String: [String]] = [:]
        for (name, value) in request.headers {
            let collapsed = value.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
            byName[name.lowercased(), default: []].append(collapsed.trimmingCharacters(in: .whitespaces))
        }
        let names = byName.keys.sorted()
        let canonicalHeaders = names.map { "\($0):\(byName[$0]!.joined(separator: ","))\n" }.joined()
        let signedHeaders = names.joined(separator: ";")
        let encodedQuery: [(name: String, value: String)] = request.query.map {
            (S3Path.encode($0.name, keepingSlashes: false), S3Path.encode($0.value, keepingSlashes: false))
        }
        let sortedQuery = encodedQuery.sorted { $0.name == $1.name ? $0.value < $1.value : $0.name < $1.name }
        let canonicalQuery = sortedQuery.map { "\($0.name)=\($0.value)" }.joined(separator: "&")
        let path: String = request.encodedPath.isEmpty ? "/" : request.encodedPath
        let lines: [String] = [request.method, path, canonicalQuery, canonicalHeaders, signedHeaders, request.payloadHash]
        let canonicalRequest = lines.joined(separator: "\n")
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let stringToSign = ["AWS4-HMAC-SHA256", amzDate, scope, Self.hex(SHA256.hash(data: Data(canonicalRequest.utf8)))].joined(separator: "\n")
        var key = SymmetricKey(data: Data("AWS4\(credentials.secretAccessKey)".utf8))
        for part in [day, region, service, "aws4_request"] {
            key = SymmetricKey(data: Data(HMAC<SHA256>.authenticationCode(for: Data(part.utf8), using: key)))
        }
        let signature = Self.hex(HMAC<SHA256>.authenticationCode(for: Data(stringToSign.utf8), using: key))
        let authorization = "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyID)/\(scope), SignedHeaders=\(signedHeaders), Signature=\(signature)"
        return Signed(canonicalRequest: canonicalRequest, stringToSign: stringToSign, signature: signature, signedHeaders: signedHeaders, authorization: authorization)
    }

    /// `20130524T000000Z` and `20130524`, in UTC.
    public static func timestamps(_ date: Date) -> (amzDate: String, day: String) {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let day = String(format: "%04d%02d%02d", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday))
        return (day + String(format: "T%02d%02d%02dZ", Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec)), day)
    }

    static func hex<D: Sequence>(_ bytes: D) -> String where D.Element == UInt8 {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0xF)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// URI encoding as SigV4 and S3 want it: every byte but the unreserved ones (`A-Z a-z 0-9 - . _ ~`)
/// as `%XX` in upper case; in a path, `/` stays.
public enum S3Path {
    public static func encode(_ text: String, keepingSlashes: Bool) -> String {
        let digits = Array("0123456789ABCDEF".utf8)
        var out = [UInt8]()
        out.reserveCapacity(text.utf8.count)
        for b in text.utf8 {
            switch b {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                out.append(b)
            case UInt8(ascii: "/") where keepingSlashes:
                out.append(b)
            default:
                out += [UInt8(ascii: "%"), digits[Int(b >> 4)], digits[Int(b & 0xF)]]
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
