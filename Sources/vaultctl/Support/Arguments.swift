/// A wrong command line: printed with the command's usage, exit 64 (EX_USAGE).
struct UsageError: Error {
    var message: String
}

/// A failure of vaultctl's own (a file it cannot write), not vaultd's: printed as it is, exit 1.
struct LocalFailure: Error, CustomStringConvertible {
    var description: String
}

/// The words of a command line, consumed as a command's declarations ask for them.
/// Options take `--name value` or `--name=value`; anything left over is a usage error.
struct Arguments {
    private(set) var words: [String]
    /// Every option name a command asked for (`option`, `options`, `flag`, …), in order:
    /// what an unknown option is compared with to suggest the one meant.
    private(set) var asked: [String] = []

    init(_ words: [String]) { self.words = words }

    private mutating func note(_ name: String) {
        if !asked.contains(name) { asked.append(name) }
    }

    /// Removes and returns the value of `--name` (the last one when repeated).
    mutating func option(_ name: String) throws -> String? {
        try options(name).last
    }

    /// Removes and returns every value of a repeatable `--name`.
    mutating func options(_ name: String) throws -> [String] {
        note(name)
        var values: [String] = []
        var i = 0
        while i < words.count {
            if words[i] == "--" { break }
            if words[i] == name {
                guard i + 1 < words.count else {
                    throw UsageError(message: "\(name) needs a value")
                }
                values.append(words[i + 1])
                words.removeSubrange(i...(i + 1))
            } else if words[i].hasPrefix(name + "=") {
                values.append(String(words[i].dropFirst(name.count + 1)))
                words.remove(at: i)
            } else {
                i += 1
            }
        }
        return values
    }

    /// An integer option.
    /// The value of a `--…-fd` option is not repeated when it is not a number: someone who
    /// takes `--passphrase-fd` for `--passphrase` has typed the secret there.
    mutating func intOption(_ name: String) throws -> Int? {
        guard let v = try option(name) else { return nil }
        guard let i = Int(v) else {
            if name.hasSuffix("-fd") {
                throw UsageError(
                    message:
                        "\(name) needs a file descriptor number (what was given is not repeated here)"
                )
            }
            throw UsageError(message: "\(name) needs an integer, not '\(v)'")
        }
        return i
    }

    /// A yes/no option: `--name` alone is yes; `--name=yes|no` (also true/false, 1/0) says
    /// which; nil when absent (the last one when repeated).
    mutating func booleanOption(_ name: String) throws -> Bool? {
        note(name)
        var value: Bool?
        var i = 0
        while i < words.count, words[i] != "--" {
            if words[i] == name {
                value = true
            } else if words[i].hasPrefix(name + "=") {
                switch words[i].dropFirst(name.count + 1).lowercased() {
                case "yes", "true", "1": value = true
                case "no", "false", "0": value = false
                default:
                    throw UsageError(
                        message:
                            "\(name) takes yes or no, not '\(words[i].dropFirst(name.count + 1))'")
                }
            } else {
                i += 1
                continue
            }
            words.remove(at: i)
        }
        return value
    }

    /// Removes `--name` and returns whether it was there.
    mutating func flag(_ name: String) -> Bool {
        note(name)
        guard let i = words.prefix(while: { $0 != "--" }).firstIndex(of: name) else { return false }
        words.remove(at: i)
        return true
    }

    /// Removes and returns the next word that is not an option.
    mutating func positional() -> String? {
        guard let i = words.firstIndex(where: { !$0.hasPrefix("--") || $0 == "--" }) else {
            return nil
        }
        if words[i] == "--" {
            words.remove(at: i)
            return words.isEmpty ? nil : words.removeFirst()
        }
        return words.remove(at: i)
    }

    /// Removes and returns the next word only when it is one of `choices`.
    mutating func positional(oneOf choices: [String]) -> String? {
        guard let first = words.first, choices.contains(first) else { return nil }
        return words.removeFirst()
    }

    /// Removes the next word as one of `T`'s cases (a subcommand's verb); anything else is a
    /// usage error listing them, e.g. "cache needs path, usage or purge".
    mutating func verb<T: RawRepresentable & CaseIterable>(of command: String) throws -> T
    where T.RawValue == String {
        let given = positional()
        if let w = given, let v = T(rawValue: w) { return v }
        let names = T.allCases.map(\.rawValue)
        let list =
            names.count > 1
            ? names.dropLast().joined(separator: ", ") + " or " + names.last! : names.joined()
        // The word given is not repeated (after `passphrase` it may be one); the verb it is
        // closest to is named.
        let hint =
            given.flatMap { Self.closest(to: $0, among: names) }.map {
                " (did you mean \(command) \($0)?)"
            } ?? ""
        throw UsageError(message: "\(command) needs \(list)\(hint)")
    }

    /// Everything left, in order (for commands taking free arguments).
    mutating func rest() -> [String] {
        defer { words.removeAll() }
        return words.filter { $0 != "--" }
    }

    /// Throws a usage error naming the first word nobody asked for. An unknown `--name=value`
    /// is named without its value (`--passphrase=…`, `--secret=…`: secrets are never taken from
    /// argv, and the error must not repeat one to a terminal, a script's log or a CI job's
    /// output). `showingWords` false: a word that is not an option is not repeated either, for
    /// the commands that read a secret (`vaultctl item add --service s hunter2`), nor is one
    /// that merely begins with a dash (`-hunter2`): only a word shaped like an option's name
    /// (`--` and lowercase letters, digits, hyphens) is named there.
    func finish(showingWords: Bool = true) throws {
        if let unknown = unknownOption(showingWords: showingWords) { throw unknown }
        guard let w = words.first else { return }
        let name = w.firstIndex(of: "=").map { w[..<$0] } ?? w[...]
        if w.hasPrefix("-") && (showingWords || Self.isOptionName(name)) {
            if name.count < w.count {
                throw UsageError(
                    message: "unexpected argument '\(name)=…' (its value is not repeated here)")
            }
            throw UsageError(message: "unexpected argument '\(w)'")
        }
        if showingWords { throw UsageError(message: "unexpected argument '\(w)'") }
        throw UsageError(
            message:
                "unexpected argument (not repeated here: this command reads its secret from a file descriptor, stdin or a prompt, never from the command line)"
        )
    }

    /// The first word left before `--` that is an option nobody asked for and that no usage
    /// line names (`knownOptions`), as a usage error naming it and the closest option of the
    /// command (or any command): "unknown option '--servce' (did you mean --service?)". Nil
    /// when there is none. A command that stops at a missing filter has not asked for every
    /// option it takes, so an option some usage line names is not called unknown here; `finish`
    /// names the words left over once the command has asked for all of its own.
    /// As in `finish`, a value after `=` is never repeated, and for a command reading a secret
    /// only a word shaped like an option's name is named.
    func unknownOption(showingWords: Bool = true, knownOptions: Set<String> = []) -> UsageError? {
        for w in words.prefix(while: { $0 != "--" }) where w.hasPrefix("--") {
            let name = String(w.firstIndex(of: "=").map { w[..<$0] } ?? w[...])
            guard !asked.contains(name), !knownOptions.contains(name) else { continue }
            guard showingWords || Self.isOptionName(name[...]) else { continue }
            let candidates = asked + knownOptions.sorted()
            let hint =
                Self.closest(to: name, among: candidates).map { " (did you mean \($0)?)" } ?? ""
            let shown = name.count < w.count ? "\(name)=…" : name
            return UsageError(message: "unknown option '\(shown)'\(hint)")
        }
        return nil
    }

    /// The candidate nearest to `word` by edit distance (insertions, deletions, substitutions
    /// and swaps of two neighbours, each 1), when it is near enough to be a typo: at most 1 for
    /// words of up to 4 characters, 2 up to 8, else 3. The first of equally near ones.
    static func closest(to word: String, among candidates: [String]) -> String? {
        let limit = word.count <= 4 ? 1 : word.count <= 8 ? 2 : 3
        var best: (String, Int)?
        for c in candidates where c != word {
            let d = editDistance(word, c)
            if d <= limit && d < (best?.1 ?? Int.max) { best = (c, d) }
        }
        return best?.0
    }

    /// The optimal-string-alignment distance between `a` and `b` (Levenshtein, with a swap of
    /// two neighbouring characters counting 1: `--sevrice` is one step from `--service`).
    static func editDistance(_ a: String, _ b: String) -> Int {
        let x = Array(a)
        let y = Array(b)
        if x.isEmpty { return y.count }
        if y.isEmpty { return x.count }
        var d = [[Int]](repeating: [Int](repeating: 0, count: y.count + 1), count: x.count + 1)
        for i in 0...x.count { d[i][0] = i }
        for j in 0...y.count { d[0][j] = j }
        for i in 1...x.count {
            for j in 1...y.count {
                let cost = x[i - 1] == y[j - 1] ? 0 : 1
                d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
                if i > 1 && j > 1 && x[i - 1] == y[j - 2] && x[i - 2] == y[j - 1] {
                    d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
                }
            }
        }
        return d[x.count][y.count]
    }

    /// `--` then a lowercase letter, then lowercase letters, digits and hyphens.
    static func isOptionName(_ s: Substring) -> Bool {
        let u = Array(s.utf8)
        guard u.count > 2, u[0] == UInt8(ascii: "-"), u[1] == UInt8(ascii: "-"),
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(u[2])
        else { return false }
        return u.dropFirst(3).allSatisfy {
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) || $0 == UInt8(ascii: "-")
        }
    }
}

/// Input vaultctl itself refuses (an empty secret without --allow-empty, two typed entries
/// that differ, a passphrase with a line break): printed as it is, exit 65 (`ExitCode.badInput`).
struct InputError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}

/// A command that would act on more than it was asked to be sure of (several items without
/// --yes and without a terminal to ask on), or a question answered no: exit 1.
struct Refusal: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}
