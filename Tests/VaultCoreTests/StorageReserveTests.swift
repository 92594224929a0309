import Foundation
import Testing

@testable import VaultCore

#if canImport(Glibc)
import Glibc
#endif

/// The space reserve (`StorageReserve`): a vault makes it whole at its start (1 MiB of
/// allocated blocks, mode 0600, in the data directory); `release` gives every block back and
/// says how many bytes; `replenish` allocates them again; a second `release` has nothing to give.
@Suite struct StorageReserveTests {
    /// The file's size, the bytes of its blocks (a file system may count a block of its own
    /// for the extents), and its mode.
    static func allocated(_ path: String) -> (bytes: Int, blocks: Int, mode: mode_t)? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return (Int(st.st_size), Int(st.st_blocks) * 512, st.st_mode & 0o777)
    }

    @Test func aVaultKeepsAWholeReserveThatIsGivenBackAndMadeAgain() throws {
        try withVault { vault, dir in
            let path = dir + "/space.reserve"
            let made = try #require(Self.allocated(path))
            #expect(
                made.bytes == StorageReserve.bytes && made.blocks >= StorageReserve.bytes
                    && made.mode == 0o600, "\(made)")
            #expect(vault.reserve.release() == StorageReserve.bytes)
            #expect(Self.allocated(path).map { $0.bytes == 0 && $0.blocks == 0 } == true)
            #expect(vault.reserve.release() == 0, "nothing left to give")
            #expect(vault.replenishReserve() == StorageReserve.bytes)
            #expect(
                Self.allocated(path).map {
                    $0.bytes == StorageReserve.bytes && $0.blocks >= StorageReserve.bytes
                } == true)
            #expect(
                vault.replenishReserve() == StorageReserve.bytes, "a whole reserve stays as it is")
        }
    }
}
