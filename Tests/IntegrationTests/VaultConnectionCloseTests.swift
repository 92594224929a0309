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
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("vc-close-\(UUID().uuidString.prefix(8)).sock").path
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
        #expect(later != "replied", "a call after close() was answered (the first call: \(firstCall.value))")
        served.shutdown()
        filler.close()
        server.close()
    }
}

final class LockedResult: @unchecked Sendable {
    private let lock = NSLock()
    private var stored = ""
    func set(_ s: String) { lock.withLock { stored = s } }
    var value: String { lock.withLock { stored } }
}
