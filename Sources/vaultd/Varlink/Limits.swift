import Foundation
import VaultProtocol

/// Named limits (as sd-varlink's): what one daemon accepts before it refuses. Some can be
/// lowered (or raised) for tests and small machines through the environment:
/// `VAULTD_MAX_CONNECTIONS`, `VAULTD_MAX_CONNECTIONS_PER_PEER`, `VAULTD_PARTIAL_TIMEOUT`,
/// `VAULTD_IDLE_TIMEOUT` (seconds), `VAULTD_REPLY_BUDGET_MIB`.
struct Limits: Sendable {
    /// Connections served at once; further ones are closed at once.
    var maximumConnections = 256
    /// Connections served at once for one identity: one app (a registered executable, a
    /// Flatpak app ID), or one program of the owner's (an unregistered executable, by the
    /// file the kernel says the process runs: device and inode of `/proc/PID/exe`). The one
    /// over it is answered RateLimited and closed, so no program can take every connection,
    /// nor lock vaultctl, git-credential-vault or the PAM helper out: well under
    /// `maximumConnections`, which only several identities together can reach.
    var maximumConnectionsPerPeer = 32
    /// A connection with no call in progress, no unfinished message and no stream is closed
    /// after this long without a call (seconds), so idle connections give their slot back
    /// (a client connects again on its next call: `VaultConnection` does).
    var idleTimeout = 60.0
    /// A peer that leaves half a message unfinished this long is dropped (seconds), however
    /// slowly it keeps trickling bytes.
    var partialMessageTimeout = 10.0
    /// A reply its peer has not read whole within this long is given up and the peer
    /// dropped (seconds), however slowly it keeps reading.
    var sendTimeout = 30.0
    /// A reply over `messageAllowance` (it holds the message budget while it is sent) is
    /// given up, and its peer dropped, when the peer takes no byte of it for this long
    /// (seconds), or reads it slower than `minimumSendRate`: a peer that does not read its
    /// replies holds the budget other clients' large replies need for about this long.
    var stalledSendTimeout = 1.0
    /// Bytes per second a peer must read a reply over `messageAllowance` at, on average
    /// (past the first `stalledSendTimeout` seconds): an 8 MiB reply may take 5 s, enough
    /// for a client on a loaded machine, while a peer that trickles holds it no longer.
    var minimumSendRate = 2 << 20
    /// How long a reply waits for room in the message budget that other connections hold
    /// before it is RateLimited (seconds): past `stalledSendTimeout`, so peers that do not
    /// read give their share back first.
    var budgetWait = 2.0
    /// Bytes of events queued for one Observe stream whose peer does not read them; past
    /// this the stream is ended (RateLimited, when the peer can still take it) and the
    /// events dropped: a client that connects again starts from a snapshot.
    var observerQueueBytes = 4 << 20
    /// Bytes of messages in flight that vaultd holds for all connections together: the
    /// unfinished calls it is receiving and the replies it is sending, beyond the first
    /// `messageAllowance` of each (which always fit: ordinary calls and replies are never
    /// held up). Without it 256 connections each sending 8 MiB without its end held 2 GB,
    /// as did 256 that asked for a large reply and did not read it; with it vaultd's memory
    /// for them is bounded (buffers grow by doubling, so up to about twice the budget is
    /// allocated at once). A call that would pass it is read to its end without being kept,
    /// answered with RateLimited and its connection closed; a reply that would pass it is
    /// RateLimited instead.
    var messageBudget = 64 << 20
    /// Bytes of each message that do not count against the budget.
    var messageAllowance = 64 << 10
    /// Bytes that the replies being built and sent may take, all connections together, as
    /// counted before each is built: a call whose reply grows with what the store holds
    /// first reserves the most its reply can take (a CopyMatching: `Dispatcher.replyBound`,
    /// from matchLimit, returnData and the item limits in `ReplyLimit`; a preference read:
    /// from what the domain counts, `PreferencesStore.replyBytes`; one that may take more
    /// than the whole budget holds all of it), waits up to `budgetWait` for room, else is
    /// answered RateLimited without being looked up; the reservation is given back once the
    /// reply is sent. Such a reply does not count against `messageBudget` too. At least
    /// `Dispatcher.largestReplyBound`, so any lookup can be served.
    var replyBudget = 128 << 20
    /// How long a connection's thread polls for the next call before it sleeps
    /// (microseconds; `VAULTD_BUSY_POLL_US`, 0 turns it off). See `BusyPoll`.
    var busyPollMicroseconds = BusyPoll.window(fromEnvironment: "VAULTD_BUSY_POLL_US", default: 30)

    struct InvalidSetting: Error, CustomStringConvertible {
        var description: String
    }

    /// The defaults, with the overrides the environment sets. Throws for a value that is not
    /// a positive number (VAULTD_BUSY_POLL_US: not a whole number from 0; above 1000 it is 1000).
    static func fromEnvironment(_ env: [String: String]) throws -> Limits {
        var limits = Limits()
        if let v = env["VAULTD_MAX_CONNECTIONS"], !v.isEmpty {
            guard let n = Int(v), n >= 1 else {
                throw InvalidSetting(
                    description: "VAULTD_MAX_CONNECTIONS must be a positive integer, not '\(v)'")
            }
            limits.maximumConnections = n
        }
        if let v = env["VAULTD_MAX_CONNECTIONS_PER_PEER"], !v.isEmpty {
            guard let n = Int(v), n >= 1 else {
                throw InvalidSetting(
                    description:
                        "VAULTD_MAX_CONNECTIONS_PER_PEER must be a positive integer, not '\(v)'")
            }
            limits.maximumConnectionsPerPeer = n
        }
        if let v = env["VAULTD_IDLE_TIMEOUT"], !v.isEmpty {
            guard let t = Double(v), t.isFinite, t > 0 else {
                throw InvalidSetting(
                    description:
                        "VAULTD_IDLE_TIMEOUT must be a positive number of seconds, not '\(v)'")
            }
            limits.idleTimeout = t
        }
        if let v = env["VAULTD_PARTIAL_TIMEOUT"], !v.isEmpty {
            guard let t = Double(v), t.isFinite, t > 0 else {
                throw InvalidSetting(
                    description:
                        "VAULTD_PARTIAL_TIMEOUT must be a positive number of seconds, not '\(v)'")
            }
            limits.partialMessageTimeout = t
        }
        if let v = env["VAULTD_REPLY_BUDGET_MIB"], !v.isEmpty {
            let least = (Dispatcher.largestReplyBound + (1 << 20) - 1) >> 20
            guard let n = Int(v), n >= least, n <= 1 << 20 else {
                throw InvalidSetting(
                    description:
                        "VAULTD_REPLY_BUDGET_MIB must be a whole number of MiB from \(least) (the most one keychain lookup reserves) to 1048576, not '\(v)'"
                )
            }
            limits.replyBudget = n << 20
        }
        if let v = env["VAULTD_BUSY_POLL_US"], !v.isEmpty {
            guard let n = Int(v), n >= 0 else {
                throw InvalidSetting(
                    description:
                        "VAULTD_BUSY_POLL_US must be a whole number of microseconds (0 turns busy polling off), not '\(v)'"
                )
            }
            limits.busyPollMicroseconds = min(n, 1000)
        }
        return limits
    }
}
