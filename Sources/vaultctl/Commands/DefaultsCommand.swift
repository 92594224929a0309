import Foundation
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// `vaultctl defaults [-currentHost | -host NAME] VERB …`, with defaults(1)'s verbs, type
/// flags, domain forms (`-g`, `-app NAME`) and output.
struct DefaultsCommand: Command {
    enum Verb: String, CaseIterable {
        case read
        case readType = "read-type"
        case write, delete, rename, domains, find, `import`, export
    }
    var verb: Verb
    var words: [String]
    /// `write DOMAIN KEY …`: the value words after the key (and after a container flag),
    /// parsed in `init`.
    var writeValues: [PlistValue] = []
    /// `-currentHost` or `-host NAME`: the by-host preferences of that host (`Host`).
    var host: Host?
    /// `-app NAME` in place of the domain: the app's domain, found when run (`appDomain`).
    var appName: String?
    /// `read`, `domains`, `find` with `--json`: JSON instead of defaults(1)'s text.
    var json = false

    /// Whose by-host preferences: defaults(1) keeps them apart from the domain's own
    /// (~/Library/Preferences/ByHost/DOMAIN.HOSTUUID.plist). Here a by-host domain is the
    /// domain named `DOMAIN@host:HOST` (`byHostSeparator`), HOST being this machine's ID
    /// (/etc/machine-id, as the hardware UUID is on macOS) for `-currentHost`, or NAME as
    /// given for `-host NAME`.
    enum Host: Equatable {
        case current
        case named(String)
    }

    /// What joins a domain and a host in a by-host domain's name.
    static let byHostSeparator = "@host:"

    init(_ a: inout Arguments) throws {
        // defaults(1)'s host options come before the verb.
        while let w = a.positional(oneOf: ["-currentHost", "-host"]) {
            guard host == nil else {
                throw UsageError(
                    message: "-currentHost and -host NAME exclude each other and are given once")
            }
            if w == "-currentHost" {
                host = .current
            } else {
                guard let name = a.positional(), !name.isEmpty, !name.hasPrefix("-") else {
                    throw UsageError(message: "-host needs a host NAME")
                }
                host = .named(name)
            }
        }
        verb = try a.verb(of: "defaults")
        // defaults(1) options start with a single dash; take the words as they come.
        words = a.rest()
        if [.read, .domains, .find].contains(verb), let i = words.firstIndex(of: "--json") {
            json = true
            words.remove(at: i)
        }
        if ["-currentHost", "-host"].contains(words.first ?? "") {
            throw UsageError(
                message:
                    "\(words[0]) goes before the verb: vaultctl defaults \(words[0]) \(verb.rawValue) …"
            )
        }
        // `-app NAME` stands for the domain: NAME holds its place until `run` finds the app.
        if verb != .domains && verb != .find && words.first == "-app" {
            guard words.count >= 2, !words[1].isEmpty else {
                throw UsageError(message: "-app needs an app's ID or name")
            }
            appName = words[1]
            words.removeFirst()
        }
        let counts: [Verb: ClosedRange<Int>] = [
            .read: 0...2, .readType: 2...2, .write: 2...Int.max, .delete: 1...2, .rename: 3...3,
            .domains: 0...0,
            .find: 1...1, .import: 2...2, .export: 2...2,
        ]
        guard counts[verb]!.contains(words.count) else {
            throw UsageError(message: "wrong number of arguments for defaults \(verb.rawValue)")
        }
        if !words.isEmpty && verb != .domains && verb != .find && appName == nil {
            words[0] = Self.domainName(words[0])
        }
        // A value that cannot be what its flag says is refused before any connection (it came
        // only once connected: with no vaultd, exit 1 "cannot connect", not 65).
        if verb == .write && words.count > 2 {
            let containers = ["-array", "-array-add", "-dict", "-dict-add"]
            writeValues = try Self.values(
                Array(words.dropFirst(containers.contains(words[2]) ? 3 : 2)))
        }
    }

    static func domainName(_ w: String) -> String {
        ["-g", "-globalDomain", "NSGlobalDomain"].contains(w) ? "NSGlobalDomain" : w
    }

    /// This machine's ID (/etc/machine-id, else D-Bus's copy), which keys `-currentHost`.
    static func machineID() throws -> String {
        for path in ["/etc/machine-id", "/var/lib/dbus/machine-id"] {
            guard let data = try? FileDescriptor.readFile(path, limit: 4096) else { continue }
            let id = String(decoding: data, as: UTF8.self).trimmingCharacters(
                in: .whitespacesAndNewlines)
            if id.utf8.count == 32
                && id.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) })
            {
                return id
            }
        }
        throw LocalFailure(
            description:
                "this machine has no machine ID (/etc/machine-id) to key -currentHost preferences by; name the host with -host NAME"
        )
    }

    /// The suffix of this command's by-host domains (`@host:HOST`), nil without a host option.
    func hostSuffix() throws -> String? {
        switch host {
        case nil: return nil
        case .current: return Self.byHostSeparator + (try Self.machineID())
        case .named(let name): return Self.byHostSeparator + name
        }
    }

    /// The domain `-app NAME` names, as defaults(1) finds an application's: the app whose ID is
    /// NAME; else the one whose executable is NAME (a path), or whose executable's file name
    /// is NAME; else the one whose ID's last component is NAME (`Notes` for org.example.Notes),
    /// letter case aside. Several apps matching: refused, naming them (exit 64); none:
    /// AppNotFound (exit 44).
    static func appDomain(_ name: String, _ apps: [AppInfo]) throws -> String {
        if let exact = apps.first(where: { $0.appID.sameBytes(name) }) { return exact.appID }
        let tests: [(AppInfo) -> Bool] = [
            { $0.executable.map { $0.sameBytes(name) } ?? false },
            {
                $0.executable.map {
                    ($0.split(separator: "/").last.map(String.init) ?? $0).sameBytes(name)
                } ?? false
            },
            {
                ($0.appID.split(separator: ".").last.map(String.init) ?? $0.appID).lowercased()
                    == name.lowercased()
            },
        ]
        for test in tests {
            let found = apps.filter(test)
            if found.count == 1 { return found[0].appID }
            if found.count > 1 {
                throw UsageError(
                    message:
                        "-app \(name) matches \(found.count) apps (\(found.map(\.appID).joined(separator: ", "))): give the app ID"
                )
            }
        }
        throw VaultError(
            .appNotFound,
            "Couldn't find an application named \"\(name)\"; defaults unchanged (vaultctl app list lists the apps)"
        )
    }

    /// The domains this command lists (`read` without a domain, `domains`, `find`): without a
    /// host option the domains that are no host's; with one, that host's, named without the
    /// suffix, as defaults(1) lists ByHost domains. Each with the name it is shown by.
    func listedDomains(_ prefs: Preferences) throws -> [(shown: String, stored: String)] {
        let suffix = try hostSuffix()
        return try prefs.domains().compactMap { (d: String) -> (shown: String, stored: String)? in
            guard let suffix else { return d.contains(Self.byHostSeparator) ? nil : (d, d) }
            return d.hasSuffix(suffix) && d.utf8.count > suffix.utf8.count
                ? (String(d.dropLast(suffix.count)), d) : nil
        }
    }

    /// A value as `--json` prints it: vaultd's tagged JSON, which keeps every plist type
    /// (`{"real": 0.8}`, `{"date": "…"}`, `{"data": "<base64>"}`; docs/preferences.md).
    static func jsonObject(_ values: PlistDictionary) -> JSON {
        var o = JSONObject()
        for (k, v) in values { o[k] = v.tagged }
        return .object(o)
    }

    func run(_ context: Context) throws {
        let vault = try context.vault()
        let prefs = vault.preferences
        var words = self.words
        // The domain named: `-app NAME`'s, `-g`'s, or as given; a host's by-host one with a host option.
        if verb != .domains && verb != .find && (!words.isEmpty || appName != nil) {
            var domain = try appName.map { try Self.appDomain($0, vault.apps.list()) } ?? words[0]
            if let suffix = try hostSuffix() { domain += suffix }
            words[0] = domain  // (after `-app`, NAME holds the domain's place)
        }
        // Errors name the domain as it was given (without the host suffix).
        let given = appName ?? self.words.first ?? ""
        func notFound(_ key: String?) -> VaultError { self.notFound(domain: given, key: key) }
        switch verb {
        case .read:
            var damaged: [DamagedValueName] = []
            if words.isEmpty {
                var all: PlistDictionary = [:]
                var object = JSONObject()
                for d in try listedDomains(prefs) {
                    let values = try Self.readable(prefs, d.stored, noting: &damaged)
                    all[d.shown] = .dict(values)
                    object[d.shown] = Self.jsonObject(values)
                }
                print(json ? JSON.object(object).text : PlistText.describe(.dict(all)))
            } else if words.count == 1 {
                let values = try Self.readable(prefs, words[0], noting: &damaged)
                guard !values.isEmpty || !damaged.isEmpty else { throw notFound(nil) }
                print(json ? Self.jsonObject(values).text : PlistText.describe(.dict(values)))
            } else {
                guard let v = try prefs.value(domain: words[0], key: words[1]) else {
                    throw notFound(words[1])
                }
                print(json ? v.tagged.text : PlistText.describeTop(v))
            }
            try Self.report(damaged, "not shown")
        case .readType:
            guard let v = try prefs.value(domain: words[0], key: words[1]) else {
                throw notFound(words[1])
            }
            print("Type is \(v.typeName)")
        case .write:
            try write(prefs, words)
        case .delete:
            if words.count == 1 {
                guard try prefs.removeDomain(words[0]) > 0 else { throw notFound(nil) }
            } else {
                // A damaged value is there to delete: deleting it is how it is mended.
                do {
                    guard try prefs.value(domain: words[0], key: words[1]) != nil else {
                        throw notFound(words[1])
                    }
                } catch let e as VaultError where e.code == .valueDamaged {}
                try prefs.remove(domain: words[0], key: words[1])
            }
        case .rename:
            guard let v = try prefs.value(domain: words[0], key: words[1]) else {
                throw notFound(words[1])
            }
            // A key renamed to itself stays (removing the old name would remove it). Keys are
            // byte-exact: a name differing only in Unicode normalisation is another key.
            guard !words[1].sameBytes(words[2]) else { return }
            try prefs.set(v, domain: words[0], key: words[2])
            try prefs.remove(domain: words[0], key: words[1])
        case .domains:
            // As defaults(1): every domain but the global one, sorted (by bytes).
            let names = try listedDomains(prefs).map(\.shown).filter { $0 != "NSGlobalDomain" }
                .sorted { $0.bytesPrecede($1) }
            print(json ? JSON.array(names.map { .string($0) }).text : names.joined(separator: ", "))
        case .find:
            try find(prefs, words[0])
        case .import:
            try prefs.importDomain(words[0], plist: try Self.readPlist(words[1]))
        case .export:
            let export = try prefs.exportDomainReportingDamage(words[0], binary: words[1] != "-")
            if words[1] == "-" {
                StandardOutput.write(export.plist)
            } else {
                try Self.writeExport(export.plist, to: words[1])
            }
            try Self.report(
                export.damaged.map { DamagedValueName(domain: words[0], key: $0) }, "not exported")
        }
    }

    /// A stored value vaultd cannot read (damaged on disk), by domain and key.
    struct DamagedValueName {
        var domain: String
        var key: String
        /// `key "K" of domain "D"`, each quoted as JSON (they may hold anything).
        var description: String {
            "key \(JSON.string(key).text) of domain \(JSON.string(domain).text)"
        }
    }

    /// `domain`'s values that read; the keys of those that do not are added to `damaged`.
    static func readable(
        _ prefs: Preferences, _ domain: String, noting damaged: inout [DamagedValueName]
    ) throws -> PlistDictionary {
        let found = try prefs.valuesReportingDamage(domain: domain)
        damaged += found.damaged.map { DamagedValueName(domain: domain, key: $0) }
        return found.values
    }

    /// Names each damaged value on stderr (`what`: "not shown", "not exported", …), then
    /// fails with ValueDamaged (exit 74) when there was any: the output is not all of it.
    static func report(_ damaged: [DamagedValueName], _ what: String) throws {
        guard !damaged.isEmpty else { return }
        for d in damaged {
            StandardOutput.writeError("vaultctl: damaged, \(what): \(d.description)\n")
        }
        throw VaultError(
            .valueDamaged,
            "\(damaged.count) stored value(s) do not read (damaged on disk) and were \(what): write each again, delete it (defaults delete DOMAIN KEY) or restore a backup; vaultctl doctor lists them"
        )
    }

    /// Writes an export to `path` as a shell's `> path` would, and atomically where it can: a
    /// path that is, or leads by symlinks to, something other than a regular file (a FIFO, a
    /// terminal), and any path in /dev or /proc (`/dev/stdout`, `/dev/fd/3`), is written
    /// through, never replaced; otherwise the file the path leads to is replaced by a complete new one renamed over it (a symlink
    /// stays a symlink), with that file's permissions (a new file: 0666 less the umask).
    /// Foundation's `.atomic` write renamed a new 0644 file over `path` itself: a symlink
    /// became a regular file and its target kept the old export, a FIFO's reader got nothing,
    /// a file made 0600 became readable by others, and as root `/dev/stdout` became a file.
    /// A failure is a LocalFailure naming the path and strerror.
    static func writeExport(_ data: Data, to path: String) throws {
        func failure(_ code: Int32) -> LocalFailure {
            LocalFailure(description: "cannot write \(path): \(String(cString: strerror(code)))")
        }
        let st = try? SystemCall.stat(path)
        func writeThrough(flags: Int32) throws {
            do {
                try FileDescriptor(opening: path, O_WRONLY | O_CLOEXEC | flags, mode: 0o666)
                    .writeAll(data)
            } catch let e as Errno { throw failure(e.code) }
        }
        if let st,
            (st.st_mode & S_IFMT) != S_IFREG || path.hasPrefix("/dev/")
                || path.hasPrefix("/proc/")
        {
            return try writeThrough(flags: O_TRUNC)
        }
        var target = path
        let mode: mode_t
        if let st, let resolved = try? SystemCall.realpath(path) {
            target = resolved
            mode = st.st_mode & 0o7777
        } else {
            // A symlink whose file does not exist yet: creating that file through it.
            if let link = try? SystemCall.lstat(path), (link.st_mode & S_IFMT) == S_IFLNK {
                return try writeThrough(flags: O_CREAT | O_TRUNC)
            }
            let mask = umask(0)
            umask(mask)
            mode = 0o666 & ~mask
        }
        let slash = target.lastIndex(of: "/")
        let directory = slash.map { String(target[..<$0]) } ?? "."
        let name = slash.map { String(target[target.index(after: $0)...]) } ?? target
        let made: (fd: Int32, path: String)
        do {
            made = try SystemCall.makeTemporaryFile(
                "\(directory.isEmpty ? "" : directory)/.\(name).XXXXXX")
        } catch { throw failure(error.code) }
        do {
            do {
                let fd = FileDescriptor(adopting: made.fd)
                try fd.writeAll(data)
                try fd.setMode(mode)
                try fd.sync()
            }
            try SystemCall.rename(made.path, target)
        } catch let e as Errno {
            try? SystemCall.unlink(made.path)
            throw failure(e.code)
        }
    }

    /// The largest plist `defaults import` reads, from a file or stdin alike (bytes): a domain
    /// holds at most 4 MiB of values, which as XML can be several times that (`&amp;` for
    /// each `&`, a key and a tag around each tiny value).
    static let maximumImportSize = 64 << 20

    /// The plist to import from `path` (`-`: stdin); one that cannot be read is a local
    /// failure saying why (strerror; "File too large" past `maximumImportSize`).
    static func readPlist(_ path: String) throws -> Data {
        do {
            return path == "-"
                ? try FileDescriptor.readAll(inherited: STDIN_FILENO, limit: maximumImportSize)
                : try FileDescriptor.readFile(path, limit: maximumImportSize)
        } catch let e as Errno {
            let size =
                e.code == Errno.tooLarge
                ? " (a plist to import may be at most \(maximumImportSize >> 20) MiB)" : ""
            throw LocalFailure(
                description:
                    "cannot read \(path == "-" ? "standard input" : path): \(String(cString: strerror(e.code)))\(size)"
            )
        }
    }

    private func notFound(domain: String, key: String?) -> VaultError {
        let what =
            key.map { "The domain/default pair of (\(domain), \($0)) does not exist" }
            ?? "Domain \(domain) does not exist"
        return VaultError(.keyNotFound, what)
    }

    private func write(_ prefs: Preferences, _ words: [String]) throws {
        if words.count == 2 {
            // defaults(1)'s `write DOMAIN '{ key = value; ... }'`: the domain becomes that
            // dictionary, replacing what it held (as an import does).
            guard case .dict(let values) = try Self.parsed(words[1]) else {
                throw VaultError(
                    .invalidValue,
                    "defaults write \(words[0]) with no key takes a dictionary, e.g. '{ key = value; }'"
                )
            }
            _ = try prefs.importDomain(words[0], values: values)
            return
        }
        let domain = words[0]
        let key = words[1]
        let flag = words[2]
        switch flag {
        case "-array", "-array-add":
            var items = writeValues
            if flag == "-array-add", let existing = try prefs.value(domain: domain, key: key) {
                guard case .array(let old) = existing else {
                    throw VaultError(
                        .invalidValue, "value for key \(key) is not an array; cannot append to it")
                }
                items = old + items
            }
            try prefs.set(.array(items), domain: domain, key: key)
        case "-dict", "-dict-add":
            // As defaults(1): each key, then its value, each a bare value or a type flag with
            // its value (`-dict General -bool true OpenWith -bool true`).
            let values = writeValues
            guard values.count % 2 == 0 else {
                throw UsageError(message: "\(flag) needs KEY VALUE pairs")
            }
            var dict: PlistDictionary = [:]
            if flag == "-dict-add", let existing = try prefs.value(domain: domain, key: key) {
                guard case .dict(let old) = existing else {
                    throw VaultError(
                        .invalidValue, "value for key \(key) is not a dictionary; cannot add to it")
                }
                dict = old
            }
            var i = 0
            while i < values.count {
                guard case .string(let k) = values[i] else {
                    throw UsageError(message: "\(flag): dictionary keys must be strings")
                }
                dict[k] = values[i + 1]
                i += 2
            }
            try prefs.set(.dict(dict), domain: domain, key: key)
        default:
            let values = writeValues
            guard values.count == 1 else {
                throw UsageError(message: "defaults write takes one value (use -array for several)")
            }
            try prefs.set(values[0], domain: domain, key: key)
        }
    }

    /// Values from words, each a bare plist-text value or a type flag followed by its value.
    static func values(_ words: [String]) throws -> [PlistValue] {
        var out: [PlistValue] = []
        var i = 0
        while i < words.count {
            let w = words[i]
            let typed = [
                "-string", "-int", "-integer", "-float", "-bool", "-boolean", "-date", "-data",
            ]
            if typed.contains(w) {
                guard i + 1 < words.count else { throw UsageError(message: "\(w) needs a value") }
                out.append(try typedValue(w, words[i + 1]))
                i += 2
            } else {
                out.append(try parsed(w))
                i += 1
            }
        }
        return out
    }

    /// A bare value: old-style property-list text when it starts as one (`(`, `{`, `<`, `"`),
    /// else the plain string. Text that starts as a property list but does not parse is an
    /// error, as defaults(1) says "Could not parse", not a string written in its place.
    static func parsed(_ w: String) throws -> PlistValue {
        let value = PropertyListCodec.parseText(w)
        if case .string(let s) = value, s == w, let first = w.first, "({<\"".contains(first) {
            throw VaultError(.invalidValue, "Could not parse: \(w).  Try single-quoting it.")
        }
        return value
    }

    /// The value of a type flag. A value that cannot be what the flag says (`-int abc`, `-float
    /// nan`, `-data 0g`) is bad input, exit 65 (EX_DATAERR), as vaultd's InvalidValue is: the
    /// command line's shape is right, the data is not.
    static func typedValue(_ flag: String, _ v: String) throws -> PlistValue {
        switch flag {
        case "-string": return .string(v)
        case "-int", "-integer":
            if let i = Int64(v) { return .integer(i) }
            if let u = UInt64(v) { return .unsignedInteger(u) }
            throw InputError(message: "\(shown(v)) is not an integer")
        case "-float":
            return .real(try decimalNumber(v))
        case "-bool", "-boolean":
            switch v.lowercased() {
            case "true", "yes", "1": return .bool(true)
            case "false", "no", "0": return .bool(false)
            default: throw InputError(message: "\(shown(v)) is not a boolean (true/false/yes/no)")
            }
        case "-date":
            guard let d = parseDate(v) else {
                throw InputError(
                    message:
                        "\(shown(v)) is not a date in years 0 to 9999 (use 2026-01-31 12:00:00 +0000 or ISO 8601)"
                )
            }
            return .date(d)
        case "-data":
            // Hex digits only (spaces between them allowed): not UInt8(_:radix:), which takes a
            // sign ("+f" is 15).
            func nibble(_ c: UInt8) -> UInt8? {
                switch c {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
                default: nil
                }
            }
            let digits = v.utf8.filter { $0 != UInt8(ascii: " ") }.map(nibble)
            guard !digits.contains(nil) else { throw InputError(message: "-data needs hex digits") }
            let hex = digits.map { $0! }
            guard hex.count % 2 == 0 else {
                throw InputError(message: "-data needs an even number of hex digits")
            }
            return .data(
                Data(stride(from: 0, to: hex.count, by: 2).map { hex[$0] << 4 | hex[$0 + 1] }))
        default:
            throw UsageError(message: "unknown type flag \(flag)")
        }
    }

    /// A rejected value as an error names it: quoted when short and printable ASCII, else "the
    /// value" (a long or binary argument is not echoed whole).
    static func shown(_ v: String) -> String {
        !v.isEmpty && v.count <= 24
            && v.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F })
            ? "'\(v)'" : "the value"
    }

    /// A `-float` argument: a finite decimal number, `[+-]digits[.digits][e[+-]digits]` (digits
    /// on at least one side of the point), as defaults(1) takes. Not Double(_:), which also
    /// takes hexadecimal (`0x10` is 16), `inf`, `nan`, and rounds `1e400` to infinity. The
    /// error says what is wrong, quoting the value only when it is short.
    static func decimalNumber(_ v: String) throws -> Double {
        func refuse(_ why: String) -> InputError {
            InputError(message: "-float needs a finite decimal number: \(shown(v)) \(why)")
        }
        let u = Array(v.utf8)
        func isDigit(_ c: UInt8) -> Bool { c >= 48 && c <= 57 }
        var i = 0
        if i < u.count, u[i] == UInt8(ascii: "+") || u[i] == UInt8(ascii: "-") { i += 1 }
        let intStart = i
        while i < u.count, isDigit(u[i]) { i += 1 }
        var digits = i - intStart
        if i < u.count, u[i] == UInt8(ascii: ".") {
            i += 1
            let fracStart = i
            while i < u.count, isDigit(u[i]) { i += 1 }
            digits += i - fracStart
        }
        var valid = digits > 0
        if valid, i < u.count, u[i] == UInt8(ascii: "e") || u[i] == UInt8(ascii: "E") {
            i += 1
            if i < u.count, u[i] == UInt8(ascii: "+") || u[i] == UInt8(ascii: "-") { i += 1 }
            let expStart = i
            while i < u.count, isDigit(u[i]) { i += 1 }
            valid = i > expStart
        }
        guard valid, i == u.count else {
            let lower = v.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "+-"))
            if lower.hasPrefix("0x") { throw refuse("is hexadecimal") }
            if ["inf", "infinity", "nan", "snan"].contains(lower) { throw refuse("is not finite") }
            throw refuse(v.isEmpty ? "is empty" : "is not a decimal number")
        }
        guard let d = Double(v), d.isFinite else {
            throw refuse("is out of range (beyond ±1.8e308)")
        }
        return d
    }

    /// A `-date` argument: `yyyy-MM-dd HH:mm:ss`, `yyyy-MM-dd`, or ISO 8601 `yyyy-MM-ddTHH:mm:ss`
    /// with optional fractional seconds; each with `Z`, an offset `±HHMM` or `±HH:MM` (after a
    /// space or not), or nothing for UTC. Days are proleptic Gregorian, as `PlistDate` counts them
    /// (not DateFormatter, whose calendar is Julian before 1582). Nil outside years 0 to 9999.
    static func parseDate(_ v: String) -> Date? {
        if let d = PlistDate.parse(v) { return d }
        var u = Array(v.utf8)
        var offset = 0
        func digits(_ r: Range<Int>) -> Int? {
            r.allSatisfy { u.indices.contains($0) && u[$0] >= 48 && u[$0] <= 57 }
                ? r.reduce(0) { $0 * 10 + Int(u[$1] - 48) } : nil
        }
        // A trailing offset: ±HHMM or ±HH:MM.
        let colon = u.count >= 6 && u[u.count - 3] == UInt8(ascii: ":")
        let signAt = u.count - (colon ? 6 : 5)
        if signAt > 10, u[signAt] == UInt8(ascii: "+") || u[signAt] == UInt8(ascii: "-") {
            guard let hh = digits((signAt + 1)..<(signAt + 3)),
                let mm = digits((u.count - 2)..<u.count), hh < 24, mm < 60
            else { return nil }
            offset = (u[signAt] == UInt8(ascii: "-") ? -1 : 1) * (hh * 3600 + mm * 60)
            u.removeSubrange(signAt...)
            if u.last == UInt8(ascii: " ") { u.removeLast() }
        } else if u.last == UInt8(ascii: "Z") {
            u.removeLast()
        }
        if u.count == 10 { u += Array("T00:00:00".utf8) }
        if u.count >= 19, u[10] == UInt8(ascii: " ") { u[10] = UInt8(ascii: "T") }
        guard let local = PlistDate.parse(String(decoding: u, as: UTF8.self) + "Z") else {
            return nil
        }
        let t = local.timeIntervalSinceReferenceDate - Double(offset)
        return PlistDate.supportedRange.contains(t) ? Date(timeIntervalSinceReferenceDate: t) : nil
    }

    private func find(_ prefs: Preferences, _ word: String) throws {
        let needle = word.lowercased()
        func contains(_ v: PlistValue) -> Bool {
            switch v {
            case .string(let s): return s.lowercased().contains(needle)
            case .array(let a): return a.contains(where: contains)
            case .dict(let d):
                return d.contains { $0.key.lowercased().contains(needle) || contains($0.value) }
            default: return false
            }
        }
        var found = JSONObject()
        var damaged: [DamagedValueName] = []
        for domain in try listedDomains(prefs) {
            let values = try Self.readable(prefs, domain.stored, noting: &damaged)
            var hits = values.filter { $0.key.lowercased().contains(needle) || contains($0.value) }
            if domain.shown.lowercased().contains(needle) { hits = values }
            guard !hits.isEmpty else { continue }
            found[domain.shown] = Self.jsonObject(hits)
            if !json {
                print(
                    "Found \(hits.count) keys in domain '\(domain.shown)': \(PlistText.describe(.dict(hits)))"
                )
            }
        }
        // --json: every domain with a hit, and its matching keys ({} when none).
        if json { print(JSON.object(found).text) }
        // As defaults(1) (on stderr, exit 0). Damaged values were not searched: named, and
        // the exit status says so.
        if found.isEmpty {
            StandardOutput.writeError("No domain, key, nor value containing '\(word)'\n")
        }
        try Self.report(damaged, "not searched")
    }
}
