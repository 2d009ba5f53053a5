import Crypto
import Foundation
import Testing
@testable import S3Client

/// The signer against AWS's published examples: the canonical request, the string to sign and
/// the signature, each compared whole.
@Suite struct SigV4SignerTests {
    /// The S3 API reference's examples ("Signature Calculations for the Authorization Header:
    /// Transferring Payload in a Single Chunk"): its example key, bucket and day.
    static let s3Example = SigV4Signer(
        credentials: S3Credentials(accessKeyID: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"), region: "us-east-1")
    /// 2013-05-24T00:00:00Z.
    static let s3Day = Date(timeIntervalSince1970: 1_369_353_600)
    static let emptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

    @Test func theEmptyPayloadHashIsSHA256OfNothing() {
        #expect(SigV4Signer.emptyPayloadHash == Self.emptyHash)
        #expect(SigV4Signer.timestamps(Self.s3Day) == ("20130524T000000Z", "20130524"))
    }

    @Test func s3GetObjectWithARange() {
        let signed = Self.s3Example.sign(.init(
            method: "GET", encodedPath: "/test.txt",
            headers: [("Host", "examplebucket.s3.amazonaws.com"), ("Range", "bytes=0-9"), ("x-amz-content-sha256", Self.emptyHash), ("x-amz-date", "20130524T000000Z")],
            payloadHash: Self.emptyHash), at: Self.s3Day)
        #expect(signed.canonicalRequest == """
            GET
            /test.txt

            host:examplebucket.s3.amazonaws.com
            range:bytes=0-9
            x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
            x-amz-date:20130524T000000Z

            host;range;x-amz-content-sha256;x-amz-date
            e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
            """)
        #expect(signed.stringToSign == """
            AWS4-HMAC-SHA256
            20130524T000000Z
            20130524/us-east-1/s3/aws4_request
            7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972
            """)
        #expect(signed.signature == "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
        #expect(signed.authorization == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
            + "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    }

    /// A key with `$`, which the path encodes, and a body signed with its hash.
    @Test func s3PutObject() {
        let body = "Welcome to Amazon S3."
        let hash = SigV4Signer.hex(SHA256.hash(data: Data(body.utf8)))
        #expect(hash == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072")
        let config = S3Configuration(
            endpoint: URL(string: "https://s3.amazonaws.com")!, region: "us-east-1", bucket: "examplebucket", addressing: .virtualHosted,
            credentials: Self.s3Example.credentials)
        #expect(config.host == "examplebucket.s3.amazonaws.com")
        let signed = Self.s3Example.sign(.init(
            method: "PUT", encodedPath: config.path(of: "test$file.text"),
            headers: [
                ("Host", config.host), ("Date", "Fri, 24 May 2013 00:00:00 GMT"), ("x-amz-date", "20130524T000000Z"),
                ("x-amz-storage-class", "REDUCED_REDUNDANCY"), ("x-amz-content-sha256", hash),
            ],
            payloadHash: hash), at: Self.s3Day)
        #expect(signed.canonicalRequest == """
            PUT
            /test%24file.text

            date:Fri, 24 May 2013 00:00:00 GMT
            host:examplebucket.s3.amazonaws.com
            x-amz-content-sha256:44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072
            x-amz-date:20130524T000000Z
            x-amz-storage-class:REDUCED_REDUNDANCY

            date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class
            44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072
            """)
        #expect(signed.stringToSign.hasSuffix("\n9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d"))
        #expect(signed.signature == "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd")
    }

    /// A parameter without a value (`?lifecycle`) is `lifecycle=`.
    @Test func s3GetBucketLifecycle() {
        let signed = Self.s3Example.sign(.init(
            method: "GET", encodedPath: "/", query: [("lifecycle", "")],
            headers: [("Host", "examplebucket.s3.amazonaws.com"), ("x-amz-date", "20130524T000000Z"), ("x-amz-content-sha256", Self.emptyHash)],
            payloadHash: Self.emptyHash), at: Self.s3Day)
        #expect(signed.canonicalRequest.split(separator: "\n", omittingEmptySubsequences: false)[2] == "lifecycle=")
        #expect(signed.stringToSign.hasSuffix("\n9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca"))
        #expect(signed.signature == "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543")
    }

    /// Query parameters are sorted by name.
    @Test func s3ListObjects() {
        let signed = Self.s3Example.sign(.init(
            method: "GET", encodedPath: "/", query: [("prefix", "J"), ("max-keys", "2")],
            headers: [("Host", "examplebucket.s3.amazonaws.com"), ("x-amz-date", "20130524T000000Z"), ("x-amz-content-sha256", Self.emptyHash)],
            payloadHash: Self.emptyHash), at: Self.s3Day)
        #expect(signed.canonicalRequest.split(separator: "\n", omittingEmptySubsequences: false)[2] == "max-keys=2&prefix=J")
        #expect(signed.stringToSign.hasSuffix("\ndf57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7"))
        #expect(signed.signature == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")
    }

    // The aws-sig-v4-test-suite (service "service", 2015-08-30T12:36:00Z, key AKIDEXAMPLE).
    static let suite = SigV4Signer(
        credentials: S3Credentials(accessKeyID: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"), region: "us-east-1", service: "service")
    static let suiteTime = Date(timeIntervalSince1970: 1_440_938_160)
    static let suiteHeaders = [("Host", "example.amazonaws.com"), ("X-Amz-Date", "20150830T123600Z")]

    @Test func suiteGetVanilla() {
        let signed = Self.suite.sign(.init(method: "GET", encodedPath: "/", headers: Self.suiteHeaders, payloadHash: Self.emptyHash), at: Self.suiteTime)
        #expect(signed.canonicalRequest == """
            GET
            /

            host:example.amazonaws.com
            x-amz-date:20150830T123600Z

            host;x-amz-date
            e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
            """)
        #expect(signed.stringToSign == """
            AWS4-HMAC-SHA256
            20150830T123600Z
            20150830/us-east-1/service/aws4_request
            bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63
            """)
        #expect(signed.signature == "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31")
        #expect(signed.authorization == "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
            + "SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31")
    }

    @Test func suiteGetVanillaQueryOrderKeyCase() {
        let signed = Self.suite.sign(.init(
            method: "GET", encodedPath: "/", query: [("Param2", "value2"), ("Param1", "value1")], headers: Self.suiteHeaders, payloadHash: Self.emptyHash),
            at: Self.suiteTime)
        #expect(signed.canonicalRequest.split(separator: "\n", omittingEmptySubsequences: false)[2] == "Param1=value1&Param2=value2")
        #expect(signed.stringToSign.hasSuffix("\n816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0"))
        #expect(signed.signature == "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500")
    }

    @Test func suiteGetUnreserved() {
        let path = "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
        #expect(S3Path.encode(path, keepingSlashes: true) == path, "unreserved characters stay as they are")
        let signed = Self.suite.sign(.init(method: "GET", encodedPath: path, headers: Self.suiteHeaders, payloadHash: Self.emptyHash), at: Self.suiteTime)
        #expect(signed.stringToSign.hasSuffix("\n6a968768eefaa713e2a6b16b589a8ea192661f098f37349f4e2c0082757446f9"))
        #expect(signed.signature == "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f")
    }

    @Test func suiteGetVanillaWithSessionToken() {
        let token = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"
        let signed = Self.suite.sign(.init(
            method: "GET", encodedPath: "/", headers: Self.suiteHeaders + [("X-Amz-Security-Token", token)], payloadHash: Self.emptyHash), at: Self.suiteTime)
        #expect(signed.signedHeaders == "host;x-amz-date;x-amz-security-token")
        #expect(signed.stringToSign.hasSuffix("\n067b36aa60031588cea4a4cde1f21215227a047690c72247f1d70b32fbbfad2b"))
        #expect(signed.signature == "07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8")
    }

    @Test func pathsAndQueriesEncodeEverythingButUnreservedCharacters() {
        #expect(S3Path.encode("a b/c+d=é", keepingSlashes: true) == "a%20b/c%2Bd%3D%C3%A9")
        #expect(S3Path.encode("a/b", keepingSlashes: false) == "a%2Fb")
        let path = S3Configuration(
            endpoint: URL(string: "http://127.0.0.1:8333")!, region: "us-east-1", bucket: "ubiq", addressing: .path, credentials: Self.s3Example.credentials)
        #expect(path.host == "127.0.0.1:8333" && path.path(of: "blobs/x y") == "/ubiq/blobs/x%20y" && path.path(of: nil) == "/ubiq")
    }
}
