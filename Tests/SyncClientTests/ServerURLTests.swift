import SyncClient
import Testing

@Suite struct ServerURLTests {
    @Test func theFormsAUserWritesAreKeptAsWritten() {
        #expect(ServerURL.normalized("http://127.0.0.1:8420/") == "http://127.0.0.1:8420")
        #expect(ServerURL.normalized("https://cloud.example.org") == "https://cloud.example.org")
        #expect(ServerURL.normalized("unix:/home/a/.local/share/ubiq/server/server.sock") == "unix:/home/a/.local/share/ubiq/server/server.sock")
    }

    @Test func severalReplicasAreOneTextAndEachAnAddress() {
        let list = "https://a.example.org/,https://b.example.org:8443"
        #expect(ServerURL.normalized(list) == "https://a.example.org,https://b.example.org:8443")
        #expect(ServerURL.addresses("https://a.example.org,https://b.example.org:8443") == ["https://a.example.org", "https://b.example.org:8443"])
        #expect(ServerURL.addresses("unix:/tmp/a,b.sock") == ["unix:/tmp/a,b.sock"], "a socket's path is one address, commas and all")
        #expect(ServerTrust().refusal(of: "https://a.example.org,http://b.example.org")?.hasPrefix("http://b.example.org is plain http") == true)
        #expect(ServerTrust().refusal(of: "http://127.0.0.1:1,http://127.0.0.2:2") == nil)
    }

    @Test func othersAreRefused() {
        for text in ["localhost:8420", "ftp://h", "http://", "unix:relative.sock", "unix:", "/tmp/s.sock", "http://a,", ",http://a", "http://a,ftp://b"] {
            #expect(ServerURL.normalized(text) == nil, "\(text)")
        }
    }

    @Test func aSocketBecomesTheHTTPClientsForm() {
        #expect(ServerURL.requestBase("unix:/tmp/a b/s.sock") == "http+unix://%2Ftmp%2Fa%20b%2Fs.sock")
        #expect(ServerURL.requestBase("http://127.0.0.1:8420") == "http://127.0.0.1:8420")
    }
}
