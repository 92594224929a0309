import Foundation
import TestSupport
import Testing
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// vaultd's memory after `lock` holds no copy of the passphrase, nor of any secret added and
/// read before: secrets go from the request's bytes into sodium memory (wiped when freed),
/// the buffers that carried them are wiped, replies with secrets are built in sodium memory.
/// The scan reads /proc/PID/mem over every readable mapping, as root (CAP_SYS_PTRACE reads a
/// non-dumpable process's memory, which vaultd is).
@Suite struct SecretMemoryTests {
    /// The readable mappings of `pid` (start, end, name).
    static func readableMappings(_ pid: pid_t) throws -> [(UInt64, UInt64, String)] {
        let maps = try String(contentsOfFile: "/proc/\(pid)/maps", encoding: .utf8)
        return maps.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 5, fields[1].hasPrefix("r") else { return nil }
            let range = fields[0].split(separator: "-")
            guard range.count == 2, let start = UInt64(range[0], radix: 16),
                let end = UInt64(range[1], radix: 16), end <= UInt64(Int64.max)
            else { return nil }
            let name = fields.count > 5 ? fields[5...].joined(separator: " ") : ""
            // The kernel's own pages (not this process's data), which pread refuses.
            if name == "[vvar]" || name == "[vsyscall]" || name == "[vvar_vclock]" { return nil }
            return (start, end, name)
        }
    }

    /// Every readable byte of `pid`'s memory searched for each of `needles`: the bytes read
    /// and, per needle found, where.
    static func scan(_ pid: pid_t, for needles: [String: [UInt8]]) throws -> (
        bytes: Int, hits: [String: [String]]
    ) {
        let fd = open("/proc/\(pid)/mem", O_RDONLY)
        guard fd >= 0 else {
            throw HarnessError("open /proc/\(pid)/mem: \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        let overlap = needles.values.map(\.count).max() ?? 0
        let chunk = 1 << 20
        var buffer = [UInt8](repeating: 0, count: chunk + overlap)
        var total = 0
        var hits: [String: [String]] = [:]
        for (start, end, name) in try readableMappings(pid) {
            var at = start
            var carried = 0
            while at < end {
                let want = Int(min(UInt64(chunk), end - at))
                let n = buffer.withUnsafeMutableBytes {
                    pread(fd, $0.baseAddress! + carried, want, off_t(at))
                }
                if n <= 0 { break }
                total += n
                let filled = carried + n
                buffer.withUnsafeBytes { b in
                    for (label, needle) in needles {
                        var from = 0
                        while from + needle.count <= filled,
                            let first = memchr(
                                b.baseAddress! + from, Int32(needle[0]), filled - from)
                        {
                            let offset = b.baseAddress!.distance(to: UnsafeRawPointer(first))
                            guard offset + needle.count <= filled,
                                memcmp(b.baseAddress! + offset, needle, needle.count) == 0
                            else {
                                from = offset + 1
                                continue
                            }
                            let address = at - UInt64(carried) + UInt64(offset)
                            hits[label, default: []].append(
                                "0x" + String(address, radix: 16) + " in "
                                    + (name.isEmpty ? "anonymous memory" : name))
                            from = offset + 1
                        }
                    }
                }
                // The last bytes again at the front, so a needle across two chunks is found.
                let keep = min(overlap, filled)
                if keep > 0 {
                    buffer.withUnsafeMutableBytes { b in
                        _ = memmove(b.baseAddress!, b.baseAddress! + filled - keep, keep)
                    }
                }
                carried = keep
                at += UInt64(n)
            }
        }
        return (total, hits)
    }

    static func distinctive(_ label: String) -> String {
        label + "-"
            + (0..<24).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }

    @Test(
        .tags(.system),
        .enabled(if: getuid() == 0, "needs root to read a non-dumpable process's memory"),
        .timeLimit(.minutes(3)))
    func afterLockNoPassphraseNorSecretIsInVaultdsMemory() throws {
        let d = try Daemon()
        defer { d.close() }
        let pid = try #require(d.pid)
        let passphrase = Self.distinctive("vaultd-scan-passphrase")
        let secrets = (0..<4).map { Self.distinctive("vaultd-scan-secret-\($0)") }
        let r = d.ctl(["init", "--passphrase-fd", "3"], fds: [3: Data(passphrase.utf8)])
        try #require(r.status == 0, "\(r)")
        for (i, s) in secrets.enumerated() {
            let add = d.ctl(
                [
                    "item", "add", "--service", "scan", "--account", "account-\(i)", "--secret-fd",
                    "3",
                ], fds: [3: Data(s.utf8)])
            try #require(add.status == 0, "\(add)")
        }
        // Read back, each one and all at once (the all-at-once reply carries all four).
        for (i, s) in secrets.enumerated() {
            let get = d.ctl(["item", "get", "--service", "scan", "--account", "account-\(i)"])
            #expect(get.status == 0 && get.stdoutText == s, "\(get)")
        }
        // A wrong passphrase and the right one, checked while unlocked, then locked.
        let wrong = d.ctl(
            ["unlock", "--passphrase-fd", "3"], fds: [3: Data((passphrase + "-wrong").utf8)])
        #expect(wrong.status != 0, "\(wrong)")
        let unlock = d.ctl(["unlock", "--passphrase-fd", "3"], fds: [3: Data(passphrase.utf8)])
        #expect(unlock.status == 0, "\(unlock)")
        let lock = d.ctl(["lock"])
        try #require(lock.status == 0, "\(lock)")
        let unlockAgain = d.ctl(
            ["unlock", "--passphrase-fd", "3"], fds: [3: Data(passphrase.utf8)])
        #expect(unlockAgain.status == 0, "\(unlockAgain)")
        for (i, s) in secrets.enumerated() {
            let get = d.ctl(["item", "get", "--service", "scan", "--account", "account-\(i)"])
            #expect(get.status == 0 && get.stdoutText == s, "\(get)")
        }
        try #require(d.ctl(["lock"]).status == 0)

        var needles: [String: [UInt8]] = ["the passphrase": Array(passphrase.utf8)]
        for (i, s) in secrets.enumerated() {
            needles["secret \(i)"] = Array(s.utf8)
            needles["secret \(i) in base64"] = Array(Data(s.utf8).base64EncodedString().utf8)
        }
        // The scan's control: the data directory's path, which vaultd holds for its life.
        let control = "the data directory (control)"
        needles[control] = Array(d.dataDirectory.utf8)
        let (bytes, hits) = try Self.scan(pid, for: needles)
        #expect(
            hits[control] != nil,
            "the scan of \(bytes) bytes did not find what vaultd surely holds: it does not read vaultd's memory"
        )
        for (label, at) in hits.sorted(by: { $0.key < $1.key }) where label != control {
            Issue.record(
                "\(label) is in vaultd's memory after lock, \(at.count) times: \(at.prefix(5).joined(separator: ", "))"
            )
        }
        ReliabilityReport.record(
            "memory after lock: \(bytes >> 20) MiB of vaultd's readable memory scanned; the passphrase and 4 secrets (raw and base64) found \(hits.filter { $0.key != control }.values.map(\.count).reduce(0, +)) times; the control found \(hits[control]?.count ?? 0) times"
        )
    }
}

/// The secret parameters, taken from the message's bytes, mean what they meant as strings:
/// escapes in a passphrase or in base64, bad base64, a reply carrying several secrets.
@Suite struct SecretParameterWireTests {
    @Test func secretParametersOnTheWire() throws {
        let d = try Daemon()
        defer { d.close() }
        let c = try ExactClient(path: d.socketPath)
        func raw(_ text: String) -> ExactClient.Outcome {
            guard c.send(Array(text.utf8) + [0]) else { return .closed }
            return c.receive()
        }
        // "päss\"word" with its ä and quote escaped; unlocked later as plain UTF-8 by vaultctl.
        #expect(
            raw(#"{"method":"io.vaultd.Vault.Init","parameters":{"passphrase":"p\u00e4ss\"word"}}"#)
                .parameters != nil)
        #expect(d.ctl(["lock"]).status == 0)
        #expect(
            d.ctl(["unlock", "--passphrase-fd", "3"], fds: [3: Data("p\u{e4}ss\"word".utf8)]).status
                == 0)
        // base64 with an escaped character ("c2VjcmV0" = "secret"), and bad base64.
        let add = raw(
            #"{"method":"io.vaultd.Keychain.Add","parameters":{"class":"genericPassword","attributes":{"service":"wire","account":"a"},"data":"c2Vj\u0063mV0"}}"#
        )
        #expect(add.parameters != nil, "\(add)")
        #expect(
            d.ctl(["item", "get", "--service", "wire", "--account", "a"]).stdoutText == "secret")
        for bad in ["c2VjcmV0\\n", "c2VjcmV", "not base64!"] {
            let outcome = raw(
                #"{"method":"io.vaultd.Keychain.Add","parameters":{"class":"genericPassword","attributes":{"service":"wire","account":"bad"},"data":""#
                    + bad + #""}}"#)
            guard case .error("org.varlink.service.InvalidParameter", let p) = outcome else {
                Issue.record("\(bad): \(outcome)")
                continue
            }
            #expect(p["parameter"] == "data")
        }
        #expect(
            c.call(
                "io.vaultd.Keychain.Add",
                [
                    "class": "genericPassword", "attributes": ["service": "wire", "account": "b"],
                    "data": 5,
                ]
            ).errorName == "org.varlink.service.InvalidParameter")
        // Update's secret, and a reply carrying several secrets (each put in its place).
        #expect(
            c.call(
                "io.vaultd.Keychain.Update",
                [
                    "query": ["service": "wire", "account": "a"],
                    "data": Wire.base64(Array("changed".utf8)),
                ]
            ).parameters?["count"] == 1)
        var expected: [String: [UInt8]] = ["a": Array("changed".utf8)]
        for i in 0..<5 {
            let s = (0..<(i * 700 + 1)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ i) }
            expected["n\(i)"] = s
            #expect(Self.add(c, "n\(i)", s).parameters != nil)
        }
        let found = c.call(
            "io.vaultd.Keychain.CopyMatching",
            [
                "query": ["service": "wire"], "matchLimit": "all", "returnData": true,
                "returnAttributes": true,
            ])
        let items = try #require(found.parameters?["items"]?.arrayValue, "\(found)")
        var got: [String: [UInt8]] = [:]
        for item in items {
            if let account = item["attributes"]?["account"]?.stringValue,
                let data = item["data"]?.stringValue, let bytes = Data(base64Encoded: data)
            {
                got[account] = Array(bytes)
            }
        }
        #expect(got == expected)
    }

    static func add(_ c: ExactClient, _ account: String, _ secret: [UInt8]) -> ExactClient.Outcome {
        c.call(
            "io.vaultd.Keychain.Add",
            [
                "class": "genericPassword",
                "attributes": ["service": "wire", "account": .string(account)],
                "data": Wire.base64(secret),
            ])
    }
}
