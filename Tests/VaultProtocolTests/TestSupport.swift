import Testing
import VaultProtocol

/// Runs `body`, expects it to throw a `VaultError` with `code`, and returns that error.
@discardableResult
func expectVaultError(
    _ code: VaultError.Code, sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () throws -> Void
) -> VaultError? {
    do {
        try body()
        Issue.record("expected \(code), but nothing was thrown", sourceLocation: sourceLocation)
    } catch let e as VaultError {
        #expect(e.code == code, "got \(e)", sourceLocation: sourceLocation)
        return e
    } catch {
        Issue.record("expected \(code), got \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

/// UTF-8 bytes of a string (for feeding parsers raw bytes).
func bytes(_ s: String) -> [UInt8] { Array(s.utf8) }
