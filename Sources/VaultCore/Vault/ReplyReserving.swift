/// Where a read counts what its reply will take in memory before it builds it: the daemon's
/// reply budget (vaultd's `Server`), shared by every connection. The read computes the most
/// its reply can take from what the store says of it, in the snapshot it then reads.
public protocol ReplyReserving: AnyObject {
    /// Holds `bytes` in all for this reply when there is room now (true); otherwise holds what
    /// it held (false), and the read waits (`waitForRoom`) outside its snapshot.
    func reserveNow(_ bytes: Int) -> Bool
    /// Returns once `bytes` in all may fit; throws RateLimited once this reply has waited as
    /// long as a reply may.
    func waitForRoom(_ bytes: Int) throws
}
