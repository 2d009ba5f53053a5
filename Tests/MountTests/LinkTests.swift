import Foundation
import Testing
import TestSupport

/// Symbolic links, FIFOs and sockets through the kernel, with the tools that make them.
@Suite struct LinkTests {
    /// What `find` says of every entry below a folder: type, path, link target, mode. The same
    /// on two devices means the same tree, links included.
    static let listing = #"cd "$M/$1" && find . -printf '%y %p %l %m\n' | LC_ALL=C sort"#

    @Test("links made with ln -s on A appear on B with the same target (relative, absolute, dangling, to a folder); ls -l, readlink, stat and cat through them work; renames and deletes follow")
    func linksReachTheOtherDevice() async throws {
        try await withDevices(["A", "B"]) { server, devices in
            let (a, b) = (devices[0], devices[1])
            try await a.must(#"""
                cd "$M" && mkdir -p d/sub && echo hello > d/f && ln -s d/f rel && ln -s /etc/hostname abs && ln -s 'no where' dangling \
                    && ln -s ../d/f d/up && ln -s d/sub dirlink
                """#)
            let made = try await a.must(Self.listing.replacingOccurrences(of: "$1", with: "."))
            var seen = ""
            try await b.expectEventually("B lists the same tree, links and targets included (last seen: \(seen))", devices: [a, b]) {
                seen = try await b.sh(Self.listing.replacingOccurrences(of: "$1", with: ".")).stdout
                return seen == made
            }
            #expect(try await b.must(#"readlink "$M/rel" "$M/abs" "$M/dangling" "$M/d/up""#) == "d/f\n/etc/hostname\nno where\n../d/f\n")
            #expect(try await b.must(#"stat -c '%F %s %h' "$M/rel""#) == "symbolic link 3 1\n")
            #expect(try await b.must(#"cd "$M" && ls -l rel | sed 's/.* rel/rel/'"#) == "rel -> d/f\n")
            #expect(try await b.must(#"cat "$M/rel" "$M/d/up""#) == "hello\nhello\n", "reads follow the link to the file")
            #expect(try await b.must(#"ls "$M/dirlink/""#) == "", "a link to a folder lists the folder")
            #expect(try await b.sh(#"cat "$M/dangling""#).status != 0)
            // The folder counts its subfolder; the link is no subfolder.
            #expect(try await b.must(#"stat -c %h "$M/d""#) == "3\n")
            let tree = try await serverTree(server)
            #expect(tree["rel"] == "-> d/f" && tree["dangling"] == "-> no where" && tree["d/up"] == "-> ../d/f", "\(tree)")

            try await a.must(#"cd "$M" && mv rel d/rel2 && rm dangling && ln -sfn d/f abs"#)
            try await b.expectEventually("B sees the rename, the delete and the replaced link", devices: [a, b]) {
                try await b.sh(#"readlink "$M/d/rel2" "$M/abs"; ls "$M""#).stdout == "d/f\nd/f\nabs\nd\ndirlink\n"
            }
            // Status of a link, not of what it points at: Linux answers ENODATA for any user.*
            // attribute of a link (lgetxattr) before asking the file system; `ubiq status` asks the mount.
            let status = try await a.ubiq(["status", "--json", a.mountpoint + "/abs"])
            #expect(status.status == 0 && status.stdout.contains(#""downloadingStatus":"current""#) && status.stdout.contains(#""isUploaded":true"#), "\(status)")
            let attribute = try await a.sh(#"getfattr -h -n user.ubiq.downloadingStatus "$M/abs""#)
            #expect(attribute.status != 0 && attribute.stderr.contains("No such attribute"), "\(attribute.stderr)")
        }
    }

    @Test("a git clone of a repository with links checks out identical on both devices, and git sees no change on either")
    func gitCloneWithLinks() async throws {
        let source = try TempDirectory("ubiq-git-source")
        defer { source.remove() }
        let git = #"git -c user.name=t -c user.email=t@example.com -c init.defaultBranch=main -c core.hooksPath=/dev/null"#
        let made = try await run("/bin/sh", ["-c", """
            set -e; cd '\(source.path)'; \(git) init -q .
            mkdir -p src/lib docs; echo 'int main(void) { return 0; }' > src/main.c; printf '#!/bin/sh\\necho hi\\n' > run.sh; chmod 755 run.sh
            echo 'lib' > src/lib/a.txt; echo '# docs' > docs/README.md
            ln -s docs/README.md README; ln -s ../lib src/lib2; ln -s src/lib/a.txt a; ln -s missing/target broken; ln -s /usr/bin/env env
            \(git) add -A; \(git) commit -q -m first
            """], timeout: .seconds(60))
        guard made.status == 0 else { throw TestSupportError("the source repository: \(made.stderr)") }
        try await withDevices(["A", "B"]) { _, devices in
            let (a, b) = (devices[0], devices[1])
            try await a.must(#"\#(git) clone -q '\#(source.path)' "$M/repo""#, timeout: .seconds(120))
            #expect(try await a.must(#"git -C "$M/repo" status --porcelain"#) == "")
            let made = try await a.must(#"cd "$M/repo" && find . -path ./.git -prune -o -printf '%y %p %l %m\n' | LC_ALL=C sort"#)
            #expect(made.contains("l ./src/lib2 ../lib 777") && made.contains("f ./run.sh  755"), "\(made)")
            var seen = ""
            try await b.expectEventually("B checks out the same tree (last seen: \(seen))", devices: [a, b]) {
                seen = try await b.sh(#"cd "$M/repo" && find . -path ./.git -prune -o -printf '%y %p %l %m\n' | LC_ALL=C sort"#).stdout
                return seen == made
            }
            try await b.expectEventually("git on B sees the clone as checked out, with nothing changed", devices: [a, b]) {
                let r = try await b.sh(#"git -c safe.directory='*' -C "$M/repo" status --porcelain"#)
                return r.status == 0 && r.stdout == ""
            }
            #expect(try await b.must(#"git -c safe.directory='*' -C "$M/repo" fsck --no-progress 2>&1; echo $?"#).hasSuffix("0\n"))
        }
    }

    @Test("a FIFO and a Unix socket work on the mount, show as excluded, and never reach the server or the other device")
    func fifoAndSocketStayLocal() async throws {
        try await withDevices(["A", "B"]) { server, devices in
            let (a, b) = (devices[0], devices[1])
            try await a.must(#"mkfifo "$M/pipe" && (printf 'through the pipe' > "$M/pipe" &) && cat "$M/pipe" > "$M/received""#)
            #expect(try await a.must(#"cat "$M/received""#) == "through the pipe")
            let echo = try await a.must(#"""
                cd "$M" && python3 - <<'PY'
                import os, socket, threading
                server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                server.bind("sock")
                server.listen(1)
                def answer():
                    conn, _ = server.accept()
                    conn.sendall(conn.recv(100).upper())
                    conn.close()
                t = threading.Thread(target=answer)
                t.start()
                client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                client.connect("sock")
                client.sendall(b"over the socket")
                print(client.recv(100).decode())
                t.join()
                PY
                """#)
            #expect(echo == "OVER THE SOCKET\n")
            #expect(try await a.must(#"stat -c %F "$M/pipe" "$M/sock""#) == "fifo\nsocket\n")
            let status = try await a.ubiq(["status", "--json", a.mountpoint + "/pipe"])
            #expect(status.stdout.contains(#""downloadingStatus":"excluded""#), "\(status)")
            // A file made after them reaches B: they would have gone before it.
            try await a.must(#"echo after > "$M/after""#)
            try await b.expectEventually("B has the file made after them", devices: [a, b]) {
                try await b.sh(#"cat "$M/after""#).stdout == "after\n"
            }
            try await a.waitUntilUploaded()
            #expect(try await b.must(#"ls "$M""#) == "after\nreceived\n")
            let tree = try await serverTree(server)
            #expect(tree["pipe"] == nil && tree["sock"] == nil && tree["after"] != nil, "\(tree)")
        }
    }
}
