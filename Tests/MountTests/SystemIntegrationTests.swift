import Foundation
import Testing
import TestSupport

/// `scripts/install` and what it installs: the units as systemd reads them, and the mount
/// helper as mount(8) runs it for `mount -t fuse.ubiq` and fstab lines.
@Suite(.serialized) struct SystemIntegrationTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// Installs into a folder of its own, from the built commands.
    static func install(into prefix: String) async throws {
        let r = try await run(repository + "/scripts/install", ["--prefix", prefix, "--sbin-dir", prefix + "/sbin", "--bin-dir", Binaries.directory], timeout: .seconds(120))
        guard r.status == 0 else { throw TestSupportError("scripts/install exited \(r.status): \(r.stderr)") }
    }

    /// `systemd-analyze verify` of a unit file, for the system manager or a user's.
    static func verify(_ unit: String, user: Bool, runtime: String) async throws -> (status: Int32, stdout: String, stderr: String) {
        var env = ProcessInfo.processInfo.environment
        env["XDG_RUNTIME_DIR"] = runtime
        return try await run("/usr/bin/systemd-analyze", (user ? ["--user"] : []) + ["verify", unit], timeout: .seconds(60), environment: env)
    }

    @Test("scripts/install puts the commands, the mount helper, the units, the completions and the man pages in place; systemd accepts the units, groff the pages")
    func installedUnitsVerify() async throws {
        let dir = try TempDirectory("ubiq-install")
        defer { dir.remove() }
        let prefix = dir.path + "/prefix"
        try await Self.install(into: prefix)
        for file in [
            "bin/ubiq", "bin/ubiq-full", "bin/ubiq-server", "sbin/mount.fuse.ubiq", "lib/systemd/user/ubiq-mount@.service", "lib/systemd/system/ubiq-server.service",
            "share/bash-completion/completions/ubiq", "share/zsh/site-functions/_ubiq-server", "share/fish/vendor_completions.d/ubiq.fish",
            "share/man/man1/ubiq.1", "share/man/man1/ubiq-server.1",
        ] {
            #expect(FileManager.default.fileExists(atPath: prefix + "/" + file), "\(file) installed")
        }
        // The man pages render without a warning and describe every subcommand with its options.
        for tool in ["ubiq", "ubiq-server"] {
            let page = prefix + "/share/man/man1/\(tool).1"
            let check = try await run("/usr/bin/groff", ["-man", "-Tutf8", "-ww", "-z", page])
            #expect(check.status == 0 && check.stderr.isEmpty, "\(tool).1: \(check.stderr)")
        }
        let rendered = try await run("/usr/bin/groff", ["-man", "-Tascii", "-P-bcou", prefix + "/share/man/man1/ubiq.1"])
        #expect(rendered.stdout.contains("ubiq mount") && rendered.stdout.contains("--allow-other") && rendered.stdout.contains("ubiq kv set"), "\(rendered.stdout.prefix(400))")
        let helper = try String(contentsOfFile: prefix + "/sbin/mount.fuse.ubiq", encoding: .utf8)
        #expect(helper.contains("\(prefix)/bin/ubiq"), "the helper runs the installed command")
        #expect(try await run(prefix + "/bin/ubiq", ["--help"]).status == 0)

        let runtime = dir.path + "/run"
        try FileManager.default.createDirectory(atPath: runtime, withIntermediateDirectories: true)
        let server = try await Self.verify(prefix + "/lib/systemd/system/ubiq-server.service", user: false, runtime: runtime)
        #expect(server.status == 0, "ubiq-server.service: \(server.stderr)")
        // A template is verified as one of its instances: the mountpoint /home/alice/Cloud.
        let instance = dir.path + "/ubiq-mount@home-alice-Cloud.service"
        try FileManager.default.copyItem(atPath: prefix + "/lib/systemd/user/ubiq-mount@.service", toPath: instance)
        let mount = try await Self.verify(instance, user: true, runtime: runtime)
        #expect(mount.status == 0, "ubiq-mount@.service: \(mount.stderr)")
        // The check has teeth: a unit whose command is missing is refused.
        let broken = dir.path + "/ubiq-mount@home-bob-Cloud.service"
        try (try String(contentsOfFile: instance, encoding: .utf8)).replacingOccurrences(of: prefix + "/bin/ubiq", with: dir.path + "/missing/ubiq")
            .write(toFile: broken, atomically: true, encoding: .utf8)
        #expect(try await Self.verify(broken, user: true, runtime: runtime).status != 0)
    }

    @Test(
        "mount -t fuse.ubiq with fstab's options mounts through the helper; umount unmounts and the daemon ends; an unknown option is refused",
        .enabled(if: geteuid() == 0, "mount(8) runs helpers from /sbin only, which only root may write"))
    func mountTypeFuseUbiq() async throws {
        let dir = try TempDirectory("ubiq-helper")
        defer { dir.remove() }
        let prefix = dir.path + "/prefix"
        try await Self.install(into: prefix)
        // mount(8) looks for /sbin/mount.fuse.ubiq; one installed on this machine is put back.
        let helper = "/sbin/mount.fuse.ubiq"
        let kept = dir.path + "/kept-helper"
        if FileManager.default.fileExists(atPath: helper) { try FileManager.default.moveItem(atPath: helper, toPath: kept) }
        defer {
            try? FileManager.default.removeItem(atPath: helper)
            if FileManager.default.fileExists(atPath: kept) { try? FileManager.default.moveItem(atPath: kept, toPath: helper) }
        }
        try FileManager.default.copyItem(atPath: prefix + "/sbin/mount.fuse.ubiq", toPath: helper)

        try await withServer { server in
            try await server.addAccount("alice", password: "helper-password")
            let mnt = dir.path + "/mnt"
            let cache = dir.path + "/cache"
            for folder in [mnt, cache, dir.path + "/config", dir.path + "/data", dir.path + "/run"] {
                try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            }
            var env = ProcessInfo.processInfo.environment
            env["XDG_CONFIG_HOME"] = dir.path + "/config"
            env["XDG_DATA_HOME"] = dir.path + "/data"
            env["XDG_RUNTIME_DIR"] = dir.path + "/run"
            func sh(_ command: String) async throws -> (status: Int32, stdout: String, stderr: String) {
                env["M"] = mnt
                return try await run("/bin/bash", ["-c", command], timeout: .seconds(60), environment: env)
            }
            let login = try await run(prefix + "/bin/ubiq", ["login", "--server", server.baseURL, "--user", "alice", "--password-stdin"], stdin: "helper-password\n", environment: env)
            try #require(login.status == 0, "\(login.stderr)")

            let refused = try await sh("mount -t fuse.ubiq \(server.baseURL) \"$M\" -o container=default,colour=blue")
            #expect(refused.status != 0 && refused.stderr.contains("unknown option 'colour=blue'"), "\(refused)")

            let options = "container=default,device=helper,cache=\(cache),noauto,_netdev,x-systemd.automount,nofail"
            let mounted = try await sh("mount -t fuse.ubiq \(server.baseURL) \"$M\" -o \(options)")
            do {
                try #require(mounted.status == 0, "\(mounted.stderr)")
                #expect(try await sh(#"findmnt -n -o FSTYPE "$M""#).stdout == "fuse.ubiq\n")
                #expect(try await sh(#"echo through the helper > "$M/a.txt" && cat "$M/a.txt""#).stdout == "through the helper\n")
                try await eventually("a.txt to reach the server") {
                    try await sh(#"getfattr --only-values -n user.ubiq.isUploaded "$M/a.txt""#).stdout == "1"
                }
                let pid = try await sh("pgrep -f -- '--cache \(cache) '").stdout.split(separator: "\n").first.map(String.init)
                let unmounted = try await sh(#"umount "$M""#)
                #expect(unmounted.status == 0, "\(unmounted.stderr)")
                #expect(try await sh(#"findmnt "$M""#).status != 0, "nothing mounted there any more")
                if let pid { try await eventually("the daemon to end") { kill(pid_t(pid)!, 0) != 0 } }
            } catch {
                _ = try? await sh(#"fusermount3 -u -z "$M""#)
                throw error
            }
        }
    }
}
