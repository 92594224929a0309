import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One of the benchmark's targets (docs/benchmarks.md), judged from this run's entries.
struct Target: Codable {
    var target: String
    var value: String
    /// nil when this run did not measure what the target needs.
    var met: Bool?
}

/// Everything a run measured, as printed with `--json`.
struct Report: Codable {
    var date: String
    var machine: String
    var settings: [String: String]
    var workloads: [Entry]
    /// vaultd's resident set size after the run at the largest item count.
    // swift-format-ignore: AlwaysUseLowerCamelCase
    var rss_bytes: Int?
    /// Items in the vault whose RSS and start-up are reported.
    // swift-format-ignore: AlwaysUseLowerCamelCase
    var rss_items: Int?
    /// Launch to the first answered lookup, median, at the largest item count.
    // swift-format-ignore: AlwaysUseLowerCamelCase
    var startup_ms: Double?
    var targets: [Target]

    /// The workloads in the order the tables show them, and their comparison systems.
    static let order = [
        "lookup", "add", "update", "delete", "fdatasync", "prefs-get", "prefs-set", "defaults-read",
        "item-get-process", "ss-ping", "ss-lookup", "ss-store",
        "ss-replace", "ss-clear",
    ]
    static func counterpart(_ name: String) -> String {
        name.hasPrefix("prefs") || name.hasPrefix("defaults") ? "dconf" : "keyring"
    }

    func find(_ name: String, _ system: String, items: Int? = nil, clients: Int) -> Entry? {
        workloads.first {
            $0.name == name && $0.system == system && $0.clients == clients
                && (items == nil || $0.items == items)
        }
    }

    /// The floor of vaultd's entry `e`: for a Secret Service workload, the bus's round trip
    /// to vaultd (`ss-ping`) at the same item and client count; else the `floor` entry of the
    /// same workload.
    func floorEntry(of e: Entry) -> Entry? {
        if e.name.hasPrefix("ss-") {
            return e.name == "ss-ping"
                ? nil : find("ss-ping", "vaultd", items: e.items, clients: e.clients)
        }
        return find(e.name, "floor", items: e.items, clients: e.clients)
            ?? find(e.name, "floor", clients: e.clients)
    }

    // MARK: tables

    var text: String {
        var out = "vault-bench — \(date) — \(machine)\n"
        out +=
            "settings: "
            + settings.keys.sorted().map { "\($0)=\(settings[$0]!)" }.joined(separator: " ") + "\n"
        let names =
            Self.order.filter { n in workloads.contains { $0.name == n } }
            + Set(workloads.map(\.name)).subtracting(Self.order).sorted()
        for name in names {
            let rows = workloads.filter { $0.name == name }
            let other = Self.counterpart(name)
            out += "\n## \(name)"
            if let note = rows.first(where: { $0.system == "vaultd" })?.note {
                out += " — vaultd: \(note)"
            }
            if let note = rows.first(where: { $0.system == other })?.note {
                out += "; \(other): \(note)"
            }
            out += "\n"
            let header = [
                "system", "items", "clients", "p50 µs", "p99 µs", "ops/s", "p50 vaultd/\(other)",
                "ops/s vaultd/\(other)", "p50 vaultd/floor",
                "vaultd CPU µs/op", "machine CPU µs/op",
            ]
            var table: [[String]] = [header]
            for e in rows.sorted(by: {
                ($0.items, $0.system, $0.clients) < ($1.items, $1.system, $1.clients)
            }) {
                var cells = [
                    e.system, e.items == 0 ? "-" : String(e.items), String(e.clients),
                    Self.num(e.p50_us), Self.num(e.p99_us), Self.num(e.ops_per_s),
                ]
                if e.system == "vaultd",
                    let o = find(
                        name, other,
                        items: name.hasPrefix("prefs") || name.hasPrefix("defaults")
                            ? nil : e.items, clients: e.clients)
                {
                    cells += [
                        Self.ratio(e.p50_us / o.p50_us),
                        Self.ratio(e.ops_per_s / o.ops_per_s) + "×",
                    ]
                } else {
                    cells += ["", ""]
                }
                if e.system == "vaultd", let f = floorEntry(of: e) {
                    cells.append(Self.ratio(e.p50_us / f.p50_us))
                } else {
                    cells.append("")
                }
                cells.append(e.server_cpu_us.map { Self.num($0) } ?? "")
                cells.append(e.machine_cpu_us.map { Self.num($0) } ?? "")
                table.append(cells)
            }
            out += Self.render(table)
        }
        out += "\n## start-up and memory\n"
        out +=
            "first answer after launch (\(rss_items.map(String.init) ?? "?") items): "
            + (startup_ms.map { String(format: "%.0f ms", $0) } ?? "not measured") + "\n"
        out +=
            "vaultd RSS after the run (\(rss_items.map(String.init) ?? "?") items): "
            + (rss_bytes.map { String(format: "%.1f MiB", Double($0) / 1_048_576) }
                ?? "not measured") + "\n"
        out += "\n## targets\n"
        for t in targets {
            let mark = t.met.map { $0 ? "met   " : "MISSED" } ?? "n/a   "
            out += "\(mark)  \(t.target): \(t.value)\n"
        }
        return out
    }

    static func num(_ v: Double) -> String {
        if v >= 100 { return String(format: "%.0f", v) }
        if v >= 10 { return String(format: "%.1f", v) }
        if v >= 1 { return String(format: "%.2f", v) }
        return String(format: "%.3f", v)
    }

    static func ratio(_ v: Double) -> String {
        guard v.isFinite else { return "-" }
        if v >= 10 { return String(format: "%.0f", v) }
        if v >= 0.1 { return String(format: "%.2f", v) }
        return String(format: "%.4f", v)
    }

    /// A Markdown table, columns padded.
    static func render(_ rows: [[String]]) -> String {
        let widths = (0..<rows[0].count).map { c in rows.map { $0[c].count }.max() ?? 0 }
        func line(_ r: [String]) -> String {
            "| "
                + r.enumerated().map { i, s in
                    i < 3
                        ? s.padding(toLength: widths[i], withPad: " ", startingAt: 0)
                        : String(repeating: " ", count: widths[i] - s.count) + s
                }.joined(separator: " | ") + " |\n"
        }
        var out = line(rows[0])
        out +=
            "|"
            + widths.enumerated().map { i, w in
                i < 3
                    ? String(repeating: "-", count: w + 2)
                    : String(repeating: "-", count: w + 1) + ":"
            }.joined(separator: "|") + "|\n"
        for r in rows.dropFirst() { out += line(r) }
        return out
    }

    // MARK: targets

    mutating func judge() {
        var t: [Target] = []
        /// The item counts vaultd's `workload` was measured at (a run may leave out lookups or writes).
        func counts(_ workload: String) -> [Int] {
            Set(workloads.filter { $0.system == "vaultd" && $0.name == workload }.map(\.items))
                .sorted()
        }
        func v(_ n: String, _ items: Int?, _ c: Int) -> Entry? {
            find(n, "vaultd", items: items, clients: c)
        }
        func add(_ name: String, _ value: String, _ met: Bool?) {
            t.append(Target(target: name, value: value, met: met))
        }
        func f(_ x: Double) -> String { Self.num(x) }

        // Lookup against the floor, at every item count (the worst counts).
        let floorRatios: [(Int, Double, Double)] = counts("lookup").compactMap { n in
            guard let a = v("lookup", n, 1),
                let fl = find("lookup", "floor", items: n, clients: 1)
                    ?? find("lookup", "floor", clients: 1)
            else { return nil }
            return (n, a.p50_us / fl.p50_us, fl.p50_us)
        }
        if let worst = floorRatios.max(by: { $0.1 < $1.1 }) {
            add(
                "lookup p50 ≤ 0.6× the blocking round trip (1 client)",
                floorRatios.map { "\($0.0): \(Self.ratio($0.1))× (floor \(f($0.2)) µs)" }.joined(
                    separator: ", "), worst.1 <= 0.6)
        } else {
            add("lookup p50 ≤ 0.6× the blocking round trip (1 client)", "not measured", nil)
        }
        // vaultd's own CPU per lookup, all its threads, at every item count and client count.
        let cpu = workloads.filter { $0.system == "vaultd" && $0.name == "lookup" }.compactMap {
            e in e.server_cpu_us.map { (e.items, e.clients, $0) }
        }
        if let worst = cpu.max(by: { $0.2 < $1.2 }) {
            add(
                "vaultd CPU ≤ 20 µs per lookup",
                cpu.map { "\($0.0)/\($0.1)c: \(f($0.2)) µs" }.joined(separator: ", "), worst.2 <= 20
            )
        } else {
            add("vaultd CPU ≤ 20 µs per lookup", "not measured", nil)
        }
        for (n, goal) in [(1000, 20.0), (10000, 100.0)] {
            let name =
                "lookup ≥ \(Int(goal))× faster than the keyring at \(n) items (p50, 1 client)"
            if let a = v("lookup", n, 1), let k = find("lookup", "keyring", items: n, clients: 1) {
                add(
                    name,
                    "\(Self.ratio(k.p50_us / a.p50_us))× (\(f(a.p50_us)) vs \(f(k.p50_us)) µs)",
                    k.p50_us / a.p50_us >= goal)
            } else {
                add(
                    name,
                    "not measured (needs --compare-keyring\(n > 1000 ? " --keyring-items \(n)" : ""))",
                    nil)
            }
        }
        // Through libsecret on the bus: vaultd's Secret Service against gnome-keyring's.
        for (n, goal) in [(1000, 5.0), (10000, 50.0)] {
            let name =
                "Secret Service lookup ≥ \(Int(goal))× faster than gnome-keyring's at \(n) items (p50, 1 client)"
            if let a = v("ss-lookup", n, 1),
                let k = find("ss-lookup", "keyring", items: n, clients: 1)
            {
                add(
                    name,
                    "\(Self.ratio(k.p50_us / a.p50_us))× (\(f(a.p50_us)) vs \(f(k.p50_us)) µs)",
                    k.p50_us / a.p50_us >= goal)
            } else {
                add(name, "not measured (needs --compare-keyring --ss-items \(n))", nil)
            }
        }
        judgeBusFloor(add)
        do {
            let name = "Secret Service store ≥ 100× gnome-keyring's at 1000 items (ops/s, 1 client)"
            if let a = v("ss-store", 1000, 1),
                let k = find("ss-store", "keyring", items: 1000, clients: 1)
            {
                add(
                    name,
                    "\(Self.ratio(a.ops_per_s / k.ops_per_s))× (\(f(a.ops_per_s)) vs \(f(k.ops_per_s))/s)",
                    a.ops_per_s / k.ops_per_s >= 100)
            } else {
                add(name, "not measured (needs --compare-keyring and 1000 in --ss-items)", nil)
            }
        }
        for (c, goal) in [(1, 25000.0), (4, 60000.0)] {
            let name = "≥ \(Int(goal / 1000))k lookups/s with \(c) client\(c > 1 ? "s" : "")"
            let rates = counts("lookup").compactMap { n in
                v("lookup", n, c).map { (n, $0.ops_per_s) }
            }
            if rates.isEmpty {
                add(
                    name,
                    "not measured (needs the lookup part with \(c) client\(c > 1 ? "s" : ""): --only lookup, --clients)",
                    nil)
            } else {
                add(
                    name, rates.map { "\($0.0): \(f($0.1))/s" }.joined(separator: ", "),
                    rates.allSatisfy { $0.1 >= goal })
            }
        }
        for (c, goal) in [(1, 3000.0), (16, 20000.0)] {
            let name = "durable add ≥ \(Int(goal / 1000))k/s with \(c) client\(c > 1 ? "s" : "")"
            let rates = counts("add").compactMap { n in v("add", n, c).map { (n, $0.ops_per_s) } }
            if rates.isEmpty {
                add(
                    name,
                    "not measured (needs the writes part with \(c) client\(c > 1 ? "s" : ""): --only writes, --write-clients)",
                    nil)
            } else {
                add(
                    name, rates.map { "\($0.0): \(f($0.1))/s" }.joined(separator: ", "),
                    rates.allSatisfy { $0.1 >= goal })
            }
        }
        do {
            let name = "durable update ≥ 15k/s with 16 clients"
            let rates = counts("update").compactMap { n in
                v("update", n, 16).map { (n, $0.ops_per_s) }
            }
            if rates.isEmpty {
                add(name, "not measured (needs the writes part with 16 clients)", nil)
            } else {
                add(
                    name, rates.map { "\($0.0): \(f($0.1))/s" }.joined(separator: ", "),
                    rates.allSatisfy { $0.1 >= 15000 })
            }
        }
        if let d = find("fdatasync", "floor", clients: 1) {
            // What bounds one client's durable writes: one fdatasync each at best.
            add(
                "fdatasync p50 of the data directory's disk (the floor of a durable write)",
                "\(f(d.p50_us)) µs, \(f(d.ops_per_s))/s", nil)
        }
        do {
            let name = "durable add ≥ 1000× the keyring's store at 10000 items (ops/s, 1 client)"
            if let a = v("add", 10000, 1), let k = find("add", "keyring", items: 10000, clients: 1)
            {
                add(
                    name,
                    "\(Self.ratio(a.ops_per_s / k.ops_per_s))× (\(f(a.ops_per_s)) vs \(f(k.ops_per_s))/s)",
                    a.ops_per_s / k.ops_per_s >= 1000)
            } else if let a = v("add", 1000, 1),
                let k = find("add", "keyring", items: 1000, clients: 1)
            {
                add(
                    name,
                    "not measured at 10000 (needs --keyring-items 10000); at 1000 items: \(Self.ratio(a.ops_per_s / k.ops_per_s))×",
                    nil)
            } else {
                add(name, "not measured", nil)
            }
        }
        for w in ["lookup", "add"] {
            let name =
                "\(w) p50 flat (≤ 1.5×) from the smallest to the largest item count (1 client)"
            if let lo = counts(w).first, let hi = counts(w).last, lo != hi, let a = v(w, lo, 1),
                let b = v(w, hi, 1)
            {
                add(
                    name,
                    "\(Self.ratio(b.p50_us / a.p50_us))× (\(lo): \(f(a.p50_us)) µs, \(hi): \(f(b.p50_us)) µs)",
                    b.p50_us / a.p50_us <= 1.5)
            } else {
                add(name, "not measured (needs two item counts)", nil)
            }
        }
        if let d = find("defaults-read", "vaultd", clients: 1) {
            let dc =
                find("defaults-read", "dconf", clients: 1).map {
                    "; dconf \(f($0.p50_us * 1000)) ns"
                } ?? ""
            add(
                "Defaults reads from the in-process copy ≤ 1 µs", "\(f(d.p50_us * 1000)) ns\(dc)",
                d.p50_us <= 1)
        } else {
            add("Defaults reads from the in-process copy ≤ 1 µs", "not measured", nil)
        }
        if let a = find("prefs-set", "vaultd", clients: 1),
            let k = find("prefs-set", "dconf", clients: 1)
        {
            add(
                "durable preference writes ≥ 5× faster than dconf's (1 client)",
                "\(Self.ratio(a.ops_per_s / k.ops_per_s))× (\(f(a.ops_per_s)) vs \(f(k.ops_per_s))/s)",
                a.ops_per_s / k.ops_per_s >= 5)
        } else {
            add(
                "durable preference writes ≥ 5× faster than dconf's (1 client)",
                "not measured (needs --compare-keyring and dconf)", nil)
        }
        if let a = workloads.first(where: { $0.name == "item-get-process" && $0.system == "vaultd" }
        ),
            let k = workloads.first(where: {
                $0.name == "item-get-process" && $0.system == "keyring"
            })
        {
            add(
                "vaultctl item get no slower than secret-tool lookup (whole process, p50)",
                "\(f(a.p50_us / 1000)) ms vs \(f(k.p50_us / 1000)) ms", a.p50_us <= k.p50_us)
        } else {
            add(
                "vaultctl item get no slower than secret-tool lookup (whole process, p50)",
                "not measured (needs --compare-keyring)", nil)
        }
        let big = (rss_items ?? 0) >= 100_000
        if let r = rss_bytes {
            add(
                "RSS ≤ 64 MiB with 100k items",
                String(format: "%.1f MiB at %d items", Double(r) / 1_048_576, rss_items ?? 0),
                big ? r <= 64 << 20 : nil)
        } else {
            add("RSS ≤ 64 MiB with 100k items", "not measured", nil)
        }
        if let s = startup_ms {
            add(
                "first answer ≤ 1 s after start with 100k items",
                String(format: "%.0f ms at %d items", s, rss_items ?? 0), big ? s <= 1000 : nil)
        } else {
            add("first answer ≤ 1 s after start with 100k items", "not measured", nil)
        }
        targets = t
    }

    var jsonData: Data {
        let enc = JSONEncoder()
        enc.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return (try? enc.encode(self)) ?? Data("{}".utf8)
    }

    static func machineDescription() -> String {
        var u = utsname()
        uname(&u)
        let release = withUnsafeBytes(of: &u.release) {
            String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self)
        }
        var cpu = "?"
        if let info = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8),
            let line = info.split(separator: "\n").first(where: { $0.hasPrefix("model name") })
        {
            cpu =
                line.split(separator: ":", maxSplits: 1).last.map {
                    $0.trimmingCharacters(in: .whitespaces)
                } ?? "?"
        }
        return "Linux \(release), \(ProcessInfo.processInfo.activeProcessorCount) cores (\(cpu))"
    }
}

extension Report {
    /// The Secret Service's targets relative to the bus (issue 34): at every `--ss-items`
    /// count, a lookup (two calls) against one `ss-ping`, vaultd's CPU per lookup, a store
    /// against one ping plus one `fdatasync` of vaultd's disk plus 200 µs, and 16 writing
    /// clients' stores per second against one client's.
    func judgeBusFloor(_ add: (String, String, Bool?) -> Void) {
        let counts = Set(
            workloads.filter { $0.system == "vaultd" && $0.name.hasPrefix("ss-") }.map(\.items)
        ).sorted()
        func v(_ n: String, _ items: Int, _ c: Int) -> Entry? {
            find(n, "vaultd", items: items, clients: c)
        }
        func f(_ x: Double) -> String { Self.num(x) }
        func judge(_ name: String, _ rows: [(Int, String, Bool)]) {
            if rows.isEmpty {
                add(name, "not measured (needs --only ss)", nil)
            } else {
                add(
                    name, rows.map { "\($0.0): \($0.1)" }.joined(separator: ", "),
                    rows.allSatisfy { $0.2 })
            }
        }
        judge(
            "Secret Service lookup p50 ≤ 2.3× ss-ping (1 client)",
            counts.compactMap { n in
                guard let l = v("ss-lookup", n, 1), let p = v("ss-ping", n, 1) else { return nil }
                let r = l.p50_us / p.p50_us
                return (n, "\(Self.ratio(r))× (\(f(l.p50_us)) / \(f(p.p50_us)) µs)", r <= 2.3)
            })
        judge(
            "vaultd CPU ≤ 150 µs per Secret Service lookup (1 client)",
            counts.compactMap { n in
                guard let cpu = v("ss-lookup", n, 1)?.server_cpu_us else { return nil }
                return (n, "\(f(cpu)) µs", cpu <= 150)
            })
        judge(
            "Secret Service store p50 ≤ ss-ping + fdatasync + 200 µs (1 client)",
            counts.compactMap { n in
                guard let s = v("ss-store", n, 1), let p = v("ss-ping", n, 1),
                    let d = find("fdatasync", "floor", items: n, clients: 1)
                else { return nil }
                let bound = p.p50_us + d.p50_us + 200
                return (
                    n,
                    "\(f(s.p50_us)) µs against \(f(bound)) (ping \(f(p.p50_us)), fdatasync \(f(d.p50_us)))",
                    s.p50_us <= bound
                )
            })
        judge(
            "16 writing clients ≥ 3× one client's Secret Service stores/s",
            counts.compactMap { n in
                guard let one = v("ss-store", n, 1), let many = v("ss-store", n, 16) else {
                    return nil
                }
                let r = many.ops_per_s / one.ops_per_s
                let machine = many.machine_cpu_us.map { ", machine CPU \(f($0)) µs a store" } ?? ""
                return (
                    n,
                    "\(Self.ratio(r))× (\(f(many.ops_per_s)) / \(f(one.ops_per_s))/s\(machine))",
                    r >= 3
                )
            })
    }
}
