import Foundation
import SecretSession
import TestSupport
import Testing
import VaultCore
import VaultProtocol

@testable import vaultd

/// vaultd's pinentry client (`Pinentry`) against scripted Assuan peers: small shell scripts
/// that answer as a pinentry does, or misbehave. The PIN arrives percent-decoded; Cancel,
/// a pinentry that dies, one that hangs past the deadline, an overlong line and a reply
/// that is no Assuan line each end the question as dismissed, within its deadline, and the
/// child is gone after.
@Suite struct PinentryTests {
    /// A script at a fresh path that reads commands on stdin and answers them; `getpin`
    /// is its answer to GETPIN (and CONFIRM), `hello` its greeting.
    static func peer(
        getpin: String, confirm: String = "echo OK", hello: String = "echo 'OK Pleased to meet you'"
    ) throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent(
            "pinentry-\(UUID().uuidString)"
        ).path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let path = dir + "/pinentry"
        let script = """
            #!/bin/sh
            \(hello)
            while read -r cmd rest; do
              case "$cmd" in
                GETPIN) \(getpin) ;;
                CONFIRM) \(confirm) ;;
                BYE) echo OK; exit 0 ;;
                *) echo OK ;;
              esac
            done
            """
        try #require(writeExecutable(path, script))
        return path
    }

    static let text = DialogText(
        title: "Unlock the vault", message: "Authentication required", description: "test",
        okLabel: "Unlock", cancelLabel: "Cancel")

    static func deadline(_ seconds: Double) -> UInt64 {
        MonotonicClock.nanoseconds() + UInt64(seconds * 1e9)
    }

    static func ask(_ program: String, seconds: Double = 20) throws -> (PassphraseAnswer, Pinentry)
    {
        let p = try Pinentry(program: program, deadline: deadline(seconds))
        return (p.passphrase(text, deadline: deadline(seconds)), p)
    }

    static func reason(_ a: PassphraseAnswer) -> String? {
        if case .dismissed(let why) = a { return why }
        return nil
    }

    static func exited(_ pid: pid_t) -> Bool { kill(pid, 0) != 0 && errno == ESRCH }

    @Test func aPinIsPercentDecoded() throws {
        let (a, p) = try Self.ask(
            try Self.peer(getpin: "echo 'D pa%25ss%0Aw'; echo 'D ord'; echo OK"))
        guard case .passphrase(let pin) = a else {
            Issue.record("\(a)")
            return
        }
        #expect(pin.withUnsafeBytes { Array($0) } == Array("pa%ss\nword".utf8))
        p.close()
        #expect(Self.exited(p.pid))
    }

    @Test func cancelIsDismissed() throws {
        let (a, p) = try Self.ask(
            try Self.peer(getpin: "echo 'ERR 83886179 Operation cancelled <Pinentry>'"))
        #expect(Self.reason(a) == "cancelled")
        p.close()
    }

    @Test func aPinentryThatDiesIsDismissed() throws {
        let (a, p) = try Self.ask(try Self.peer(getpin: "exit 3"))
        #expect(Self.reason(a) == "the pinentry exited")
        p.close()
        #expect(Self.exited(p.pid))
    }

    @Test func aPinentryThatHangsEndsAtTheDeadline() throws {
        let started = MonotonicClock.nanoseconds()
        let (a, p) = try Self.ask(try Self.peer(getpin: "exec sleep 600"), seconds: 1)
        #expect(Self.reason(a) == "the pinentry did not answer in time")
        #expect(MonotonicClock.nanoseconds() - started < 5_000_000_000)
        p.close()
        #expect(Self.exited(p.pid))
    }

    @Test func anOverlongLineIsRefused() throws {
        let (a, p) = try Self.ask(
            try Self.peer(getpin: "head -c 5000 /dev/zero | tr -c x x; echo"))
        #expect(Self.reason(a) == "the pinentry sent a line over 1000 bytes")
        p.close()
    }

    @Test func aMalformedReplyIsRefused() throws {
        let (a, p) = try Self.ask(try Self.peer(getpin: "echo 'HELLO there'"))
        #expect(Self.reason(a)?.hasPrefix("the pinentry sent no Assuan reply") == true, "\(a)")
        p.close()
        let (b, q) = try Self.ask(try Self.peer(getpin: "echo 'INQUIRE QUALITY x'"))
        #expect(Self.reason(b)?.hasPrefix("the pinentry sent no Assuan reply") == true, "\(b)")
        q.close()
    }

    @Test func noGreetingIsNoPinentry() throws {
        #expect(throws: Pinentry.Failure.self) {
            _ = try Pinentry(
                program: try Self.peer(getpin: "echo OK", hello: "echo 'ERR 1 no'"),
                deadline: Self.deadline(20))
        }
        #expect(throws: Pinentry.Failure.self) {
            _ = try Pinentry(program: "/nonexistent/pinentry", deadline: Self.deadline(20))
        }
    }

    @Test func cancelFromAnotherThreadEndsTheQuestion() throws {
        let p = try Pinentry(
            program: try Self.peer(getpin: "exec sleep 600"), deadline: Self.deadline(20))
        DispatchQueue.global().async { p.cancel() }
        #expect(Self.reason(p.passphrase(Self.text, deadline: Self.deadline(20))) == "cancelled")
        p.close()
        #expect(Self.exited(p.pid))
    }

    /// CONFIRM twice: only OK grants, and only a second OK always.
    @Test func confirmingAccess() throws {
        func choice(_ confirm: String) throws -> AccessChoice? {
            let p = try Pinentry(
                program: try Self.peer(getpin: "echo OK", confirm: confirm),
                deadline: Self.deadline(20))
            defer { p.close() }
            return p.confirm(Self.text, always: "Always?", deadline: Self.deadline(20))
        }
        #expect(try choice("echo OK") == .alwaysAllow)
        #expect(try choice("echo 'ERR 83886179 cancelled'") == .deny)
        #expect(try choice("echo 'ERR 83886194 not confirmed'") == .deny)
        // OK, then No: allow once (the script answers its second CONFIRM differently).
        #expect(
            try choice(
                "if [ -e \"$0.once\" ]; then echo 'ERR 83886179 no'; else : > \"$0.once\"; echo OK; fi"
            ) == .allowOnce)
        #expect(try choice("exit 1") == nil)
    }

    /// Percent-escaping of what vaultd sends: %, CR, LF and other controls in the argument.
    @Test func commandsAreEscapedAndBounded() {
        #expect(Pinentry.escaped("SETDESC 100% a\r\nb") == Array("SETDESC 100%25 a%0D%0Ab".utf8))
        #expect(Pinentry.escaped("SETDESC " + String(repeating: "é", count: 900)).count <= 999)
    }
}

/// gcr's secret exchange (`sx-aes-1`) against a peer built from the same primitives as gcr's
/// (RFC 3526's 1536-bit group, HKDF-SHA256, AES-128-CBC): the prompter's secret arrives.
@Suite struct GcrSecretExchangeTests {
    @Test func aSecretCrossesTheExchange() throws {
        let x = Sodium.randomBytes(192).enumerated().map {
            $0.offset == 0 ? $0.element & 0x7f : $0.element
        }
        // The prompter's public value: 2^x (its session with the peer value 2).
        let prompterPublic = try DHSession(peerPublicKey: [2], privateKey: x, group: .modp1536)
            .publicKey
        let exchange = GcrSecretExchange()
        func text(_ fields: [(String, [UInt8])]) -> String {
            "[sx-aes-1]\n" + fields.map { "\($0.0)=\(Data($0.1).base64EncodedString())\n" }.joined()
        }
        #expect(try exchange.receive(text([("public", prompterPublic)])) == nil)
        let sent = try #require(exchange.send())
        #expect(sent.hasPrefix("[sx-aes-1]\npublic="))
        let ours = try #require(
            Data(
                base64Encoded: String(sent.split(separator: "=", maxSplits: 1)[1])
                    .trimmingCharacters(in: .whitespacesAndNewlines)))
        let prompter = try DHSession(peerPublicKey: Array(ours), privateKey: x, group: .modp1536)
        let (iv, ct) = try prompter.encrypt(SecureBytes(copying: Array("hunter2".utf8)))
        let secret = try #require(
            try exchange.receive(text([("public", prompterPublic), ("secret", ct), ("iv", iv)])))
        #expect(secret.withUnsafeBytes { Array($0) } == Array("hunter2".utf8))
        #expect(throws: GcrSecretExchange.Failure.self) {
            _ = try exchange.receive(
                text([("public", prompterPublic), ("secret", ct), ("iv", [1, 2])]))
        }
        #expect(throws: GcrSecretExchange.Failure.self) {
            _ = try GcrSecretExchange().receive("nonsense")
        }
        #expect(throws: GcrSecretExchange.Failure.self) {
            _ = try GcrSecretExchange().receive(text([("public", [1])]))
        }
    }
}
