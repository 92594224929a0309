import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Two Syncthing instances on loopback, each with its own home and folder, sharing the folder
/// between them: GUI, discovery, relays, NAT and upgrades off; started and stopped by the test.
///
/// `@unchecked Sendable`: `pids` changes only in start and stop, on the test's thread.
final class SyncthingPair: @unchecked Sendable {
    let root: String
    /// Each instance's copy of the shared folder.
    let folders: [String]
    private var pids: [pid_t] = []
    let logs: [String]

    init() throws {
        root = try TemporaryDirectory.make(prefix: "vaultd-st")
        folders = [root + "/folder-a", root + "/folder-b"]
        logs = [root + "/syncthing-a.log", root + "/syncthing-b.log"]
        do { try start() } catch {
            close()
            throw error
        }
    }

    deinit { close() }

    var environment: [String: String] {
        var env = isolatedEnvironment(root: root, socket: nil)
        env["STNOUPGRADE"] = "1"
        env["STNODEFAULTFOLDER"] = "1"
        return env
    }

    private func start() throws {
        mkdir(root + "/home", 0o700)
        var ids: [String] = []
        for i in 0..<2 {
            // Syncthing refuses a folder without its marker directory.
            try FileManager.default.createDirectory(
                atPath: folders[i] + "/.stfolder", withIntermediateDirectories: true)
            let r = try ChildProcess.run(
                "syncthing", ["generate", "--home=\(root)/st\(i)", "--no-default-folder"],
                environment: environment)
            guard r.status == 0,
                let line = (r.stdoutText + r.stderr).split(separator: "\n").first(where: {
                    $0.contains("Device ID: ")
                })
            else {
                throw HarnessError("syncthing generate failed: \(r)")
            }
            ids.append(String(line.split(separator: " ").last!))
        }
        let ports = try [Self.freePort(), Self.freePort()]
        for i in 0..<2 {
            let peer = 1 - i
            let config = """
                <configuration version="36">
                    <folder id="vaultd-sync" label="vaultd-sync" path="\(folders[i])" type="sendreceive" rescanIntervalS="3600" fsWatcherEnabled="true" fsWatcherDelayS="1">
                        <device id="\(ids[i])"></device>
                        <device id="\(ids[peer])"></device>
                    </folder>
                    <device id="\(ids[i])" name="self" compression="metadata"><address>dynamic</address></device>
                    <device id="\(ids[peer])" name="peer" compression="metadata"><address>tcp://127.0.0.1:\(ports[peer])</address></device>
                    <gui enabled="false" tls="false"><address>127.0.0.1:0</address></gui>
                    <options>
                        <listenAddress>tcp://127.0.0.1:\(ports[i])</listenAddress>
                        <globalAnnounceEnabled>false</globalAnnounceEnabled>
                        <localAnnounceEnabled>false</localAnnounceEnabled>
                        <relaysEnabled>false</relaysEnabled>
                        <natEnabled>false</natEnabled>
                        <startBrowser>false</startBrowser>
                        <urAccepted>-1</urAccepted>
                        <autoUpgradeIntervalH>0</autoUpgradeIntervalH>
                        <crashReportingEnabled>false</crashReportingEnabled>
                        <reconnectionIntervalS>1</reconnectionIntervalS>
                    </options>
                </configuration>
                """
            try config.write(toFile: "\(root)/st\(i)/config.xml", atomically: true, encoding: .utf8)
        }
        for i in 0..<2 {
            // --no-restart: the serving process itself, no monitor process to outlive a kill.
            pids.append(
                try ChildProcess.spawn(
                    "syncthing",
                    ["serve", "--home=\(root)/st\(i)", "--no-browser", "--no-restart"],
                    environment: environment, inputs: [:],
                    stdout: .file(logs[i], append: true), stderr: .file(logs[i], append: true)))
        }
        let connected = eventually(timeout: 30) {
            logs.allSatisfy { Self.text($0).contains("Established secure connection") }
        }
        guard connected else {
            throw HarnessError("the Syncthing instances did not connect:\n\(log)")
        }
    }

    static func text(_ path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }

    var log: String { logs.map(Self.text).joined(separator: "\n----\n") }

    /// A TCP port on 127.0.0.1 that nothing listens on (bound, read back, released).
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: \(errno)") }
        defer { Glibc.close(fd) }
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_addr.s_addr = inet_addr("127.0.0.1")
        a.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &a) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0
            }
        }
        guard ok else { throw HarnessError("bind: \(errno)") }
        return Int(UInt16(bigEndian: a.sin_port))
    }

    func close() {
        for p in pids {
            kill(p, SIGTERM)
            if ChildProcess.wait(p, timeout: 10) == nil {
                kill(p, SIGKILL)
                _ = ChildProcess.wait(p, timeout: 10)
            }
        }
        pids = []
        TemporaryDirectory.remove(root)
    }
}

/// Two vaultds whose sync folders two real Syncthing instances replicate on loopback.
@Suite(.serialized, .tags(.system)) struct SyncthingTests {
    static let timeout = 60.0

    /// Seconds `condition` took to hold (nil: not within `timeout`).
    static func timeToHold(_ condition: () -> Bool) -> Double? {
        let start = Date()
        return eventually(timeout: timeout, condition) ? Date().timeIntervalSince(start) : nil
    }

    @Test func twoDevicesStayInSyncThroughSyncthing() throws {
        let st = try SyncthingPair()
        defer { st.close() }
        let a = try Daemon()
        let b = try Daemon()
        defer {
            a.close()
            b.close()
        }
        for d in [a, b] { try #require(d.initialize().status == 0) }
        try #require(a.ctl(["sync", "init", st.folders[0]]).status == 0)
        let join = b.ctl(["sync", "join", st.folders[1]])
        try #require(join.status == 0, "\(join)")
        let code = try #require(
            join.stdoutText.split(separator: "\n").first { $0.contains("sync approve") }?.split(
                separator: " "
            ).last.map(String.init))
        // The join request crosses to A's copy; the approval crosses back.
        let bID = try #require(b.syncStatus()?["deviceID"] as? String)
        let requestArrived = eventually(timeout: Self.timeout) {
            FileManager.default.fileExists(atPath: st.folders[0] + "/devices/\(bID)/join")
        }
        try #require(requestArrived, "\(st.log)")
        try #require(a.ctl(["sync", "approve", code]).status == 0)
        let joinTime = Self.timeToHold { b.syncStatus()?["state"] as? String == "member" }
        try #require(
            joinTime != nil,
            "B never joined: \(String(describing: b.syncStatus()))\n\(b.log)\n\(st.log)")

        let item = ["--service", "api.example.com", "--account", "alice"]
        try #require(
            a.ctl(
                ["item", "add"] + item + ["--synchronizable", "--label", "Work key"],
                stdin: Data("via-syncthing".utf8)
            ).status == 0)
        let added = Self.timeToHold { b.secret(item) == "via-syncthing" }
        #expect(added != nil, "A's add never reached B:\n\(b.log)\n\(st.log)")

        try #require(
            b.ctl(["item", "update"] + item + ["--secret-stdin"], stdin: Data("changed-on-B".utf8))
                .status == 0)
        let changed = Self.timeToHold { a.secret(item) == "changed-on-B" }
        #expect(changed != nil, "B's change never reached A:\n\(a.log)\n\(st.log)")

        try #require(a.ctl(["item", "delete"] + item + ["--yes"]).status == 0)
        let deleted = Self.timeToHold { b.ctl(["item", "get"] + item).status == 44 }
        #expect(deleted != nil, "A's deletion never reached B:\n\(b.log)\n\(st.log)")

        // Both copies of the folder, as Syncthing left them: no byte of the item in any file.
        for folder in st.folders {
            for name in FileManager.default.subpaths(atPath: folder + "/devices") ?? [] {
                guard let bytes = FileManager.default.contents(atPath: folder + "/devices/" + name)
                else { continue }
                for n in ["api.example.com", "alice", "Work key", "via-syncthing", "changed-on-B"] {
                    #expect(bytes.range(of: Data(n.utf8)) == nil, "\(n) is in \(name)")
                }
            }
        }
        func ms(_ t: Double?) -> String {
            t.map { String(Int(($0 * 1000).rounded())) + " ms" } ?? "-"
        }
        print(
            "sync through Syncthing on loopback: joined in \(ms(joinTime)); add A→B \(ms(added)), update B→A \(ms(changed)), delete A→B \(ms(deleted))"
        )
    }
}
