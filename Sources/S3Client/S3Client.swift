import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOHTTP1

/// The S3 REST operations ubiq needs, over AsyncHTTPClient, each request signed with SigV4.
///
/// Payload hashes: a body the client holds in memory (a part, an XML document, a small object)
/// is signed with its SHA-256, so that the service checks the bytes it got against the
/// signature; a body streamed as it is read (`putObject(_:length:body:)`) cannot be hashed
/// before its headers go, and is sent as `UNSIGNED-PAYLOAD` (its integrity in transit is then
/// TLS's, and the caller's own digest check's).
public final class S3Client: Sendable {
    public let configuration: S3Configuration
    let signer: SigV4Signer
    let http: HTTPClient
    /// The longest an answer's XML may be; a list page of 1,000 keys is a few hundred KiB.
    static let maxDocument = 16 << 20

    /// `http` stays the caller's to shut down; by default the process-wide shared client.
    public init(_ configuration: S3Configuration, http: HTTPClient = .shared) {
        self.configuration = configuration
        self.signer = SigV4Signer(credentials: configuration.credentials, region: configuration.region)
        self.http = http
    }

    // MARK: Objects

    /// Stores `bytes` as `key`, signed with their hash (`payloadHash` when the caller has it).
    public func putObject(_ key: String, bytes: ByteBuffer, payloadHash: String? = nil) async throws {
        let hash = payloadHash ?? Self.sha256Hex(bytes)
        let response = try await send("PUT", key: key, body: .bytes(bytes), payloadHash: hash)
        try await expectSuccess(response)
    }

    /// Stores `length` bytes that `body` yields as `key`, streamed: never all in memory.
    public func putObject<Body: AsyncSequence & Sendable>(_ key: String, length: Int64, body: Body) async throws where Body.Element == ByteBuffer {
        let response = try await send("PUT", key: key, body: .stream(body, length: .known(length)), payloadHash: SigV4Signer.unsignedPayload)
        try await expectSuccess(response)
    }

    /// What a HEAD says of an object; nil when there is none.
    public func headObject(_ key: String) async throws -> S3ObjectInfo? {
        let response = try await send("HEAD", key: key)
        if response.status == .notFound { return nil }
        try await check(response)
        guard let length = response.headers.first(name: "content-length").flatMap(Int64.init) else {
            throw S3ProtocolError("HEAD \(key): no Content-Length")
        }
        return S3ObjectInfo(key: key, size: length, lastModified: response.headers.first(name: "last-modified").flatMap(Self.httpDate), etag: response.headers.first(name: "etag"))
    }

    /// An object, or the bytes `range` of it, as its body arrives: the caller reads
    /// `object.body` chunk by chunk, and only what it has not read yet is in flight.
    public func getObject(_ key: String, range: ClosedRange<Int64>? = nil) async throws -> S3ObjectStream {
        let headers = range.map { [("range", "bytes=\($0.lowerBound)-\($0.upperBound)")] } ?? []
        let response = try await send("GET", key: key, headers: headers)
        try await check(response)
        let length = response.headers.first(name: "content-length").flatMap(Int64.init)
        if let range, response.status != .partialContent {
            throw S3ProtocolError("GET \(key) bytes \(range): answered \(response.status.code) instead of 206")
        }
        return S3ObjectStream(contentLength: length, body: response.body)
    }

    /// Deletes `key`; deleting an object that is not there succeeds, as S3 answers it.
    public func deleteObject(_ key: String) async throws {
        let response = try await send("DELETE", key: key)
        try await expectSuccess(response)
    }

    /// Copies `source` (a key of this bucket) to `key`, on the service's side. S3 copies up to
    /// 5 GiB this way; beyond, `uploadPartCopy`.
    public func copyObject(from source: String, to key: String) async throws {
        let response = try await send("PUT", key: key, headers: [("x-amz-copy-source", copySource(source))])
        // A copy can fail after its 200 was sent: the error is then the body.
        _ = try await document(response, expecting: "CopyObjectResult")
    }

    // MARK: Multipart uploads

    public func createMultipartUpload(_ key: String) async throws -> String {
        let response = try await send("POST", key: key, query: [("uploads", "")])
        let result = try await document(response, expecting: "InitiateMultipartUploadResult")
        guard let id = result["UploadId"], !id.isEmpty else { throw S3ProtocolError("CreateMultipartUpload \(key): no UploadId") }
        return id
    }

    /// Uploads part `number` (1…10,000); returns its ETag, for `completeMultipartUpload`.
    public func uploadPart(_ key: String, uploadID: String, number: Int, bytes: ByteBuffer) async throws -> String {
        let response = try await send(
            "PUT", key: key, query: [("partNumber", String(number)), ("uploadId", uploadID)], body: .bytes(bytes), payloadHash: Self.sha256Hex(bytes))
        try await expectSuccess(response)
        guard let etag = response.headers.first(name: "etag") else { throw S3ProtocolError("UploadPart \(key) #\(number): no ETag") }
        return etag
    }

    /// Makes the bytes `range` of `source` part `number` of the upload, on the service's side.
    public func uploadPartCopy(_ key: String, uploadID: String, number: Int, from source: String, range: ClosedRange<Int64>) async throws -> String {
        let response = try await send(
            "PUT", key: key, query: [("partNumber", String(number)), ("uploadId", uploadID)],
            headers: [("x-amz-copy-source", copySource(source)), ("x-amz-copy-source-range", "bytes=\(range.lowerBound)-\(range.upperBound)")])
        let result = try await document(response, expecting: "CopyPartResult")
        guard let etag = result["ETag"] else { throw S3ProtocolError("UploadPartCopy \(key) #\(number): no ETag") }
        return etag
    }

    /// Makes the object of the uploaded parts visible as `key`.
    public func completeMultipartUpload(_ key: String, uploadID: String, parts: [(number: Int, etag: String)]) async throws {
        let xml = "<CompleteMultipartUpload>"
            + parts.map { "<Part>" + S3XML.element("PartNumber", String($0.number)) + S3XML.element("ETag", $0.etag) + "</Part>" }.joined()
            + "</CompleteMultipartUpload>"
        let body = ByteBuffer(string: xml)
        let response = try await send("POST", key: key, query: [("uploadId", uploadID)], body: .bytes(body), payloadHash: Self.sha256Hex(body))
        // As a copy, a completion can fail after its 200.
        _ = try await document(response, expecting: "CompleteMultipartUploadResult")
    }

    /// Drops the upload and its parts. One that is already gone is `NoSuchUpload`.
    public func abortMultipartUpload(_ key: String, uploadID: String) async throws {
        let response = try await send("DELETE", key: key, query: [("uploadId", uploadID)])
        try await expectSuccess(response)
    }

    /// The multipart uploads begun and neither completed nor aborted, under `prefix`.
    public func listMultipartUploads(prefix: String) async throws -> [S3MultipartUpload] {
        var out: [S3MultipartUpload] = []
        var markers: [(name: String, value: String)] = []
        while true {
            let response = try await send("GET", key: nil, query: [("uploads", ""), ("prefix", prefix)] + markers)
            let result = try await document(response, expecting: "ListMultipartUploadsResult")
            out += result.all("Upload").compactMap { u in
                guard let key = u["Key"], let id = u["UploadId"] else { return nil }
                return S3MultipartUpload(key: key, uploadID: id, initiated: u["Initiated"].flatMap(Self.isoDate))
            }
            guard result["IsTruncated"] == "true", let key = result["NextKeyMarker"], let id = result["NextUploadIdMarker"] else { return out }
            markers = [("key-marker", key), ("upload-id-marker", id)]
        }
    }

    // MARK: Listing and buckets

    /// One page of the keys under `prefix`, in key order; `continuation` is the previous
    /// page's `next`.
    public func listObjectsV2(prefix: String, continuation: String? = nil, maxKeys: Int = 1000) async throws -> S3ListPage {
        var query: [(name: String, value: String)] = [("list-type", "2"), ("prefix", prefix), ("max-keys", String(maxKeys))]
        if let continuation { query.append(("continuation-token", continuation)) }
        let response = try await send("GET", key: nil, query: query)
        let result = try await document(response, expecting: "ListBucketResult")
        let objects = try result.all("Contents").map { c -> S3ObjectInfo in
            guard let key = c["Key"], let size = c["Size"].flatMap(Int64.init) else { throw S3ProtocolError("ListObjectsV2: an entry without Key or Size") }
            return S3ObjectInfo(key: key, size: size, lastModified: c["LastModified"].flatMap(Self.isoDate), etag: c["ETag"])
        }
        let truncated = result["IsTruncated"] == "true"
        let next = truncated ? result["NextContinuationToken"] : nil
        if truncated && next == nil { throw S3ProtocolError("ListObjectsV2: truncated without a continuation token") }
        return S3ListPage(objects: objects, next: next)
    }

    /// Creates the bucket; one this account already owns is no error.
    public func createBucket() async throws {
        // us-east-1 is the default location and takes no configuration.
        let body = configuration.region == "us-east-1" ? nil : ByteBuffer(string:
            "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">" + S3XML.element("LocationConstraint", configuration.region) + "</CreateBucketConfiguration>")
        let response = try await send("PUT", key: nil, body: body.map { .bytes($0) }, payloadHash: body.map(Self.sha256Hex) ?? SigV4Signer.emptyPayloadHash)
        do {
            try await expectSuccess(response)
        } catch let error as S3Error where error.code == "BucketAlreadyOwnedByYou" {}
    }

    /// Deletes the bucket, which must be empty.
    public func deleteBucket() async throws {
        let response = try await send("DELETE", key: nil)
        try await expectSuccess(response)
    }

    // MARK: Requests

    func copySource(_ key: String) -> String {
        "/" + S3Path.encode(configuration.bucket, keepingSlashes: false) + "/" + S3Path.encode(key, keepingSlashes: true)
    }

    /// Signs and sends one request; the answer's body is left to the caller to read.
    func send(
        _ method: String, key: String?, query: [(name: String, value: String)] = [], headers extra: [(String, String)] = [],
        body: HTTPClientRequest.Body? = nil, payloadHash: String = SigV4Signer.emptyPayloadHash, timeout: TimeAmount = .minutes(10)
    ) async throws -> HTTPClientResponse {
        let path = configuration.path(of: key)
        var headers: [(name: String, value: String)] = [("host", configuration.host)] + extra.map { (name: $0.0, value: $0.1) }
        let now = Date()
        headers.append(("x-amz-date", SigV4Signer.timestamps(now).amzDate))
        headers.append(("x-amz-content-sha256", payloadHash))
        if let token = configuration.credentials.sessionToken { headers.append(("x-amz-security-token", token)) }
        let signed = signer.sign(.init(method: method, encodedPath: path, query: query, headers: headers, payloadHash: payloadHash), at: now)
        let encodedQuery = query.map { S3Path.encode($0.name, keepingSlashes: false) + "=" + S3Path.encode($0.value, keepingSlashes: false) }.joined(separator: "&")
        var request = HTTPClientRequest(url: "\(configuration.endpoint.scheme ?? "https")://\(configuration.host)\(path)" + (encodedQuery.isEmpty ? "" : "?" + encodedQuery))
        request.method = HTTPMethod(rawValue: method)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        request.headers.add(name: "authorization", value: signed.authorization)
        if let body { request.body = body } else if method == "PUT" || method == "POST" { request.body = .bytes(ByteBuffer()) }
        return try await http.execute(request, timeout: timeout)
    }

    /// Throws the answer's error unless it is a success; reads the body of a failure only.
    func check(_ response: HTTPClientResponse) async throws {
        guard (200..<300).contains(response.status.code) else { throw try await failure(response) }
    }

    /// `check`, then reads what body a success has, so that its connection serves the next request.
    func expectSuccess(_ response: HTTPClientResponse) async throws {
        try await check(response)
        _ = try await response.body.collect(upTo: Self.maxDocument)
    }

    func failure(_ response: HTTPClientResponse) async throws -> S3Error {
        let status = Int(response.status.code)
        let body = (try? await response.body.collect(upTo: 1 << 20)) ?? ByteBuffer()
        return S3Error(status: status, body: Data(body.readableBytesView))
            ?? S3Error(code: "HTTP\(status)", message: String(decoding: body.readableBytesView.prefix(200), as: UTF8.self), status: status)
    }

    /// The XML answer of a success, whose root must be `root`; an `Error` document (which a
    /// copy or a completion may send with its 200) is thrown.
    func document(_ response: HTTPClientResponse, expecting root: String) async throws -> S3XML {
        try await check(response)
        let body = try await response.body.collect(upTo: Self.maxDocument)
        let data = Data(body.readableBytesView)
        if let error = S3Error(status: Int(response.status.code), body: data) { throw error }
        let document = try S3XML.parse(data)
        guard document.name == root else { throw S3ProtocolError("expected <\(root)>, got <\(document.name)>") }
        return document
    }

    static func sha256Hex(_ bytes: ByteBuffer) -> String {
        bytes.withUnsafeReadableBytes { SigV4Signer.hex(SHA256.hash(data: $0)) }
    }

    /// `2009-10-12T17:50:30.000Z` or without fractions.
    static func isoDate(_ text: String) -> Date? {
        let withFractions = Date.ISO8601FormatStyle(includingFractionalSeconds: true)
        return (try? withFractions.parse(text)) ?? (try? Date.ISO8601FormatStyle().parse(text))
    }

    /// `Wed, 12 Oct 2009 17:50:00 GMT`.
    static func httpDate(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        return formatter.date(from: text)
    }
}

/// An object as a HEAD or a listing describes it.
public struct S3ObjectInfo: Sendable, Equatable {
    public var key: String
    public var size: Int64
    /// To the second with most services (AWS lists milliseconds).
    public var lastModified: Date?
    public var etag: String?
}

public struct S3MultipartUpload: Sendable, Equatable {
    public var key: String
    public var uploadID: String
    public var initiated: Date?
}

public struct S3ListPage: Sendable {
    public var objects: [S3ObjectInfo]
    /// The continuation token of the next page; nil on the last.
    public var next: String?
}

/// An object's bytes as they arrive: iterate `body` once.
public struct S3ObjectStream: Sendable {
    public var contentLength: Int64?
    public var body: HTTPClientResponse.Body
}
