import SyncClient
import Testing

@Suite struct ServerURLTests {
    @Test func theFormsAUserWritesAreKeptAsWritten() {
        #expect(ServerURL.normalized("http://127.0.0.1:8420/") == "http://127.0.0.1:8420")
        #expect(ServerURL.normalized("https://cloud.example.org") == "https://cloud.example.org")
        #expect(ServerURL.normalized("unix:/home/a/.local/share/ubiq/server/server.sock") == "unix:/home/a/.local/share/ubiq/server/server.sock")
    }

    @Test func othersAreRefused() {
        for text in ["localhost:8420", "ftp://h", "http://", "unix:relative.sock", "unix:", "/tmp/s.sock"] {
            #expect(ServerURL.normalized(text) == nil, "\(text)")
        }
    }

    @Test func aSocketBecomesTheHTTPClientsForm() {
        #expect(ServerURL.requestBase("unix:/tmp/a b/s.sock") == "http+unix://%2Ftmp%2Fa%20b%2Fs.sock")
        #expect(ServerURL.requestBase("http://127.0.0.1:8420") == "http://127.0.0.1:8420")
    }
}
