import Foundation

/// A refusal from the S3 service: the code from its XML error body (`NoSuchKey`,
/// `SignatureDoesNotMatch`, …) and the HTTP status. An answer without a body (a HEAD's) has the
/// status alone, and a code made from it (`HTTP404`).
public struct S3Error: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: String
    public var message: String
    public var status: Int
    public var requestID: String?

    public init(code: String, message: String, status: Int, requestID: String? = nil) {
        self.code = code
        self.message = message
        self.status = status
        self.requestID = requestID
    }

    /// The error an answer's body describes; nil when the body is not an S3 error document.
    init?(status: Int, body: Data) {
        guard let root = try? S3XML.parse(body), root.name == "Error" else { return nil }
        self.init(code: root["Code"] ?? "HTTP\(status)", message: root["Message"] ?? "", status: status, requestID: root["RequestId"])
    }

    public var description: String {
        "S3 \(code) (HTTP \(status))" + (message.isEmpty ? "" : ": \(message)") + (requestID.map { " [request \($0)]" } ?? "")
    }
}

/// An answer the client could not read as S3 describes it.
public struct S3ProtocolError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
