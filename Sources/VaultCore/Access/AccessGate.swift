import Foundation
import VaultProtocol

/// The answers to an access confirmation, as macOS's keychain dialog gives them.
public enum AccessChoice: String, Sendable {
    case deny
    case allowOnce
    case alwaysAllow
}

/// A question for the user: may `program` use the secrets of `items` (or, for the owner's
/// acts, grant them to another program, or back up every secret)?
public struct AccessRequest: Sendable {
    public struct Item: Sendable {
        /// The item's label (or service, or server: what names it), as stored: the program
        /// that saved it chose it, so a dialog escapes it.
        public var name: String
        /// Who saved it; nil: unknown (added before vaultd recorded creators).
        public var creator: ProgramIdentity?
        public init(name: String, creator: ProgramIdentity? = nil) {
            self.name = name
            self.creator = creator
        }
    }
    /// What `program` asks to do.
    public enum Purpose: Sendable {
        /// Use the items' secrets.
        case use
        /// Grant another program the items' secrets (`vaultctl access grant`).
        case grant(to: ProgramIdentity)
        /// Write a backup of every secret (`vaultctl backup`).
        case backup
    }
    public var program: ProgramIdentity
    public var items: [Item]
    public var purpose: Purpose = .use
}

/// Asks the user (vaultd's prompters: gcr, pinentry). Blocks its caller's thread until the
/// answer or `timeout` seconds; nil: no prompter, dismissed, or timed out.
public protocol AccessAsker: Sendable {
    func ask(_ request: AccessRequest, timeout: Double) -> AccessChoice?
}

/// What the engine keeps in memory about access confirmations (issue 40 §2, "Bounded"):
/// the programs with a question pending (at most one per program), recent denials (a
/// program denied is not asked again for `denialSeconds`, so it cannot flood the user),
/// and the answers "Allow once" given to a front-end that asked off its own thread (the
/// Secret Service), kept until that call is run again (`permitSeconds`). By program match
/// key (`ProgramIdentity.matchKey`), never by pid.
public final class AccessGate: @unchecked Sendable {
    /// How long a denial is remembered (seconds).
    public static let denialSeconds: Double = 60
    /// How long an "Allow once" waits for the call it answered to run again (seconds).
    static let permitSeconds: Double = 30
    /// The most programs with a denial or permit remembered; past it, the oldest go (a
    /// program is then asked again, never let through).
    static let maximumRemembered = 1024

    private let lock = NSLock()
    private var pending: Set<String> = []
    private var denials: [String: UInt64] = [:]
    private var permits: [String: (uuids: Set<[UInt8]>, until: UInt64)] = [:]
    private var memoryGrants: Set<[UInt8]> = []
    private var _asker: AccessAsker?
    private var _configuredMode: SecretAccessMode?
    private var _timeout: Double = 60
    /// The vault's recorded default mode once read (`AccessStore.defaultMode`): only
    /// `initialize` records one, and it sets this too.
    private var _recordedMode: SecretAccessMode?
    /// Items' creators once read (nil inside: none recorded), so a lookup neither reads nor
    /// opens them again. A creator never changes once its item's Add committed (a replaced
    /// item gets a new uuid, a deleted one's uuid is never reused), so an entry never goes
    /// stale; past `maximumCachedCreators` the cache starts over.
    private var creators: [[UInt8]: ProgramIdentity?] = [:]
    static let maximumCachedCreators = 4096

    public init() {}

    /// The vault's recorded default mode, nil until read or recorded.
    var recordedMode: SecretAccessMode? {
        get { lock.withLock { _recordedMode } }
        set { lock.withLock { _recordedMode = newValue } }
    }

    /// The creators of `uuids` known here, in their order: nil where not known, an inner
    /// nil where none is recorded.
    func cachedCreators(_ uuids: [[UInt8]]) -> [ProgramIdentity??] {
        lock.withLock { uuids.map { creators[$0] } }
    }

    /// Remembers creators read from the store (an inner nil: none recorded).
    func cacheCreators(_ read: [[UInt8]: ProgramIdentity?]) {
        lock.withLock {
            if creators.count + read.count > Self.maximumCachedCreators { creators = [:] }
            creators.merge(read) { $1 }
        }
    }

    /// Who asks the user (vaultd sets its prompters at start); nil: nobody, so `confirm`
    /// fails every question at once with InteractionNotAllowed.
    public var asker: AccessAsker? {
        get { lock.withLock { _asker } }
        set { lock.withLock { _asker = newValue } }
    }

    /// The `SecretAccess` of config.plist; nil: the vault's own default
    /// (`AccessStore.defaultMode`).
    public var configuredMode: SecretAccessMode? {
        get { lock.withLock { _configuredMode } }
        set { lock.withLock { _configuredMode = newValue } }
    }

    /// How long a question waits for the user (seconds; the prompt timeout).
    public var timeout: Double {
        get { lock.withLock { _timeout } }
        set { lock.withLock { _timeout = max(1, newValue) } }
    }

    /// Seconds left of `key`'s denial, nil when none is remembered.
    func deniedFor(_ key: String) -> Double? {
        lock.withLock {
            let now = MonotonicClock.nanoseconds()
            guard let until = denials[key] else { return nil }
            guard until > now else {
                denials[key] = nil
                return nil
            }
            return Double(until - now) / 1e9
        }
    }

    func rememberDenial(_ key: String) {
        lock.withLock {
            if denials.count >= Self.maximumRemembered { denials.removeAll() }
            denials[key] = MonotonicClock.nanoseconds() + UInt64(Self.denialSeconds * 1e9)
        }
    }

    /// Forgets `key`'s denial (the owner granted or revoked by hand).
    func forgetDenials() { lock.withLock { denials.removeAll() } }

    /// Records an "Allow once" for `uuids`, to be taken by the call run again.
    func permit(_ key: String, _ uuids: Set<[UInt8]>) {
        lock.withLock {
            if permits.count >= Self.maximumRemembered { permits.removeAll() }
            permits[key] = (uuids, MonotonicClock.nanoseconds() + UInt64(Self.permitSeconds * 1e9))
        }
    }

    /// Takes `key`'s permit when it covers every one of `uuids` (once: it is gone after).
    func takePermit(_ key: String, covering uuids: Set<[UInt8]>) -> Bool {
        lock.withLock {
            guard let p = permits[key], p.until > MonotonicClock.nanoseconds(),
                uuids.isSubset(of: p.uuids)
            else { return false }
            permits[key] = nil
            return true
        }
    }

    /// Always allow of a session collection's item (`Vault.release`, not persistent): kept
    /// until vaultd stops, as the item is.
    func grantInMemory(_ key: String, _ uuids: Set<[UInt8]>) {
        lock.withLock {
            if memoryGrants.count >= Self.maximumRemembered * 16 { memoryGrants.removeAll() }
            for u in uuids { memoryGrants.insert(Array(key.utf8) + [0] + u) }
        }
    }

    func isGrantedInMemory(_ key: String, _ uuid: [UInt8]) -> Bool {
        lock.withLock { memoryGrants.contains(Array(key.utf8) + [0] + uuid) }
    }

    /// Marks `key` as having a question pending; false when it has one already.
    func begin(_ key: String) -> Bool { lock.withLock { pending.insert(key).inserted } }

    func end(_ key: String) { _ = lock.withLock { pending.remove(key) } }
}
