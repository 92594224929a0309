import CVaultSys
import Foundation
import Testing
import VaultCore
import VaultProtocol

@testable import vaultd

/// `BusRelay` driven by hand, on a socketpair standing for GDBus's connection.
@Suite struct BusRelayTests {
    /// The kernel hands a message's descriptors over with whatever the same writer sent just
    /// before it: one read from the bus can be the end of one message and the start of the
    /// next, which carries a descriptor (the secret portal's RetrieveSecret). GDBus gets the
    /// descriptor with the first byte of the message that declares it (UNIX_FDS), not with the
    /// message before, which would take it and leave the portal's call without its pipe.
    @Test func aDescriptorGoesWithTheMessageThatDeclaresIt() throws {
        let pair = try SystemCall.socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue))
        let wake = try SystemCall.pipe()
        let relay = BusRelay(bus: -1, gdbus: pair.0, wake: wake, logger: Logger())
        defer {
            for fd in [pair.0, pair.1, wake.read, wake.write] { SystemCall.close(fd) }
        }
        // GDBus's side of the authentication, done.
        relay.fromGDBusBytes(Array("\0AUTH EXTERNAL 30\r\nBEGIN\r\n".utf8)[...], [])
        let first =
            BusHeaderTests.header(bodyLength: 16, unixFDs: nil) + [UInt8](repeating: 1, count: 16)
        let second =
            BusHeaderTests.header(bodyLength: 16, unixFDs: 1) + [UInt8](repeating: 2, count: 16)
        let passed = try SystemCall.open("/dev/null", O_RDONLY)
        // The first message's start in one read, its end and all of the second (with the
        // descriptor) in the next.
        relay.fromBusBytes(first[0..<20], [])
        relay.fromBusBytes((first[20...] + second)[...], [passed])
        #expect(relay.flushToGDBus())

        func read(_ count: Int) -> (bytes: [UInt8], fds: [Int32]) {
            var buffer = [UInt8](repeating: 0, count: count)
            var fds = [Int32](repeating: -1, count: 4)
            var n: Int32 = 0
            var got = 0
            var received: [Int32] = []
            while got < count {
                let r = buffer.withUnsafeMutableBytes { b in
                    fds.withUnsafeMutableBufferPointer { f in
                        vault_recv_fds(
                            pair.1, b.baseAddress! + got, count - got, f.baseAddress, 4, &n)
                    }
                }
                guard r > 0 else { break }
                got += r
                received += fds.prefix(Int(n))
            }
            return (Array(buffer.prefix(got)), received)
        }
        let one = read(first.count)
        #expect(one.bytes == first)
        #expect(one.fds.isEmpty, "the first message took the second's descriptor")
        let two = read(second.count)
        #expect(two.bytes == second)
        #expect(two.fds.count == 1)
        for fd in one.fds + two.fds { SystemCall.close(fd) }
    }
}
