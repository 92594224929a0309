import Foundation

/// Writes one line to stderr (vaultd runs in the foreground; journald or the terminal keeps it).
/// Callers never pass secrets or attribute values a user typed.
public func log(_ message: String) {
    FileHandle.standardError.write(Data("vaultd: \(message)\n".utf8))
}
