import DesktopKeyring
import Foundation
import VaultProtocol

/// `vaultctl import pass [STORE]`: a password store of pass(1), the standard unix password
/// manager: one gpg-encrypted file per secret under STORE (default `$PASSWORD_STORE_DIR`,
/// else `~/.password-store`). Each `NAME.gpg` is decrypted by `gpg --decrypt` with the
/// user's own gpg-agent (which asks for the key's passphrase as it does for pass).
///
/// As pass and its browser extensions read a file (docs/import.md): the first line is the
/// password (the secret); later lines `login:`, `user:` or `username:` give the account,
/// `url:` is kept as the `url` attribute; every other line is kept, in order, as the item's
/// comment. The entry is a generic password of service NAME (its path in the store,
/// without `.gpg`); NAME is its identity across imports.
enum PassSource {
    static let maximumFiles = 100_000
    /// A pass file holds a password and a few lines; a vault secret is at most 1 MiB.
    static let maximumFileBytes = 4 << 20

    static func read(_ command: ImportCommand) throws -> (ImportOrigin, [ImportEntry]) {
        let env = ProcessInfo.processInfo.environment
        let store =
            command.path ?? env["PASSWORD_STORE_DIR"]
            ?? (env["HOME"] ?? NSHomeDirectory()) + "/.password-store"
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: store, isDirectory: &isDirectory),
            isDirectory.boolValue
        else {
            throw ImportFailure(
                description:
                    "\(store) is no password store (no such directory; give STORE or set PASSWORD_STORE_DIR)"
            )
        }
        guard ToolProcess.installed("gpg") else {
            throw ImportFailure(
                description:
                    "gpg is not installed (Debian: apt install gnupg); it decrypts the store")
        }
        var entries: [ImportEntry] = []
        var failed: [String] = []
        for name in try files(in: store) {
            let file = store + "/" + name + ".gpg"
            guard let st = try? SystemCall.stat(file), st.st_size <= maximumFileBytes else {
                failed.append("\(name): larger than \(maximumFileBytes >> 20) MiB or unreadable")
                continue
            }
            var result = try ToolProcess.run(
                "gpg", ["--quiet", "--yes", "--decrypt", "--", file], environment: environment,
                limit: maximumFileBytes)
            defer { result.output.wipe() }
            guard result.status == 0 else {
                let why = result.errorText.trimmingCharacters(in: .whitespacesAndNewlines)
                failed.append("\(name): gpg could not decrypt it: \(String(why.suffix(300)))")
                continue
            }
            entries.append(entry(name, result.output, modified: UInt64(max(st.st_mtim.tv_sec, 0))))
        }
        // A file gpg cannot decrypt (another key, an agent that was refused) stops nothing:
        // named here, and the exit status says the import was not whole.
        for f in failed { printError("cannot import \(f)") }
        if !failed.isEmpty && entries.isEmpty {
            throw ImportFailure(description: "no file of \(store) could be decrypted")
        }
        var origin = ImportOrigin(kind: "password store", label: store, path: store)
        origin.unreadable = failed.count
        return (origin, entries)
    }

    /// vaultctl's environment, with `GPG_TTY` set to its terminal when it has one, as pass
    /// sets it: gpg's stdin is a pipe here, and a terminal pinentry asking for the key's
    /// passphrase finds the terminal through it.
    static var environment: [String: String] {
        var env = ProcessInfo.processInfo.environment
        if env["GPG_TTY"] == nil {
            for fd in [STDIN_FILENO, STDERR_FILENO] where SystemCall.isTerminal(fd) {
                if let name = ttyname(fd) {
                    env["GPG_TTY"] = String(cString: name)
                    break
                }
            }
        }
        return env
    }

    /// Every `NAME.gpg` under `store` (NAME with its folders), sorted; hidden files and
    /// folders (.git, .gpg-id, .extensions) are not entries. Symbolic links to folders are
    /// not followed (a loop would never end).
    static func files(in store: String) throws -> [String] {
        var out: [String] = []
        guard
            let walk = FileManager.default.enumerator(
                at: URL(fileURLWithPath: store), includingPropertiesForKeys: [.isRegularFileKey],
                options: [.skipsHiddenFiles])
        else { return [] }
        let base = URL(fileURLWithPath: store).standardizedFileURL.path
        for case let url as URL in walk {
            guard url.pathExtension == "gpg",
                (try? url.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true
            else { continue }
            var rel = url.standardizedFileURL.path
            guard rel.hasPrefix(base + "/") else { continue }
            rel = String(rel.dropFirst(base.count + 1).dropLast(4))
            out.append(rel)
            guard out.count <= maximumFiles else {
                throw ImportFailure(
                    description: "\(store) holds more than \(maximumFiles) entries")
            }
        }
        return out.sorted()
    }

    /// One decrypted file as an entry.
    static func entry(_ name: String, _ content: [UInt8], modified: UInt64) -> ImportEntry {
        var a: ExactDictionary<String> = ["service": name]
        var secret: [UInt8]
        var comment: [String] = []
        let newline = content.firstIndex(of: 0x0A)
        let rest = newline.map { Array(content[($0 + 1)...]) } ?? []
        if let text = String(validating: rest, as: UTF8.self) {
            secret = Array(content[..<(newline ?? content.count)])
            for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
                let (key, value) = field(line)
                // The first of each is an attribute; a second one stays in the comment.
                if ["login", "user", "username"].contains(key) && a["username"] == nil {
                    a["username"] = value
                } else if key == "url" && a["url"] == nil {
                    a["url"] = value
                } else if looksSecret(line, key: key) {
                    // pass kept it encrypted; an item's comment is an attribute, which any
                    // program that may search reads: named, not imported (as KeePassXC's
                    // protected attributes are).
                    let what = key.isEmpty ? "an otpauth:// line" : "its '\(key.prefix(40))' line"
                    printError(
                        "note: \(name): \(what) was not imported (it looks secret, and a comment is not; docs/import.md)"
                    )
                } else {
                    comment.append(String(line))
                }
            }
        } else {
            // Not text after the first line: the whole file is the secret, nothing lost.
            secret = content
        }
        while comment.last?.isEmpty == true { comment.removeLast() }
        let c = comment.joined(separator: "\n")
        return ImportEntry(
            item: .imported(
                path: "pass/" + name, label: name, schema: nil, attributes: a, secret: secret,
                modified: modified),
            id: "pass:" + name, comment: c.isEmpty ? nil : c)
    }

    /// Whether a line after the password holds what pass users keep secret: an `otpauth://`
    /// URI (pass-otp's TOTP seed) or a field named for a secret (a PIN, an OTP or recovery
    /// code, a security answer, another password or key).
    static func looksSecret(_ line: Substring, key: String) -> Bool {
        if line.trimmingCharacters(in: .whitespaces).lowercased().hasPrefix("otpauth://") {
            return true
        }
        let secretWords = [
            "otp", "totp", "pin", "secret", "answer", "recovery", "code", "key", "pass", "token",
            "cvv", "cvc",
        ]
        return !key.isEmpty && secretWords.contains { key.contains($0) }
    }

    /// `key: value` (the key lowercased, the value trimmed), or ("", "") for another line.
    static func field(_ line: Substring) -> (String, String) {
        guard let colon = line.firstIndex(of: ":") else { return ("", "") }
        let key = line[..<colon].trimmingCharacters(in: .whitespaces).lowercased()
        guard !key.isEmpty, !key.contains(" ") else { return ("", "") }
        return (key, line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
    }
}
