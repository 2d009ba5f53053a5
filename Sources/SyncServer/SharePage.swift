import Foundation
import HTTPTypes
import Hummingbird
import ItemModel
import NIOCore
import ServerStorage
import SyncAPI

extension HTTPField.Name {
    static let referrerPolicy = Self("Referrer-Policy")!
}

/// The page a browser gets for a share: the name, size, date and expiry, and a download link
/// (a plain link: no script runs on it). Every name is HTML-escaped; it reads on a phone as on
/// a desktop.
enum SharePage {
    static func response(_ share: Share, at now: Timestamp) -> Response {
        var headers: HTTPFields = [.contentType: "text/html; charset=utf-8"]
        protect(&headers)
        // The page may style itself, and nothing else: no script, no other origin.
        headers[.contentSecurityPolicy] = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: html(share, at: now))))
    }

    /// What every public answer carries: the type as given, no referrer to the links it holds,
    /// and content that runs nothing in the server's origin.
    static func protect(_ headers: inout HTTPFields) {
        headers[.xContentTypeOptions] = "nosniff"
        headers[.referrerPolicy] = "no-referrer"
        if headers[.contentSecurityPolicy] == nil { headers[.contentSecurityPolicy] = "default-src 'none'; sandbox" }
    }

    static func html(_ share: Share, at now: Timestamp) -> String {
        let total = share.entries.reduce(Int64(0)) { $0 + $1.size }
        var body = "<h1>\(escaped(share.name))</h1>\n"
        var facts = ["\(share.kind == .folder ? "\(share.entries.count) files, " : "")\(sizeText(total))"]
        if share.kind == .file, let entry = share.entries.first { facts.append("modified " + readable(entry.modified)) }
        facts.append(share.expires.map { "available until " + readable($0) } ?? "no expiry")
        body += "<p class=\"facts\">\(escaped(facts.joined(separator: " · ")))</p>\n"
        if share.kind == .file {
            body += "<p><a class=\"download\" id=\"download\" href=\"?download=1\" download=\"\(escaped(share.name))\">Download</a></p>\n"
        } else {
            body += "<ul class=\"files\">\n"
            for e in share.entries {
                let href = "\(pathEscaped(share.token))/" + e.path.split(separator: "/").map { pathEscaped(String($0)) }.joined(separator: "/") + "?download=1"
                body += "<li><a href=\"\(escaped(href))\" download>\(escaped(e.path))</a> <span class=\"size\">\(escaped(sizeText(e.size)))</span></li>\n"
            }
            body += "</ul>\n"
            body += "<p><a class=\"download\" id=\"download\" href=\"?download=zip\" download=\"\(escaped(share.name)).zip\">Download all (zip)</a></p>\n"
        }
        return """
            <!DOCTYPE html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <meta name="robots" content="noindex">
            <title>\(escaped(share.name))</title>
            <style>
            body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 40rem; padding: 1.5rem; color: #222; background: #fafafa; }
            h1 { font-size: 1.4rem; overflow-wrap: anywhere; margin: 0 0 .5rem; }
            .facts { color: #555; margin: 0 0 1.5rem; }
            a.download { display: inline-block; padding: .8rem 1.6rem; border-radius: .5rem; background: #0a66d8; color: #fff; text-decoration: none; font-weight: 600; }
            ul.files { list-style: none; padding: 0; }
            ul.files li { padding: .6rem 0; border-bottom: 1px solid #ddd; overflow-wrap: anywhere; }
            .size { color: #666; white-space: nowrap; }
            </style>
            </head>
            <body>
            \(body)</body>
            </html>

            """
    }

    /// The five characters HTML gives meaning to, as entities: a name is shown, never run.
    static func escaped(_ text: String) -> String {
        var out = ""
        out.reserveCapacity(text.utf8.count)
        for c in text {
            switch c {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(c)
            }
        }
        return out
    }

    /// A URL path segment: unreserved characters kept, every other byte percent-encoded.
    static func pathEscaped(_ segment: String) -> String {
        var out = ""
        for byte in segment.utf8 {
            let unreserved = (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte) || "-._~".utf8.contains(byte)
            out += unreserved ? String(Character(Unicode.Scalar(byte))) : String(format: "%%%02X", byte)
        }
        return out
    }

    /// `2026-11-28 14:05 UTC`: a time as a person reads it.
    static func readable(_ time: Timestamp) -> String {
        String(WallClock.isoSeconds(of: time).prefix(16)).replacingOccurrences(of: "T", with: " ") + " UTC"
    }

    static func sizeText(_ bytes: Int64) -> String {
        if bytes < 1000 { return "\(bytes) bytes" }
        let units = ["kB", "MB", "GB", "TB"]
        var value = Double(bytes) / 1000
        var unit = 0
        while value >= 1000 && unit < units.count - 1 {
            value /= 1000
            unit += 1
        }
        return String(format: value < 10 ? "%.1f" : "%.0f", value) + " " + units[unit]
    }
}
