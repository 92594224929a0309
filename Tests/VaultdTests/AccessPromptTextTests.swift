import Testing

@testable import VaultCore
@testable import vaultd

/// The access confirmation's text (docs/access.md): what the programs and the items'
/// creators control is escaped and bounded, and the question names reader, item and creator.
@Suite struct AccessPromptTextTests {
    @Test func theQuestionNamesTheReaderTheItemAndItsCreator() {
        let reader = ProgramIdentity(
            kind: .interpreter, path: "/usr/bin/python3", script: "/home/u/bin/sync.py")
        let creator = ProgramIdentity(kind: .executable, path: "/usr/bin/git-credential-libsecret")
        let (message, _) = AccessPrompter.text(
            AccessRequest(
                program: reader,
                items: [AccessRequest.Item(name: "GitHub token", creator: creator)]))
        #expect(
            message
                == "Allow “/usr/bin/python3 …/bin/sync.py” to use the secret “GitHub token”, saved by “/usr/bin/git-credential-libsecret”?"
        )
    }

    @Test func whatAProgramControlsIsEscapedAndBounded() {
        let reader = ProgramIdentity(kind: .executable, path: "/tmp/a\nb\u{1b}[2J")
        let label = "Fake\r\nAllow? " + String(repeating: "x", count: 500)
        let (message, _) = AccessPrompter.text(
            AccessRequest(program: reader, items: [AccessRequest.Item(name: label)]))
        #expect(!message.contains("\n") && !message.contains("\r") && !message.contains("\u{1b}"))
        #expect(message.contains("/tmp/a\u{FFFD}b\u{FFFD}[2J"))
        #expect(message.count < 350, "\(message.count)")
        #expect(message.contains("saved before vaultd recorded"))
    }
}
