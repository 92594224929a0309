import Foundation
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// `vaultctl defaults …`, with defaults(1)'s verbs, type flags and output.
struct DefaultsCommand: Command {
    enum Verb: String, CaseIterable { case read, readType = "read-type", write, delete, rename, domains, find, `import`, export }
    var verb: Verb
    var words: [String]
    /// `write DOMAIN KEY …`: the value words after the key (and after a container flag),
    /// parsed in `init`.
    var writeValues: [PlistValue] = []

    init(_ a: inout Arguments) throws {
        verb = try a.verb(of: "defaults")
        // defaults(1) options start with a single dash; take the words as they come.
        words = a.rest()
        let counts: [Verb: ClosedRange<Int>] = [
            .read: 0...2, .readType: 2...2, .write: 2...Int.max, .delete: 1...2, .rename: 3...3, .domains: 0...0,
            .find: 1...1, .import: 2...2, .export: 2...2,
        ]
        guard counts[verb]!.contains(words.count) else { throw UsageError(message: "wrong number of arguments for defaults \(verb.rawValue)") }
        if !words.isEmpty && verb != .domains && verb != .find { words[0] = Self.domainName(words[0]) }
        // A value that cannot be what its flag says is a usage error before any connection
        // (it came only once connected: with no vaultd, exit 1 "cannot connect", not 64).
        if verb == .write && words.count > 2 {
            let containers = ["-array", "-array-add", "-dict", "-dict-add"]
            writeValues = try Self.values(Array(words.dropFirst(containers.contains(words[2]) ? 3 : 2)))
        }
    }

    static func domainName(_ w: String) -> String {
        ["-g", "-globalDomain", "NSGlobalDomain"].contains(w) ? "NSGlobalDomain" : w
    }

    func run(_ context: Context) throws {
        let prefs = try context.vault().preferences
        switch verb {
        case .read:
            var damaged: [DamagedValueName] = []
            if words.isEmpty {
                var all: PlistDictionary = [:]
                for d in try prefs.domains() { all[d] = .dict(try Self.readable(prefs, d, noting: &damaged)) }
                print(PlistText.describe(.dict(all)))
            } else if words.count == 1 {
                let values = try Self.readable(prefs, words[0], noting: &damaged)
                guard !values.isEmpty || !damaged.isEmpty else { throw notFound(domain: words[0], key: nil) }
                print(PlistText.describe(.dict(values)))
            } else {
                guard let v = try prefs.value(domain: words[0], key: words[1]) else { throw notFound(domain: words[0], key: words[1]) }
                print(PlistText.describeTop(v))
            }
            try Self.report(damaged, "not shown")
        case .readType:
            guard let v = try prefs.value(domain: words[0], key: words[1]) else { throw notFound(domain: words[0], key: words[1]) }
            print("Type is \(v.typeName)")
        case .write:
            try write(prefs)
        case .delete:
            if words.count == 1 {
                guard try prefs.removeDomain(words[0]) > 0 else { throw notFound(domain: words[0], key: nil) }
            } else {
                // A damaged value is there to delete: deleting it is how it is mended.
                do {
                    guard try prefs.value(domain: words[0], key: words[1]) != nil else { throw notFound(domain: words[0], key: words[1]) }
                } catch let e as VaultError where e.code == .valueDamaged {}
                try prefs.remove(domain: words[0], key: words[1])
            }
        case .rename:
            guard let v = try prefs.value(domain: words[0], key: words[1]) else { throw notFound(domain: words[0], key: words[1]) }
            // A key renamed to itself stays (removing the old name would remove it). Keys are
            // byte-exact: a name differing only in Unicode normalisation is another key.
            guard !words[1].sameBytes(words[2]) else { return }
            try prefs.set(v, domain: words[0], key: words[2])
            try prefs.remove(domain: words[0], key: words[1])
        case .domains:
            // As defaults(1): every domain but the global one, sorted.
            print(try prefs.domains().filter { $0 != "NSGlobalDomain" }.sorted().joined(separator: ", "))
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
            try Self.report(export.damaged.map { DamagedValueName(domain: words[0], key: $0) }, "not exported")
        }
    }

    /// A stored value vaultd cannot read (damaged on disk), by domain and key.
    struct DamagedValueName {
        var domain: String
        var key: String
        /// `key "K" of domain "D"`, each quoted as JSON (they may hold anything).
        var description: String { "key \(JSON.string(key).text) of domain \(JSON.string(domain).text)" }
    }

    /// `domain`'s values that read; the keys of those that do not are added to `damaged`.
    static func readable(_ prefs: Preferences, _ domain: String, noting damaged: inout [DamagedValueName]) throws -> PlistDictionary {
        let found = try prefs.valuesReportingDamage(domain: domain)
        damaged += found.damaged.map { DamagedValueName(domain: domain, key: $0) }
        return found.values
    }

    /// Names each damaged value on stderr (`what`: "not shown", "not exported", …), then
    /// fails with ValueDamaged (exit 74) when there was any: the output is not all of it.
    static func report(_ damaged: [DamagedValueName], _ what: String) throws {
        guard !damaged.isEmpty else { return }
        for d in damaged { StandardOutput.writeError("vaultctl: damaged, \(what): \(d.description)\n") }
        throw VaultError(
            .valueDamaged,
            "\(damaged.count) stored value(s) do not read (damaged on disk) and were \(what): write each again, delete it (defaults delete DOMAIN KEY) or restore a backup; vaultctl doctor lists them")
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
        func failure(_ code: Int32) -> LocalFailure { LocalFailure(description: "cannot write \(path): \(String(cString: strerror(code)))") }
        var st = stat()
        let exists = stat(path, &st) == 0
        func writeAll(_ fd: Int32) throws {
            do { try FileDescriptor.writeAll(fd, data) } catch let e as Errno { throw failure(e.code) }
        }
        func writeThrough(flags: Int32) throws {
            let fd = open(path, O_WRONLY | O_CLOEXEC | flags, 0o666)
            guard fd >= 0 else { throw failure(errno) }
            defer { close(fd) }
            try writeAll(fd)
        }
        if exists && ((st.st_mode & S_IFMT) != S_IFREG || path.hasPrefix("/dev/") || path.hasPrefix("/proc/")) {
            return try writeThrough(flags: O_TRUNC)
        }
        var target = path
        let mode: mode_t
        if exists, let resolved = realpath(path, nil) {
            target = String(cString: resolved)
            free(resolved)
            mode = st.st_mode & 0o7777
        } else {
            // A symlink whose file does not exist yet: creating that file through it.
            var link = stat()
            if lstat(path, &link) == 0 && (link.st_mode & S_IFMT) == S_IFLNK { return try writeThrough(flags: O_CREAT | O_TRUNC) }
            let mask = umask(0)
            umask(mask)
            mode = 0o666 & ~mask
        }
        let slash = target.lastIndex(of: "/")
        let directory = slash.map { String(target[..<$0]) } ?? "."
        let name = slash.map { String(target[target.index(after: $0)...]) } ?? target
        var template = Array("\(directory.isEmpty ? "" : directory)/.\(name).XXXXXX".utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { throw failure(errno) }
        let temporary = String(cString: template)
        do {
            defer { close(fd) }
            try writeAll(fd)
            guard fchmod(fd, mode) == 0 else { throw failure(errno) }
            guard fsync(fd) == 0 else { throw failure(errno) }
            guard rename(temporary, target) == 0 else { throw failure(errno) }
        } catch {
            unlink(temporary)
            throw error
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
                ? try FileDescriptor.readAll(STDIN_FILENO, limit: maximumImportSize)
                : try FileDescriptor.readFile(path, limit: maximumImportSize)
        } catch let e as Errno {
            let size = e.code == EFBIG ? " (a plist to import may be at most \(maximumImportSize >> 20) MiB)" : ""
            throw LocalFailure(description: "cannot read \(path == "-" ? "standard input" : path): \(String(cString: strerror(e.code)))\(size)")
        }
    }

    private func notFound(domain: String, key: String?) -> VaultError {
        let what = key.map { "The domain/default pair of (\(domain), \($0)) does not exist" } ?? "Domain \(domain) does not exist"
        return VaultError(.keyNotFound, what)
    }

    private func write(_ prefs: Preferences) throws {
        if words.count == 2 {
            // defaults(1)'s `write DOMAIN '{ key = value; ... }'`: the domain becomes that
            // dictionary, replacing what it held (as an import does).
            guard case .dict(let values) = try Self.parsed(words[1]) else {
                throw VaultError(.invalidValue, "defaults write \(words[0]) with no key takes a dictionary, e.g. '{ key = value; }'")
            }
            _ = try prefs.importDomain(words[0], values: values)
            return
        }
        let domain = words[0], key = words[1]
        let flag = words[2]
        switch flag {
        case "-array", "-array-add":
            var items = writeValues
            if flag == "-array-add", let existing = try prefs.value(domain: domain, key: key) {
                guard case .array(let old) = existing else {
                    throw VaultError(.invalidValue, "value for key \(key) is not an array; cannot append to it")
                }
                items = old + items
            }
            try prefs.set(.array(items), domain: domain, key: key)
        case "-dict", "-dict-add":
            // As defaults(1): each key, then its value, each a bare value or a type flag with
            // its value (`-dict General -bool true OpenWith -bool true`).
            let values = writeValues
            guard values.count % 2 == 0 else { throw UsageError(message: "\(flag) needs KEY VALUE pairs") }
            var dict: PlistDictionary = [:]
            if flag == "-dict-add", let existing = try prefs.value(domain: domain, key: key) {
                guard case .dict(let old) = existing else {
                    throw VaultError(.invalidValue, "value for key \(key) is not a dictionary; cannot add to it")
                }
                dict = old
            }
            var i = 0
            while i < values.count {
                guard case .string(let k) = values[i] else { throw UsageError(message: "\(flag): dictionary keys must be strings") }
                dict[k] = values[i + 1]
                i += 2
            }
            try prefs.set(.dict(dict), domain: domain, key: key)
        default:
            let values = writeValues
            guard values.count == 1 else { throw UsageError(message: "defaults write takes one value (use -array for several)") }
            try prefs.set(values[0], domain: domain, key: key)
        }
    }

    /// Values from words, each a bare plist-text value or a type flag followed by its value.
    static func values(_ words: [String]) throws -> [PlistValue] {
        var out: [PlistValue] = []
        var i = 0
        while i < words.count {
            let w = words[i]
            let typed = ["-string", "-int", "-integer", "-float", "-bool", "-boolean", "-date", "-data"]
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

    static func typedValue(_ flag: String, _ v: String) throws -> PlistValue {
        switch flag {
        case "-string": return .string(v)
        case "-int", "-integer":
            if let i = Int64(v) { return .integer(i) }
            if let u = UInt64(v) { return .unsignedInteger(u) }
            throw UsageError(message: "\(shown(v)) is not an integer")
        case "-float":
            return .real(try decimalNumber(v))
        case "-bool", "-boolean":
            switch v.lowercased() {
            case "true", "yes", "1": return .bool(true)
            case "false", "no", "0": return .bool(false)
            default: throw UsageError(message: "\(shown(v)) is not a boolean (true/false/yes/no)")
            }
        case "-date":
            guard let d = parseDate(v) else {
                throw UsageError(message: "\(shown(v)) is not a date in years 0 to 9999 (use 2026-01-31 12:00:00 +0000 or ISO 8601)")
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
            guard !digits.contains(nil) else { throw UsageError(message: "-data needs hex digits") }
            let hex = digits.map { $0! }
            guard hex.count % 2 == 0 else { throw UsageError(message: "-data needs an even number of hex digits") }
            return .data(Data(stride(from: 0, to: hex.count, by: 2).map { hex[$0] << 4 | hex[$0 + 1] }))
        default:
            throw UsageError(message: "unknown type flag \(flag)")
        }
    }

    /// A rejected value as an error names it: quoted when short and printable ASCII, else "the
    /// value" (a long or binary argument is not echoed whole).
    static func shown(_ v: String) -> String {
        !v.isEmpty && v.count <= 24 && v.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F }) ? "'\(v)'" : "the value"
    }

    /// A `-float` argument: a finite decimal number, `[+-]digits[.digits][e[+-]digits]` (digits
    /// on at least one side of the point), as defaults(1) takes. Not Double(_:), which also
    /// takes hexadecimal (`0x10` is 16), `inf`, `nan`, and rounds `1e400` to infinity. The
    /// error says what is wrong, quoting the value only when it is short.
    static func decimalNumber(_ v: String) throws -> Double {
        func refuse(_ why: String) -> UsageError { UsageError(message: "-float needs a finite decimal number: \(shown(v)) \(why)") }
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
        guard let d = Double(v), d.isFinite else { throw refuse("is out of range (beyond ±1.8e308)") }
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
            guard let hh = digits((signAt + 1)..<(signAt + 3)), let mm = digits((u.count - 2)..<u.count), hh < 24, mm < 60
            else { return nil }
            offset = (u[signAt] == UInt8(ascii: "-") ? -1 : 1) * (hh * 3600 + mm * 60)
            u.removeSubrange(signAt...)
            if u.last == UInt8(ascii: " ") { u.removeLast() }
        } else if u.last == UInt8(ascii: "Z") {
            u.removeLast()
        }
        if u.count == 10 { u += Array("T00:00:00".utf8) }
        if u.count >= 19, u[10] == UInt8(ascii: " ") { u[10] = UInt8(ascii: "T") }
        guard let local = PlistDate.parse(String(decoding: u, as: UTF8.self) + "Z") else { return nil }
        let t = local.timeIntervalSinceReferenceDate - Double(offset)
        return PlistDate.supportedRange.contains(t) ? Date(timeIntervalSinceReferenceDate: t) : nil
    }

    private func find(_ prefs: Preferences, _ word: String) throws {
        let needle = word.lowercased()
        func contains(_ v: PlistValue) -> Bool {
            switch v {
            case .string(let s): return s.lowercased().contains(needle)
            case .array(let a): return a.contains(where: contains)
            case .dict(let d): return d.contains { $0.key.lowercased().contains(needle) || contains($0.value) }
            default: return false
            }
        }
        var found = false
        var damaged: [DamagedValueName] = []
        for domain in try prefs.domains() {
            let values = try Self.readable(prefs, domain, noting: &damaged)
            let hits = values.filter { $0.key.lowercased().contains(needle) || contains($0.value) }
            if domain.lowercased().contains(needle) {
                print("Found \(values.count) keys in domain '\(domain)': \(PlistText.describe(.dict(values)))")
                found = true
            } else if !hits.isEmpty {
                print("Found \(hits.count) keys in domain '\(domain)': \(PlistText.describe(.dict(hits)))")
                found = true
            }
        }
        // As defaults(1) (on stderr, exit 0). Damaged values were not searched: named, and
        // the exit status says so.
        if !found { StandardOutput.writeError("No domain, key, nor value containing '\(word)'\n") }
        try Self.report(damaged, "not searched")
    }
}
