import Foundation
import Testing
import TestSupport

/// `ubiq share`, `ubiq unshare` and `ubiq share --list` on a mount, and the links fetched with curl.
@Suite struct ShareMountTests {
    /// The `url` of `ubiq share --json`'s one line.
    static func url(_ output: String) throws -> String {
        let object = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [String: Any]
        return try #require(object?["url"] as? String, "\(output)")
    }

    @Test("ubiq share prints a link curl fetches the file from (ranges too), as it was when shared; the item's status shows it, --list too; unshare makes it 404; a local-only item is refused")
    func shareAFile() async throws {
        try await withDevices(["A"]) { _, devices in
            let a = devices[0]
            try await a.must(#"printf 'the first version\n' > "$M/Report Q3.txt" && mkdir "$M/work.nosync" && echo x > "$M/work.nosync/draft""#)
            try await a.waitUntilUploaded()
            let shared = try await a.ubiq(["share", a.mountpoint + "/Report Q3.txt", "--json"])
            try #require(shared.status == 0, "\(shared.stderr)")
            let url = try Self.url(shared.stdout)
            #expect(try await a.must("curl -sf '\(url)'") == "the first version\n")
            #expect(try await a.must("curl -s -o /dev/null -w '%{http_code}' -r 4-8 '\(url)'") == "206")
            #expect(try await a.must("curl -s -r 4-8 '\(url)'") == "first")
            // The item says it is shared: its attribute, and `ubiq status`.
            #expect(try await a.must(#"getfattr -n user.ubiq.shares --only-values "$M/Report Q3.txt""#) == "[{\"url\":\"\(url)\"}]")
            let status = try await a.ubiq(["status", "--json", a.mountpoint + "/Report Q3.txt"])
            let shares = (try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])?["shares"] as? [[String: Any]]
            #expect(shares?.first?["url"] as? String == url, "\(status.stdout)")
            let header = try await a.must("curl -sI '\(url)' | tr -d '\\r' | grep -i '^content-disposition'")
            #expect(header.contains("filename*=UTF-8''Report%20Q3.txt"), "\(header)")

            try await a.must(#"printf 'the second version\n' > "$M/Report Q3.txt""#)
            try await a.waitUntilUploaded()
            #expect(try await a.must("curl -sf '\(url)'") == "the first version\n", "the link keeps the snapshot")

            let listed = try await a.ubiq(["share", "--list", "--json", "--mount", a.mountpoint])
            let line = try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [String: Any]
            #expect(listed.status == 0 && line?["path"] as? String == "/Report Q3.txt" && line?["url"] as? String == url, "\(listed)")

            let refused = try await a.ubiq(["share", a.mountpoint + "/work.nosync/draft"])
            #expect(refused.status == 1 && refused.stderr.contains("not on the server"), "\(refused)")

            let removed = try await a.ubiq(["unshare", a.mountpoint + "/Report Q3.txt"])
            #expect(removed.status == 0 && removed.stdout.contains("removed 1 share"), "\(removed)")
            #expect(try await a.must("curl -s -o /dev/null -w '%{http_code}' '\(url)'") == "404")
            #expect(try await a.sh(#"getfattr -n user.ubiq.shares "$M/Report Q3.txt""#).status != 0, "no longer shared")
            let again = try await a.ubiq(["unshare", a.mountpoint + "/Report Q3.txt"])
            #expect(again.status == 1 && again.stderr.contains("is not shared"))
        }
    }

    @Test("a folder's link lists its files, each downloads; a link with --expires stops at its time with 410")
    func shareAFolderThatExpires() async throws {
        try await withDevices(["A"]) { _, devices in
            let a = devices[0]
            // With a local-only folder inside, which is in no snapshot and does not stop the share.
            try await a.must(#"mkdir -p "$M/Trip/day 1" "$M/Trip/scratch.nosync" && echo notes > "$M/Trip/notes.md" && head -c 5000 /dev/urandom > "$M/Trip/day 1/photo.jpg" && echo x > "$M/Trip/scratch.nosync/tmp""#)
            try await a.waitUntilUploaded()
            let shared = try await a.ubiq(["share", a.mountpoint + "/Trip", "--json"])
            try #require(shared.status == 0, "\(shared.stderr)")
            let url = try Self.url(shared.stdout)
            let listing = try await a.must("curl -sf '\(url)'")
            #expect(listing.contains(#""path":"day 1\/photo.jpg""#) && listing.contains(#""path":"notes.md""#) && !listing.contains("scratch"), "\(listing)")
            #expect(try await a.must(#"curl -sf '\#(url)/day%201/photo.jpg' | cmp - "$M/Trip/day 1/photo.jpg" && echo same"#) == "same\n")
            let expiring = try await a.ubiq(["share", a.mountpoint + "/Trip/notes.md", "--expires", "3s", "--json"])
            try #require(expiring.status == 0, "\(expiring.stderr)")
            let shortURL = try Self.url(expiring.stdout)
            try await eventually(timeout: .seconds(20), "the link to expire") {
                try await a.must("curl -s -o /dev/null -w '%{http_code}' '\(shortURL)'") == "410"
            }
            #expect(try await a.must("curl -s -o /dev/null -w '%{http_code}' '\(url)'") == "200", "the folder's link has no expiry")
        }
    }
}
