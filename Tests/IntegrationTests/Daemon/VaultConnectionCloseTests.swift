import Foundation
import Testing
import VaultClient
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// `VaultConnection.close()` against a call that is connecting again at that moment, with a
/// stand-in for vaultd whose listen backlog holds the reconnect until the test lets it in.
@Suite struct VaultConnectionCloseTests {
    /// `close()` says calls fail from then on and never connect again. A call that found the
    /// connection closed by vaultd and was connecting again when `close()` ran replaced the
    /// stream after `close()` had shut the old one: the new connection stayed open, and
    /// every later call went through it.
    @Test func aCloseDuringAReconnectLeavesTheConnectionClosed() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent(
            "vc-close-\(UUID().uuidString.prefix(8)).sock"
        ).path
        defer { unlink(path) }
        let server = try UnixSocket()
        // Backlog 0: one connection may wait to be accepted; a second connect blocks.
        try server.bindAndListen(path: path, backlog: 0)
        let connection = try VaultConnection(socketPath: path, replyTimeout: 10)
        // "vaultd" closes the first connection: the next call must connect again.
        try server.accept().close()
        let filler = try UnixSocket()
        try filler.connect(path: path)  // the backlog is full: the reconnect waits

        let firstCall = LockedResult()
        let callDone = DispatchSemaphore(value: 0)
        Thread {
            do {
                _ = try connection.call("org.example.Test.First")
                firstCall.set("replied")
            } catch {
                firstCall.set("\(error)")
            }
            callDone.signal()
        }.start()
        Thread.sleep(forTimeInterval: 0.5)  // the call is now waiting in connect
        connection.close()

        // Let the reconnect in and answer everything it sends, as vaultd would.
        _ = try server.accept()  // the filler
        let served = try server.accept()
        let serving = Thread {
            let stream = VarlinkStream(socket: served)
            while let message = try? stream.receive(), message != nil {
                guard (try? stream.send(["parameters": [:]] as JSON)) != nil else { return }
            }
        }
        serving.start()
        #expect(callDone.wait(timeout: .now() + 15) == .success)

        // After close() no call reaches vaultd.
        var later: String
        do {
            _ = try connection.call("org.example.Test.Second")
            later = "replied"
        } catch {
            later = "\(error)"
        }
        #expect(
            later != "replied",
            "a call after close() was answered (the first call: \(firstCall.value))")
        served.shutdown()
        filler.close()
        server.close()
    }
}

/// The 8 MiB message limit is checked before sending, for a streamed call as for a call:
/// nothing reaches the peer, and the caller gets InvalidParameter `message` (vaultd
/// answers a longer message with an error and closes, most likely before it was all sent).
@Suite struct VaultConnectionMessageLimitTests {
    @Test func aStreamedCallOverTheLimitIsRefusedBeforeSending() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent(
            "vc-limit-\(UUID().uuidString.prefix(8)).sock"
        ).path
        defer { unlink(path) }
        let server = try UnixSocket()
        try server.bindAndListen(path: path)
        defer { server.close() }
        let connection = try VaultConnection(socketPath: path, replyTimeout: 5)
        defer { connection.close() }
        let peer = try server.accept()
        defer { peer.close() }
        let pad = JSON.string(String(repeating: "x", count: Varlink.maximumMessageSize))
        var refusal: VaultError?
        do {
            try connection.stream("io.vaultd.Preferences.Observe", ["domains": [pad]]) { _ in false
            }
        } catch let e as VaultError {
            refusal = e
        }
        #expect(
            refusal?.code == .invalidParameter && refusal?.parameters["parameter"] == "message",
            "\(String(describing: refusal))")
        var byte: UInt8 = 0
        #expect(
            recv(peer.fd, &byte, 1, Int32(MSG_DONTWAIT)) == -1 && errno == EAGAIN,
            "part of the message was sent")
    }
}

/// `@unchecked Sendable`: its state is read and written under `lock`.
final class LockedResult: @unchecked Sendable {
    private let lock = NSLock()
    private var stored = ""
    func set(_ s: String) { lock.withLock { stored = s } }
    var value: String { lock.withLock { stored } }
}
