import Foundation

extension VarlinkInterfaces {
    /// The input parameter names of every method, read from the interface descriptions
    /// (which are the source of truth): `"io.vaultd.Keychain.Add"` → `["class", "attributes", "data"]`.
    public static let inputParameters: [String: Set<String>] = {
        var table: [String: Set<String>] = [:]
        for (name, text) in all {
            for (method, fields) in methodInputs(text) { table[name + "." + method] = fields }
        }
        return table
    }()

    /// The first parameter of `call` (in sorted order) that its method does not declare, or
    /// nil when all are declared or the method is not one of ours (MethodNotFound follows).
    public static func undeclaredParameter(in call: VarlinkCall) -> String? {
        guard let declared = inputParameters[call.method] else { return nil }
        // Sorted only when one is undeclared: every call passes here.
        guard call.parameters.contains(where: { !declared.contains($0.key) }) else { return nil }
        return call.parameters.keys.sorted().first { !declared.contains($0) }
    }

    /// The parameter names of every error, by its fully-qualified name:
    /// `"org.varlink.service.InvalidParameter"` → `["parameter"]`.
    public static let errorParameters: [String: Set<String>] = {
        var table: [String: Set<String>] = [:]
        for (name, text) in all {
            for (error, fields) in members("error", of: text) { table[name + "." + error] = fields }
        }
        return table
    }()

    /// `method Name(a: t, b: ?(c: u)) -> (...)` → `(Name, [a, b])`, for every method of one
    /// interface description. Comments (`#` to the end of the line) are ignored.
    static func methodInputs(_ description: String) -> [(String, Set<String>)] {
        members("method", of: description)
    }

    /// `keyword Name(a: t, b: ?(c: u))` → `(Name, [a, b])`, for every member declared with
    /// `keyword` ("method": its input fields; "error": its parameters).
    static func members(_ keyword: String, of description: String) -> [(String, Set<String>)] {
        let text = description.split(separator: "\n", omittingEmptySubsequences: false)
            .map { line in line.firstIndex(of: "#").map { line[..<$0] } ?? line[...] }
            .joined(separator: "\n")
        let chars = Array(text)
        var result: [(String, Set<String>)] = []
        var i = 0
        func isWordBoundary(_ at: Int) -> Bool { at == 0 || chars[at - 1].isWhitespace }
        let word = Array(keyword)
        while i < chars.count {
            guard isWordBoundary(i), chars[i...].starts(with: word), i + word.count < chars.count, chars[i + word.count].isWhitespace
            else {
                i += 1
                continue
            }
            i += word.count
            while i < chars.count, chars[i].isWhitespace { i += 1 }
            let nameStart = i
            while i < chars.count, chars[i] != "(", !chars[i].isWhitespace { i += 1 }
            let name = String(chars[nameStart..<i])
            while i < chars.count, chars[i] != "(" { i += 1 }
            guard i < chars.count else { break }
            // The input struct: top-level fields separated by commas, nesting by () and [].
            i += 1
            var depth = 0
            var field = ""
            var fields: Set<String> = []
            func finish() {
                let n = field.split(separator: ":", maxSplits: 1).first.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
                if let n, !n.isEmpty { fields.insert(n) }
                field = ""
            }
            while i < chars.count {
                let c = chars[i]
                i += 1
                if c == "(" || c == "[" { depth += 1 }
                if c == ")" || c == "]" {
                    if depth == 0 { break }
                    depth -= 1
                }
                if c == "," && depth == 0 {
                    finish()
                } else {
                    field.append(c)
                }
            }
            finish()
            result.append((name, fields))
        }
        return result
    }
}
