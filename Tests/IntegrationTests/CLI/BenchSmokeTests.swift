import Foundation
import TestSupport
import Testing

/// vault-bench runs end to end with tiny counts and reports every workload. No
/// timing is asserted (machines are shared and noisy), only that each number is there.
@Suite struct BenchSmokeTests {
    /// Runs the vault-bench built beside the tested vaultd, with `arguments` and `--json
    /// --no-cache`, in a temporary directory of its own; returns the JSON it printed.
    static func runBench(_ arguments: [String]) throws -> [String: Any] {
        let bench = Paths.binaries + "/vault-bench"
        try #require(
            FileManager.default.isExecutableFile(atPath: bench),
            "vault-bench is not built next to vaultd (\(Paths.binaries))")
        let root = try TemporaryDirectory.make(prefix: "vault-bench-it")
        defer { TemporaryDirectory.remove(root) }
        var env = isolatedEnvironment(root: root, socket: nil)
        env["TMPDIR"] = root
        let r = try ChildProcess.run(
            bench, arguments + ["--no-cache", "--json", "--vaultd", Paths.binaries + "/vaultd"],
            environment: env, timeout: 300)
        try #require(r.status == 0, "\(r)")
        return try #require(
            try JSONSerialization.jsonObject(with: r.stdout) as? [String: Any],
            "not a JSON object: \(r)")
    }

    @Test func tinyRunReportsEveryWorkloadAsJSON() throws {
        let json = try Self.runBench([
            "--items", "50,100", "--ss-items", "20", "--clients", "1,2", "--write-clients", "1,2",
            "--seconds", "0.2", "--warmup", "0.05",
            "--reps", "1", "--process-runs", "2", "--startup-runs", "1", "--vaultctl",
            Paths.binaries + "/vaultctl",
        ])
        let workloads = try #require(json["workloads"] as? [[String: Any]])
        func entries(_ name: String, _ system: String) -> [[String: Any]] {
            workloads.filter { $0["name"] as? String == name && $0["system"] as? String == system }
        }
        for (name, system, count) in [
            ("lookup", "vaultd", 4), ("lookup", "floor", 4), ("add", "vaultd", 4),
            ("update", "vaultd", 4), ("delete", "vaultd", 4),
            // The disk's floor of a durable write, once per item count (50, 100) and once
            // beside the Secret Service's stores (20).
            ("fdatasync", "floor", 3),
            ("prefs-get", "vaultd", 1), ("prefs-set", "vaultd", 2), ("defaults-read", "vaultd", 1),
            ("item-get-process", "vaultd", 1),
            // vaultd's Secret Service through libsecret on a private bus, at the one --ss-items count.
            ("ss-ping", "vaultd", 2), ("ss-lookup", "vaultd", 2), ("ss-store", "vaultd", 2),
            ("ss-replace", "vaultd", 2), ("ss-clear", "vaultd", 2),
        ] {
            let found = entries(name, system)
            #expect(
                found.count == count,
                "\(name) on \(system): \(found.count) entries, expected \(count)")
            for e in found {
                for key in ["p50_us", "p99_us", "ops_per_s"] {
                    let v = (e[key] as? NSNumber)?.doubleValue ?? 0
                    #expect(v > 0, "\(name) \(system) \(key) = \(v)")
                }
                #expect(e["items"] is NSNumber && e["clients"] is NSNumber)
            }
        }
        #expect(
            Set(entries("lookup", "vaultd").compactMap { ($0["items"] as? NSNumber)?.intValue })
                == [50, 100])
        #expect(
            Set(entries("ss-lookup", "vaultd").compactMap { ($0["items"] as? NSNumber)?.intValue })
                == [20])
        #expect(((json["rss_bytes"] as? NSNumber)?.intValue ?? 0) > 0)
        #expect(((json["startup_ms"] as? NSNumber)?.doubleValue ?? 0) > 0)
        #expect((json["targets"] as? [Any])?.isEmpty == false)
    }

    /// The Secret Service workloads alone, against vaultd and gnome-keyring, each on a private
    /// bus: both systems' rows, and the targets judged from them.
    @Test(.tags(.system)) func secretServiceWorkloadsRunAgainstVaultdAndTheKeyring() throws {
        let json = try Self.runBench([
            "--only", "ss", "--compare-keyring", "--ss-items", "20", "--clients", "1",
            "--write-clients", "1", "--seconds", "0.1",
            "--warmup", "0.02", "--reps", "1",
        ])
        let workloads = try #require(json["workloads"] as? [[String: Any]])
        let rows = Set(
            workloads.compactMap { e in
                (e["name"] as? String).flatMap { n in (e["system"] as? String).map { "\(n) \($0)" }
                }
            })
        // The disk's floor of a durable store, in vaultd's data directory.
        var expected: Set<String> = ["fdatasync floor"]
        for name in ["ss-ping", "ss-lookup", "ss-store", "ss-replace", "ss-clear"] {
            expected.formUnion(["\(name) vaultd", "\(name) keyring"])
        }
        // --only ss: the socket's workloads are not run.
        #expect(rows == expected, "\(rows.symmetricDifference(expected))")
        for e in workloads {
            #expect(((e["p50_us"] as? NSNumber)?.doubleValue ?? 0) > 0, "\(e)")
            #expect((e["items"] as? NSNumber)?.intValue == 20, "\(e)")
        }
        let targets = try #require(json["targets"] as? [[String: Any]])
        let lookup = try #require(
            targets.first {
                ($0["target"] as? String)?.hasPrefix("Secret Service lookup ≥ 5×") == true
            })
        // This run measured 20 items, not the target's 1,000: the target is left unjudged.
        #expect(lookup["met"] == nil, "\(lookup)")
        // The bus-relative targets are judged at the count measured, each with its figures.
        for prefix in [
            "Secret Service lookup p50 ≤ 2.3× ss-ping", "vaultd CPU ≤ 150 µs per Secret Service",
            "Secret Service store p50 ≤ ss-ping + fdatasync",
        ] {
            let t = try #require(
                targets.first { ($0["target"] as? String)?.hasPrefix(prefix) == true }, "\(prefix)")
            #expect(t["met"] is Bool, "\(t)")
            #expect((t["value"] as? String)?.hasPrefix("20: ") == true, "\(t)")
        }
    }

    @Test func usageErrorsExitWith64() throws {
        let bench = Paths.binaries + "/vault-bench"
        try #require(FileManager.default.isExecutableFile(atPath: bench))
        let r = try ChildProcess.run(
            bench, ["--items", "zero"], environment: ProcessInfo.processInfo.environment)
        #expect(r.status == 64, "\(r)")
        #expect(r.stderr.contains("--items"))
    }
}
