import Foundation
import ItemModel
import SyncAPI
import Testing
import TestSupport

@Suite struct MetricsTests {
    @Test("GET /metrics is Prometheus text, without a token; its counters move with requests and content, its gauges with the log and the content kept")
    func metricsMove() async throws {
        try await withLive { live in
            let before = try await Self.scrape(live.anonymous)
            let content = Data(repeating: 7, count: 100_000)
            let digest = try await live.alice.uploadBlob(content)
            #expect(try await live.alice.send(.GET, APIPath.blob(digest)).body == content)
            #expect(try await live.anonymous.send(.GET, "/v1/containers").status == 401)
            let after = try await Self.scrape(live.anonymous)

            let received = "ubiq_server_content_received_bytes_total", sent = "ubiq_server_content_sent_bytes_total"
            #expect(after.value(received) - before.value(received) == Double(content.count))
            #expect(after.value(sent) - before.value(sent) == Double(content.count))
            let put = ["http_route": "/v1/blobs/{digest}", "http_request_method": "PUT", "http_response_status_code": "201"]
            #expect(after.value("hb_requests", put) - before.value("hb_requests", put) == 1)
            #expect(after.value("http_server_request_duration_count", put) >= 1)
            #expect(after.value("hb_requests", ["http_response_status_code": "401"]) >= 1, "refusals are counted with their status")
            #expect(after.types["ubiq_server_push_streams"] == "gauge")
            let stored = "ubiq_server_content_stored_bytes", entries = "ubiq_server_change_log_entries"
            #expect(after.value(stored) - before.value(stored) == Double(content.count), "new content is kept once")

            _ = try await live.alice.createFile(.default, name: "a", content: content)
            let oneFile = try await Self.scrape(live.anonymous)
            _ = try await live.alice.createFile(.default, name: "b", content: content)
            let twoFiles = try await Self.scrape(live.anonymous)
            #expect(twoFiles.value(entries) - oneFile.value(entries) == 1, "one item, one entry")
            #expect(twoFiles.value(stored) == oneFile.value(stored), "the same content is not counted twice")
        }
    }

    @Test("--metrics-listen serves /metrics on an address of its own, and the API's address then has no such route")
    func metricsOnTheirOwnAddress() async throws {
        try await withServer(extraArguments: ["--metrics-listen", "127.0.0.1:0"]) { server in
            var address = ""
            try await eventually("the server to say where its metrics are") {
                address = server.printed().split(separator: "\n").first { $0.hasPrefix("ubiq-server metrics on ") }.map { String($0.dropFirst(23)) } ?? ""
                return !address.isEmpty
            }
            let metrics = try await Self.scrape(TestHTTP(baseURL: "http://" + address))
            #expect(metrics.types["ubiq_server_change_log_entries"] == "gauge")
            #expect(try await TestHTTP(baseURL: server.baseURL).send(.GET, "/metrics").status == 404)
        }
    }

    @Test("the reader refuses what is not Prometheus text")
    func readerRefuses() throws {
        #expect(throws: TestSupportError.self) { try PrometheusText("a_total 1") }  // no TYPE before it
        #expect(throws: TestSupportError.self) { try PrometheusText("# TYPE a counter\na{x=1} 1") }
        #expect(throws: TestSupportError.self) { try PrometheusText("# TYPE a counter\na one") }
        #expect(try PrometheusText("# TYPE a counter\na{x=\"1\",y=\"q\\\"\"} 2\n").value("a", ["y": "q\\\""]) == 2)
    }

    static func scrape(_ http: TestHTTP) async throws -> PrometheusText {
        let r = try await http.send(.GET, "/metrics")
        try #require(r.status == 200 && r.headers.first(name: "Content-Type")?.hasPrefix("text/plain; version=0.0.4") == true)
        return try PrometheusText(r.text)
    }
}
