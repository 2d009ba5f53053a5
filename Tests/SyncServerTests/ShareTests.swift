import Foundation
import ItemModel
import SyncAPI
import Testing
import TestSupport
@testable import SyncServer

@Suite struct ShareTests {
    static func share(_ http: TestHTTP, _ id: ItemID, expires: Timestamp? = nil) async throws -> ShareInfo {
        let r = try await http.json(.POST, APIPath.shares(.default), CreateShareRequest(itemID: id, expires: expires))
        try #require(r.status == 201, "\(r.status) \(r.text)")
        return try r.decode()
    }

    @Test("a shared file serves its bytes as they were when shared, with its type, name, ETag and ranges, to anyone with the link; edits and deletes do not leak into it")
    func sharedFile() async throws {
        try await withLive { live in
            let content = Data("first version of the report\n".utf8)
            let file = try await live.alice.createFile(.default, name: "report.txt", content: content)
            let info = try await Self.share(live.alice, file.id)
            #expect(info.path == "/s/" + info.token && info.name == "report.txt" && info.files == 1 && info.size == Int64(content.count))
            #expect(info.token.utf8.count >= 22, "at least 128 random bits")
            #expect(!info.path.contains(file.id.rawValue) && !info.path.contains("alice"), "the link names no item and no account")

            let r = try await live.anonymous.send(.GET, info.path)
            #expect(r.status == 200 && r.body == content)
            #expect(r.headers.first(name: "Content-Type") == "text/plain; charset=utf-8")
            #expect(r.headers.first(name: "Content-Length") == String(content.count))
            #expect(r.headers.first(name: "ETag") == "\"\(sha256(content).hex)\"")
            #expect(r.headers.first(name: "Content-Disposition") == "attachment; filename=\"report.txt\"; filename*=UTF-8''report.txt")
            #expect(r.headers.first(name: "X-Content-Type-Options") == "nosniff" && r.headers.first(name: "Referrer-Policy") == "no-referrer")
            let part = try await live.anonymous.send(.GET, info.path, headers: [("Range", "bytes=6-12")])
            #expect(part.status == 206 && part.body == content[6...12] && part.headers.first(name: "Content-Range") == "bytes 6-12/\(content.count)")
            #expect(try await live.anonymous.send(.GET, info.path, headers: [("Range", "bytes=500-")]).status == 416)
            #expect(try await live.anonymous.send(.GET, info.path + "/report.txt").status == 404, "a shared file has nothing below it")

            // Edited, then deleted: the link still serves what was shared.
            let digest = try await live.alice.uploadBlob(Data("second version".utf8))
            let edited = try await live.alice.json(.PUT, APIPath.content(.default, file.id), UpdateContentRequest(baseRevision: file.revision, digest: digest))
            try #require(edited.status == 200, "\(edited.text)")
            #expect(try await live.anonymous.send(.GET, info.path).body == content)
            let current: ItemMetadata = try edited.decode()
            #expect(try await live.alice.send(.DELETE, APIPath.item(.default, file.id) + "?baseRevision=\(current.revision.rawValue)").status == 200)
            #expect(try await live.anonymous.send(.GET, info.path).body == content)

            let listed: ShareList = try await live.alice.send(.GET, APIPath.shares(.default)).decode()
            #expect(listed.shares.map(\.token) == [info.token] && listed.shares[0].downloads == 5, "\(listed.shares)")

            // Killed and started again: the share and its content are still there.
            try await live.server.restart(samePort: true)
            #expect(try await live.anonymous.send(.GET, info.path).body == content, "a share survives a restart of the server")
        }
    }

    @Test("unshared, guessed and other accounts' tokens are 404 alike; an expired share is 410; an expiry in the past is refused")
    func notFoundAndExpired() async throws {
        try await withLive { live in
            let file = try await live.alice.createFile(.default, name: "a.txt", content: Data("a".utf8))
            let info = try await Self.share(live.alice, file.id)
            #expect(try await live.bob.send(.DELETE, APIPath.share(.default, token: info.token)).status == 404, "bob cannot remove alice's share")
            _ = try await live.bob.createFolder(.default, name: "bobs")
            let bobs: ShareList = try await live.bob.send(.GET, APIPath.shares(.default)).decode()
            #expect(bobs.shares.isEmpty)
            #expect(try await live.anonymous.send(.GET, info.path).status == 200)
            #expect(try await live.alice.send(.DELETE, APIPath.share(.default, token: info.token)).status == 204)
            let gone = try await live.anonymous.send(.GET, info.path)
            let guessed = try await live.anonymous.send(.GET, APIPath.publicShare(String(info.token.reversed())))
            #expect(gone.status == 404 && guessed.status == 404 && gone.error == guessed.error, "nothing tells a removed token from one never made")

            let soon = WallClock.now() + 1_500_000_000
            let expiring = try await Self.share(live.alice, file.id, expires: soon)
            // Served until its time (a loaded machine may reach here only after it).
            let early = try await live.anonymous.send(.GET, expiring.path).status
            #expect(early == 200 || (early == 410 && WallClock.now() >= soon), "\(early)")
            try await eventually(timeout: .seconds(10), "the share to expire") { try await live.anonymous.send(.GET, expiring.path).status == 410 }
            let past = try await live.alice.json(.POST, APIPath.shares(.default), CreateShareRequest(itemID: file.id, expires: WallClock.now() - 1))
            #expect(past.status == 400)
        }
    }

    @Test("a name with spaces, quotes, markup and letters beyond ASCII downloads under its true name and shows escaped on the page")
    func namesSurvive() async throws {
        try await withLive { live in
            let name = "Q3 \"final\" <script>alert(1)<img src=x onerror=alert(1)> Übersicht ☃.txt"
            let file = try await live.alice.createFile(.default, name: name, content: Data("x".utf8))
            let info = try await Self.share(live.alice, file.id)
            let r = try await live.anonymous.send(.GET, info.path)
            let disposition = try #require(r.headers.first(name: "Content-Disposition"))
            let encoded = try #require(disposition.components(separatedBy: "filename*=UTF-8''").last)
            #expect(encoded.removingPercentEncoding == name, "\(disposition)")
            #expect(disposition.allSatisfy(\.isASCII) && disposition.hasPrefix("attachment; filename=\"Q3 _final_ <script>alert(1)<img src=x onerror=alert(1)> _bersicht _.txt\""),
                    "\(disposition)")

            let page = try await live.anonymous.send(.GET, info.path, headers: [("Accept", "text/html,application/xhtml+xml")])
            #expect(page.status == 200 && page.headers.first(name: "Content-Type") == "text/html; charset=utf-8")
            #expect(page.text.contains("&lt;script&gt;alert(1)&lt;img src=x onerror=alert(1)&gt;") && !page.text.contains("<img") && !page.text.contains("<script"),
                    "\(page.text.prefix(600))")
            #expect(page.text.contains("&quot;final&quot;") && page.text.contains("Übersicht ☃"))
            #expect(page.text.contains("href=\"?download=1\""))
            #expect(page.headers.first(name: "Content-Security-Policy")?.contains("default-src 'none'") == true)
            let download = try await live.anonymous.send(.GET, info.path + "?download=1", headers: [("Accept", "text/html")])
            #expect(download.body == Data("x".utf8), "the page's link downloads the bytes")
        }
    }

    @Test("a shared folder lists the files below it, each downloads on its own or all as one zip, and its page lists them; links and other paths are not reachable")
    func sharedFolder() async throws {
        try await withLive { live in
            let folder = try await live.alice.createFolder(.default, name: "Trip")
            let day = try await live.alice.createFolder(.default, parent: folder.id, name: "day 1")
            _ = try await live.alice.createFile(.default, parent: folder.id, name: "notes.md", content: Data("# notes".utf8))
            _ = try await live.alice.createFile(.default, parent: day.id, name: "photo ü.jpg", content: Data(repeating: 9, count: 3000))
            _ = try await live.alice.json(.POST, APIPath.items(.default), CreateItemRequest(parentID: folder.id, name: "link", kind: .symlink, target: "notes.md"))
            let elsewhere = try await live.alice.createFile(.default, name: "private.txt", content: Data("secret".utf8))
            let info = try await Self.share(live.alice, folder.id)
            #expect(info.kind == .folder && info.files == 2 && info.size == 3007)

            let listing: ShareListing = try await live.anonymous.send(.GET, info.path).decode()
            #expect(listing.name == "Trip" && listing.files.map(\.path) == ["day 1/photo ü.jpg", "notes.md"])
            let photo = try await live.anonymous.send(.GET, info.path + "/day%201/photo%20%C3%BC.jpg")
            #expect(photo.status == 200 && photo.body == Data(repeating: 9, count: 3000) && photo.headers.first(name: "Content-Type") == "image/jpeg")
            #expect(try await live.anonymous.send(.GET, info.path + "/notes.md").body == Data("# notes".utf8))
            for path in ["/link", "/day%201", "/../private.txt", "/%2E%2E/private.txt", "/" + elsewhere.id.rawValue] {
                #expect(try await live.anonymous.send(.GET, info.path + path).status == 404, "\(path)")
            }
            let zip = try await live.anonymous.send(.GET, info.path + "?download=zip")
            #expect(zip.status == 200 && zip.headers.first(name: "Content-Type") == "application/zip")
            #expect(try await ZipStreamTests.unpacked(zip.body) == [
                "day 1/photo ü.jpg": sha256(Data(repeating: 9, count: 3000)).hex, "notes.md": sha256(Data("# notes".utf8)).hex,
            ])
            let page = try await live.anonymous.send(.GET, info.path, headers: [("Accept", "text/html")])
            #expect(page.text.contains("href=\"?download=zip\""))
            #expect(page.text.contains("day 1/photo ü.jpg") && page.text.contains("href=\"\(info.token)/day%201/photo%20%C3%BC.jpg?download=1\""), "\(page.text)")
        }
    }
}

@Suite struct ShareContentTests {
    @Test("a share holds its contents: collecting what nothing names keeps them after the item and its versions are gone")
    func sharesKeepTheirContents() async throws {
        let server = try await InMemoryServer()
        let remote = server.connect()
        let other = ServerView(remote).otherDevice
        let file = try await other.createFile("kept.bin", content: Array(repeating: 5, count: 400_000))
        let container = try await server.service.container(.default, of: server.account)
        let info = try await container.share(CreateShareRequest(itemID: file.id))
        _ = try await other.updateContent(file.id, to: Array(repeating: 6, count: 400_000))
        let current = try await container.item(file.id)
        _ = try await container.deleteItem(file.id, base: current.revision, recursive: false)
        try await server.collectEverythingUnnamed()
        let share = try await server.service.publicShare(info.token)
        let reader = try await server.service.openContent(share.entries[0].digest)
        defer { reader.close() }
        #expect(reader.size == 400_000)
    }
}

/// The page as a browser renders it: headless Chromium (Debian's `chromium`, which
/// `scripts/test` installs) loads it, its DOM is checked, and screenshots at a desktop's and a
/// phone's width are kept in `.build/test-output/` for a person to look at.
@Suite(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/chromium"), "needs Debian's chromium"))
struct SharePageInBrowserTests {
    static let outputFolder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../.build/test-output").standardized.path

    static func chromium(_ arguments: [String], profile: String) async throws -> (status: Int32, stdout: String, stderr: String) {
        try await run("/usr/bin/chromium", ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run", "--user-data-dir=" + profile] + arguments, timeout: .seconds(90))
    }

    @Test("Chromium renders the page: the name (escaped), the size and a download link that fetches the bytes; screenshots at desktop and phone widths")
    func pageInChromium() async throws {
        try await withLive { live in
            let name = "Budget <2027> & \"plans\" Überblick.txt"
            let content = Data(repeating: 65, count: 12_345)
            let file = try await live.alice.createFile(.default, name: name, content: content)
            let info = try await ShareTests.share(live.alice, file.id)
            let url = live.server.baseURL + info.path
            let profile = try TempDirectory("ubiq-chromium")
            defer { profile.remove() }

            let dom = try await Self.chromium(["--dump-dom", url], profile: profile.path)
            try #require(dom.status == 0, "chromium: \(dom.stderr.suffix(500))")
            #expect(dom.stdout.contains("<h1>Budget &lt;2027&gt; &amp; \"plans\" Überblick.txt</h1>"), "\(dom.stdout.prefix(800))")
            #expect(dom.stdout.contains("12 kB"))
            #expect(!dom.stdout.contains("<2027>"), "the name is text, not markup")
            let link = try #require(dom.stdout.firstMatch(of: /<a class="download" id="download" href="([^"]+)"/)?.1, "a download link in \(dom.stdout.prefix(800))")
            let download = try await live.anonymous.send(.GET, info.path + String(link).replacingOccurrences(of: "&amp;", with: "&"), headers: [("Accept", "text/html")])
            #expect(download.status == 200 && download.body == content, "the link downloads the file")

            let folder = try await live.alice.createFolder(.default, name: "Holiday 2026")
            for n in ["beach <1>.jpg", "a much longer name of a photo taken on the second day of the trip.jpg", "notes.md"] {
                _ = try await live.alice.createFile(.default, parent: folder.id, name: n, content: Data(repeating: 1, count: 2_500_000))
            }
            let folderURL = live.server.baseURL + (try await ShareTests.share(live.alice, folder.id)).path
            let folderDOM = try await Self.chromium(["--dump-dom", folderURL], profile: profile.path)
            #expect(folderDOM.stdout.contains("beach &lt;1&gt;.jpg") && folderDOM.stdout.contains("Download all (zip)") && folderDOM.stdout.contains("3 files"),
                    "\(folderDOM.stdout.prefix(1200))")

            try FileManager.default.createDirectory(atPath: Self.outputFolder, withIntermediateDirectories: true)
            for (page, address) in [("file", url), ("folder", folderURL)] {
                for (label, size) in [("desktop", "1280,800"), ("phone", "390,844")] {
                    let shot = Self.outputFolder + "/share-\(page)-\(label).png"
                    try? FileManager.default.removeItem(atPath: shot)
                    let r = try await Self.chromium(["--window-size=" + size, "--screenshot=" + shot, address], profile: profile.path)
                    #expect(r.status == 0 && FileManager.default.fileExists(atPath: shot), "\(shot): \(r.stderr.suffix(300))")
                }
            }
        }
    }
}

@Suite struct ShareRateTests {
    @Test("share fetches past --share-rate a minute from one address get 429 with Retry-After")
    func fetchesAreLimited() async throws {
        try await withLive(extraArguments: ["--share-rate", "5"]) { live in
            let file = try await live.alice.createFile(.default, name: "a.txt", content: Data("a".utf8))
            let info = try await ShareTests.share(live.alice, file.id)
            // A burst of 5 goes through; the bucket refills one fetch per 12 s, so on a slow
            // machine a fetch or two more may pass before the refusal.
            for _ in 0..<5 { #expect(try await live.anonymous.send(.GET, info.path).status == 200) }
            var refused: TestResponse?
            for _ in 0..<10 {
                let r = try await live.anonymous.send(.GET, info.path)
                if r.status != 200 { refused = r; break }
            }
            let answer = try #require(refused, "the limit refused none of 15 fetches")
            let wait = answer.headers.first(name: "Retry-After").flatMap { Int($0) }
            #expect(answer.status == 429 && answer.errorCode == .rateLimited && (1...12).contains(wait ?? 0), "\(answer.status) \(answer.text) \(String(describing: wait))")
            #expect(try await live.alice.send(.GET, APIPath.shares(.default)).status == 200, "the API itself is not limited")
        }
    }

    @Test("a bucket holds a minute's fetches and fills at that rate")
    func bucket() {
        let limit = RateLimit(perMinute: 60)
        let start = ContinuousClock.now
        for _ in 0..<60 { #expect(limit.take(for: "a", now: start) == nil) }
        #expect(limit.take(for: "a", now: start) == 1)
        #expect(limit.take(for: "b", now: start) == nil, "each address has its own")
        #expect(limit.take(for: "a", now: start + .seconds(1)) == nil)
        #expect(limit.take(for: "a", now: start + .seconds(1)) == 1)
        #expect(RateLimit(perMinute: 0).take(for: "a") == nil, "0: no limit")
    }
}
