import Foundation
import Testing
import VaultCore

#if canImport(Glibc)
import Glibc
#endif

/// The Flatpak secret portal (docs/secret-service.md#the-flatpak-secret-portal), through
/// the real xdg-desktop-portal (Debian 12's 1.16) on a private bus, routed to vaultd by
/// `dist/portal/vaultd.portal` (`XDG_DESKTOP_PORTAL_DIR`, which 1.16 reads instead of
/// `/usr/share/xdg-desktop-portal/portals`, with `XDG_CURRENT_DESKTOP` one of its `UseIn`
/// desktops). Sandboxed clients are bubblewrap sandboxes carrying a Flatpak instance record
/// (`/.flatpak-info`, its bytes written on the host as `$XDG_RUNTIME_DIR/.flatpak/ID/info`, as
/// `flatpak run` does), calling `org.freedesktop.portal.Secret.RetrieveSecret` with a pipe
/// from python's GIO, as libsecret's file backend does.
@Suite(.serialized) struct SecretPortalTests {
    static let portalExecutable = "/usr/libexec/xdg-desktop-portal"
    static let appA = "org.example.PortalA"
    static let appB = "org.example.PortalB"

    /// A private bus with vaultd's Secret Service, its vault made, and xdg-desktop-portal.
    /// `@unchecked Sendable`: its paths never change, and only `close` (on the test's thread,
    /// after every other thread ended) changes the portal's pid.
    final class Desktop: @unchecked Sendable {
        let k: KeyringFixture
        private var portalPID: pid_t?

        init() throws {
            k = try KeyringFixture(keyring: false)
            do {
                try k.startVaultd(arguments: ["--secret-service"])
                guard k.waitForLog("serving org.freedesktop.secrets", timeout: 10) else {
                    throw HarnessError("vaultd does not serve the Secret Service: \(k.log)")
                }
                let i = k.ctl(["init", "--no-passphrase"])
                guard i.status == 0 else { throw HarnessError("init: \(i)") }
                try startPortal()
            } catch {
                close()
                throw error
            }
        }

        private func startPortal() throws {
            var env = k.environment
            env["XDG_DESKTOP_PORTAL_DIR"] =
                Paths.repoRoot.appendingPathComponent("dist/portal").path
            env["XDG_CURRENT_DESKTOP"] = "GNOME"
            let log = k.root + "/portal.log"
            portalPID = try ChildProcess.spawn(
                SecretPortalTests.portalExecutable, ["--verbose"], environment: env, inputs: [:],
                stdout: .file(log, append: true), stderr: .file(log, append: true))
            let answered = eventually(timeout: 20) {
                k.run(
                    "dbus-send",
                    [
                        "--session", "--print-reply", "--dest=org.freedesktop.DBus",
                        "/org/freedesktop/DBus", "org.freedesktop.DBus.NameHasOwner",
                        "string:org.freedesktop.portal.Desktop",
                    ], timeout: 5
                ).stdoutText.contains("boolean true")
            }
            guard answered else {
                throw HarnessError(
                    "xdg-desktop-portal did not take its name; log:\n\((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")"
                )
            }
        }

        var portalLog: String {
            (try? String(contentsOfFile: k.root + "/portal.log", encoding: .utf8)) ?? ""
        }

        func close() {
            if let p = portalPID {
                kill(p, SIGTERM)
                if ChildProcess.wait(p, timeout: 10) == nil {
                    kill(p, SIGKILL)
                    _ = ChildProcess.wait(p, timeout: 5)
                }
            }
            portalPID = nil
            k.close()
        }

        /// Where the sandbox's `/.flatpak-info` comes from.
        enum Record {
            /// Flatpak's own: the instance's host record, its bytes copied in.
            case instance
            /// Written by the sandbox itself (no host record has its instance ID).
            case selfWritten
        }

        /// Runs the portal client (`client`) in a sandbox as Flatpak app `appID`: its
        /// `{"response": N, "secret": HEX}` line.
        /// `mode`: `pipe` (as libsecret), `full` (a pipe filled before it is passed, whose
        /// reader never reads), `file` (a regular file instead of a pipe).
        func retrieve(as appID: String, record: Record = .instance, mode: String = "pipe") throws
            -> (response: Int?, secret: String, result: ProcessResult)
        {
            let r = try sandboxed(
                as: appID, record: record,
                ["/usr/bin/python3", "-c", SecretPortalTests.client, mode])
            let line = r.stdoutText.split(separator: "\n").last.map(String.init) ?? ""
            let j =
                (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] ?? [:]
            return ((j["response"] as? NSNumber)?.intValue, j["secret"] as? String ?? "", r)
        }

        /// Runs `command` in a sandbox as Flatpak app `appID` (a new instance each time), the
        /// bus at Flatpak's path for it, `data` (if any) as its `XDG_DATA_HOME`, as Flatpak
        /// binds `~/.var/app/ID/data`.
        func sandboxed(
            as appID: String, record: Record = .instance, data: String? = nil, _ command: [String],
            stdin: Data? = nil
        ) throws -> ProcessResult {
            let id = String(UInt32.random(in: 1...UInt32.max))
            let text =
                "[Application]\nname=\(appID)\nruntime=runtime/org.example.Platform/x86_64/1\n\n[Instance]\ninstance-id=\(id)\n"
            let info = k.root + "/flatpak-info-\(id)"
            if record == .instance {
                let dir = k.root + "/xdg-run/.flatpak/" + id
                try FileManager.default.createDirectory(
                    atPath: dir, withIntermediateDirectories: true)
                try Data(text.utf8).write(to: URL(fileURLWithPath: dir + "/info"))
                try FileManager.default.copyItem(atPath: dir + "/info", toPath: info)
            } else {
                try Data(text.utf8).write(to: URL(fileURLWithPath: info))
            }
            var bwrap = [
                "--tmpfs", "/", "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
                "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin", "--ro-bind",
                "/etc", "/etc", "--ro-bind", info, "/.flatpak-info", "--bind", k.root + "/bus",
                "/run/flatpak/bus", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
                "--setenv", "DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/flatpak/bus",
                "--setenv", "HOME", "/tmp",
            ]
            if let data {
                bwrap += ["--bind", data, "/var/data", "--setenv", "XDG_DATA_HOME", "/var/data"]
            }
            return k.run("bwrap", bwrap + command, stdin: stdin, timeout: 60)
        }
    }

    /// A sandboxed app's portal call, as libsecret's file backend makes it: the Response
    /// signal subscribed to first (its handle is known from the unique name and the token),
    /// RetrieveSecret with the pipe's write end, the Response awaited, then the read end read
    /// to its end (at most 10 s without a byte).
    static let client = #"""
        import json, os, select, sys
        from gi.repository import Gio, GLib
        bus = Gio.bus_get_sync(Gio.BusType.SESSION, None)
        token = 't%d' % os.getpid()
        handle = '/org/freedesktop/portal/desktop/request/%s/%s' % (bus.get_unique_name()[1:].replace('.', '_'), token)
        out = {}
        loop = GLib.MainLoop()
        def on_response(conn, sender, path, iface, signal, params):
            out['response'] = params.unpack()[0]
            loop.quit()
        bus.signal_subscribe('org.freedesktop.portal.Desktop', 'org.freedesktop.portal.Request', 'Response', handle, None, Gio.DBusSignalFlags.NONE, on_response)
        mode = sys.argv[1] if len(sys.argv) > 1 else 'pipe'
        r, w = os.pipe()
        if mode == 'full':
            # A reader that never reads: the pipe filled before it is passed on.
            os.set_blocking(w, False)
            try:
                while True:
                    os.write(w, b'x' * 4096)
            except BlockingIOError:
                pass
        if mode == 'file':
            os.close(w)
            os.makedirs('/tmp', exist_ok=True)
            w = os.open('/tmp/secret-file', os.O_WRONLY | os.O_CREAT, 0o600)
        fds = Gio.UnixFDList.new()
        index = fds.append(w)
        os.close(w)
        started = GLib.get_monotonic_time()
        reply = bus.call_with_unix_fd_list_sync('org.freedesktop.portal.Desktop', '/org/freedesktop/portal/desktop', 'org.freedesktop.portal.Secret', 'RetrieveSecret', GLib.Variant('(ha{sv})', (index, {'handle_token': GLib.Variant('s', token)})), GLib.VariantType('(o)'), Gio.DBusCallFlags.NONE, 30000, fds, None)
        del fds
        assert reply[0].unpack()[0] == handle, reply[0].unpack()
        GLib.timeout_add_seconds(30, loop.quit)
        loop.run()
        data = b''
        while select.select([r], [], [], 10)[0]:
            chunk = os.read(r, 4096)
            if not chunk:
                break
            data += chunk
        out['seconds'] = (GLib.get_monotonic_time() - started) / 1e6
        if mode == 'full':
            data = b''
        if mode == 'file':
            data = open('/tmp/secret-file', 'rb').read()
        out['secret'] = data.hex()
        print(json.dumps(out))
        """#

    /// The same app gets the same 64 bytes every time, another app other bytes, each kept
    /// as an item of the app's own access group; a sandbox whose `/.flatpak-info` Flatpak
    /// did not write (xdg-desktop-portal 1.16 takes it at its word) gets nothing.
    @Test(.tags(.system)) func aSandboxedAppGetsItsOwnSecretThroughTheRealPortal() throws {
        try #require(
            access(Self.portalExecutable, X_OK) == 0, "xdg-desktop-portal is not installed")
        let desktop = try Desktop()
        defer { desktop.close() }
        let k = desktop.k

        let first = try desktop.retrieve(as: Self.appA)
        #expect(
            first.response == 0, "\(first.result)\nportal:\n\(desktop.portalLog)\nvaultd:\n\(k.log)"
        )
        #expect(first.secret.count == 128, "\(first.secret.count / 2) bytes: \(first.result)")
        let again = try desktop.retrieve(as: Self.appA)
        #expect(again.response == 0 && again.secret == first.secret, "\(again.result)")
        let other = try desktop.retrieve(as: Self.appB)
        #expect(other.response == 0 && other.secret.count == 128, "\(other.result)")
        #expect(other.secret != first.secret)

        // A's secret is an item of A's own group, and B's of B's.
        let listed = k.ctl(["item", "list", "--access-group", Self.appA, "--json"]).stdoutText
        #expect(listed.contains("org.freedesktop.portal.Secret") && listed.contains(Self.appA))
        #expect(
            !k.ctl(["item", "list", "--access-group", Self.appB, "--json"]).stdoutText.contains(
                Self.appA))

        // A sandbox that wrote its own /.flatpak-info naming A: xdg-desktop-portal forwards
        // it as A, and vaultd, which checks the sandbox against Flatpak's record, refuses.
        let forged = try desktop.retrieve(as: Self.appA, record: .selfWritten)
        #expect(forged.response == 2 && forged.secret.isEmpty, "\(forged.result)")
        #expect(k.log.contains("secret portal: request refused"), "\(k.log)")
        // The secret is never logged.
        #expect(!k.log.contains(first.secret) && !desktop.portalLog.contains(first.secret))
    }

    /// A program that is not the system's xdg-desktop-portal calling vaultd's backend
    /// interface directly, naming app A and its own request, is refused, and its pipe gets
    /// nothing.
    @Test(.tags(.system)) func aProcessThatIsNotThePortalIsRefused() throws {
        try #require(
            access(Self.portalExecutable, X_OK) == 0, "xdg-desktop-portal is not installed")
        let desktop = try Desktop()
        defer { desktop.close() }
        // A has a secret already: the attacker goes for it.
        let a = try desktop.retrieve(as: Self.appA)
        try #require(a.response == 0, "\(a.result)")
        let script = #"""
            import os, select, sys
            from gi.repository import Gio, GLib
            bus = Gio.bus_get_sync(Gio.BusType.SESSION, None)
            handle = '/org/freedesktop/portal/desktop/request/%s/x' % bus.get_unique_name()[1:].replace('.', '_')
            r, w = os.pipe()
            fds = Gio.UnixFDList.new()
            index = fds.append(w)
            os.close(w)
            try:
                bus.call_with_unix_fd_list_sync('org.freedesktop.secrets', '/org/freedesktop/portal/desktop', 'org.freedesktop.impl.portal.Secret', 'RetrieveSecret', GLib.Variant('(osha{sv})', (handle, sys.argv[1], index, {})), GLib.VariantType('(ua{sv})'), Gio.DBusCallFlags.NONE, 30000, fds, None)
                print('answered')
            except GLib.Error as e:
                print('error', Gio.DBusError.get_remote_error(e))
            del fds
            print('bytes', len(os.read(r, 4096)) if select.select([r], [], [], 2)[0] else 0)
            """#
        // Debian's python (python-gi is its package), whatever PATH puts first.
        let r = desktop.k.run("/usr/bin/python3", ["-c", script, Self.appA])
        #expect(
            r.stdoutText.contains("error org.freedesktop.DBus.Error.AccessDenied")
                && r.stdoutText.contains("bytes 0"), "\(r)")
        #expect(
            desktop.k.log.contains("only the system's xdg-desktop-portal may call"),
            "\(desktop.k.log)")
    }

    /// libsecret inside a Flatpak (its file backend, which Debian's libsecret 0.20 uses when
    /// `/.flatpak-info` exists and the portal has the Secret interface): `secret-tool store`
    /// keeps the secret in the app's own keyring file, encrypted under the master secret
    /// vaultd gave it, and a later instance of the app looks it up.
    @Test(.tags(.system)) func libsecretInAFlatpakKeepsItsKeyringUnderThePortalSecret() throws {
        try #require(
            access(Self.portalExecutable, X_OK) == 0, "xdg-desktop-portal is not installed")
        let desktop = try Desktop()
        defer { desktop.close() }
        let data = desktop.k.root + "/app-data"
        mkdir(data, 0o700)
        let store = try desktop.sandboxed(
            as: Self.appA, data: data,
            ["secret-tool", "store", "--label=portal", "service", "s", "account", "a"],
            stdin: Data("sandboxed-secret".utf8))
        #expect(store.status == 0, "\(store)\nvaultd:\n\(desktop.k.log)")
        let keyring = data + "/keyrings/default.keyring"
        let bytes = (try? Data(contentsOf: URL(fileURLWithPath: keyring))) ?? Data()
        #expect(!bytes.isEmpty, "no keyring file at \(keyring)")
        #expect(!String(decoding: bytes, as: UTF8.self).contains("sandboxed-secret"))
        let lookup = try desktop.sandboxed(
            as: Self.appA, data: data, ["secret-tool", "lookup", "service", "s", "account", "a"])
        // On a failure, vaultd's log says whether the second instance's request reached it.
        #expect(
            lookup.status == 0 && lookup.stdoutText == "sandboxed-secret",
            "\(lookup)\nvaultd:\n\(desktop.k.log)")
        // The keyring's key came from vaultd: A's portal secret, in A's group.
        #expect(
            desktop.k.ctl(["item", "list", "--access-group", Self.appA]).stdoutText.contains(
                "service=\"org.freedesktop.portal.Secret\""))
        // Another app with A's keyring file cannot open it: its master secret is its own.
        let other = try desktop.sandboxed(
            as: Self.appB, data: data, ["secret-tool", "lookup", "service", "s", "account", "a"])
        #expect(other.stdoutText.isEmpty, "\(other)")
    }

    /// A reader that never reads (its pipe full) costs vaultd the write's time limit, 2 s,
    /// and a response 2; meanwhile another app is served. A descriptor that is no pipe or
    /// socket (a regular file) is refused without a byte written.
    @Test(.tags(.system)) func aPipeNeverReadOrAFileGetsNothingAndHoldsNothing() throws {
        try #require(
            access(Self.portalExecutable, X_OK) == 0, "xdg-desktop-portal is not installed")
        let desktop = try Desktop()
        defer { desktop.close() }
        // The stalled request on a thread of its own; its answer is read after `done`.
        nonisolated(unsafe) var full: (response: Int?, secret: String, result: ProcessResult)?
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            full = try? desktop.retrieve(as: Self.appA, mode: "full")
            done.signal()
        }
        thread.start()
        let b = try desktop.retrieve(as: Self.appB)
        #expect(b.response == 0 && b.secret.count == 128, "\(b.result)")
        #expect(done.wait(timeout: .now() + 60) == .success)
        #expect(full?.response == 2, "\(String(describing: full?.result))")
        #expect(desktop.k.log.contains("did not read its secret within 2.0 s"), "\(desktop.k.log)")
        let file = try desktop.retrieve(as: Self.appA, mode: "file")
        #expect(file.response == 2 && file.secret.isEmpty, "\(file.result)")
        #expect(desktop.k.log.contains("no pipe or socket"), "\(desktop.k.log)")
        // And A, asking properly, gets its secret.
        let a = try desktop.retrieve(as: Self.appA)
        #expect(a.response == 0 && a.secret.count == 128, "\(a.result)")
    }
}
