import Foundation
import Synchronization
import VaultProtocol

/// Typed preferences, as `UserDefaults` over cfprefsd: reads are memory lookups in an
/// in-process copy of the search list, kept current by `io.vaultd.Preferences.Observe`;
/// writes go to vaultd (durable when they return) and apply locally at once.
///
/// Search list, first match wins: the argument domain (`-key value` in the process
/// arguments, value as old-style plist text), the app's domain (or the suite), the global
/// domain (`NSGlobalDomain`), the registration domain (`register(defaults:)`, never stored).
///
/// The domains it caches are read and written under `state`'s lock.
public final class Defaults: Sendable {
    /// The handle writes go through.
    public let vault: Vault
    /// The persistent domain this instance writes: the app's own (nil) or a suite (`group.*`).
    public let suiteName: String?
    /// What an instance keeps, read and written under the lock.
    private struct State {
        var argumentDomain: PlistDictionary
        var domains: ExactDictionary<PlistDictionary> = [:]
        var observer: VaultConnection?
        /// The sequence number of the last change event applied from the current Observe
        /// stream, or of the last write a snapshot holds (0 once the stream ended): a write of
        /// ours whose number is not above it was already applied, and maybe overwritten by a
        /// newer one.
        var appliedSequence: UInt64 = 0
        /// The sequence numbers of writes of this process put into the copy before the
        /// Observe stream brought them, by domain and key. An older change of that key the
        /// stream brings meanwhile (another instance's write just before ours, still on its
        /// way) must not replace them: the copy would go back to the older value until the
        /// stream brought ours (a read after `set` saw the value before it). Dropped once the
        /// stream brings them, or a newer change, and when the stream ends (snapshots come
        /// only at its start).
        var ownWrites: ExactDictionary<ExactDictionary<UInt64>> = [:]
        var watchers: [UUID: AsyncStream<DefaultsChange>.Continuation] = [:]
    }
    private let state: Mutex<State>
    /// The registration domain, one per process: shared by every instance, as UserDefaults'
    /// ("The argument and registration domains are shared between all instances").
    private static let registration = Mutex<PlistDictionary>([:])
    private let searchList: [String]

    /// The domain this instance reads first and writes.
    public var domainName: String { searchList[0] }

    /// Opens the app's own domain (or the suite `suiteName`, e.g. `group.org.example.shared`;
    /// the owner may name any domain) and loads the search list. Throws `VaultError`
    /// MissingEntitlement for a suite the app is not a member of, InvalidParameter
    /// `suiteName` when the owner's tools name none, InvalidValue for a malformed domain
    /// name, ConnectionFailed. With `NSGlobalDomain` as the suite, an app's writes are
    /// ReadOnlyDomain.
    public init(vault: Vault, suiteName: String? = nil, arguments: [String] = CommandLine.arguments)
        throws
    {
        self.vault = vault
        self.suiteName = suiteName
        guard let own = suiteName ?? vault.launch.appID else {
            throw VaultError.invalidParameter(
                "suiteName",
                "this program is not a registered app, so it runs as the owner's tool and has no domain of its own: name one (suiteName), or register the program (vaultctl app install APP_ID --exe PATH)"
            )
        }
        searchList = own == "NSGlobalDomain" ? [own] : [own, "NSGlobalDomain"]
        state = Mutex(State(argumentDomain: Self.argumentDomain(arguments)))
        try startObserving()
        let entry = LiveInstance(self)
        Self.live.withLock { $0[ObjectIdentifier(self)] = entry }
    }

    deinit {
        Self.live.withLock { _ = $0.removeValue(forKey: ObjectIdentifier(self)) }
        state.withLock { s in s.observer }?.close()
    }

    /// Every instance of the process, so that a write through one shows at once in the others
    /// that read its domain (as UserDefaults instances share one copy per domain in a process).
    private static let live = Mutex<[ObjectIdentifier: LiveInstance]>([:])

    private final class LiveInstance: Sendable {
        weak let defaults: Defaults?
        init(_ d: Defaults) { defaults = d }
    }

    /// `-key value` pairs from process arguments (the first word is the program). As
    /// Foundation's argument domain, a word starting with "-" is never a value: a switch
    /// with none (`-Verbose -Count 5`) sets nothing, and the next word is looked at as a key
    /// (Count = "5"); taking "-Count" as Verbose's value lost the Count pair.
    static func argumentDomain(_ arguments: [String]) -> PlistDictionary {
        var out: PlistDictionary = [:]
        var i = 1
        while i + 1 < arguments.count {
            let a = arguments[i]
            if a.count > 1, a.hasPrefix("-"), !a.hasPrefix("--"), !arguments[i + 1].hasPrefix("-") {
                out[String(a.dropFirst())] = PropertyListCodec.parseText(arguments[i + 1])
                i += 2
            } else {
                i += 1
            }
        }
        return out
    }

    /// Starts the Observe stream and waits for its snapshots, so the copy is complete
    /// before `init` returns. When the stream ends (vaultd stopped or restarted), it connects
    /// again (after 0.05 s, doubling to 2 s while vaultd is away) and the new snapshots
    /// replace the copy, each difference reported to `changes()` watchers, as UserDefaults
    /// recovers from a cfprefsd restart; an error reply once observing (RateLimited at the
    /// connection cap, say) is retried the same way. It stops for good on MissingEntitlement
    /// (the app uninstalled or reinstalled) and when the instance goes.
    private func startObserving() throws {
        let first = try VaultConnection(socketPath: vault.connection.socketPath)
        state.withLock { s in s.observer = first }
        let ready = DispatchSemaphore(value: 0)
        let failure = LockedBox<VaultError?>(nil)
        let expected = searchList.count
        let socketPath = vault.connection.socketPath
        let parameters: JSONObject = ["domains": .array(searchList.map { .string($0) })]
        let thread = Thread { [weak self] in
            var connection: VaultConnection? = first
            var initial = true
            var pause = 0.05
            while true {
                guard let current = connection else {
                    Thread.sleep(forTimeInterval: pause)
                    pause = min(pause * 2, 2)
                    guard let self else { return }
                    connection = try? VaultConnection(socketPath: socketPath)
                    if let c = connection { self.state.withLock { s in s.observer = c } }
                    continue
                }
                var snapshots = 0
                do {
                    try current.stream(.preferencesObserve, parameters) { reply in
                        guard let self else { return false }
                        if self.apply(reply) {
                            snapshots += 1
                            if initial && snapshots == expected { ready.signal() }
                            pause = 0.05
                        }
                        return true
                    }
                } catch let e as VaultError where e.code != .connectionFailed {
                    if initial {
                        if snapshots < expected { failure.value = e }
                        ready.signal()
                        return
                    }
                    // The app's install ended (uninstalled or reinstalled): its domain is
                    // gone for this instance. Anything else (RateLimited at vaultd's
                    // connection cap, an InternalError) passes: connect again later.
                    if e.code == .missingEntitlement { return }
                } catch {
                    if initial && snapshots < expected {
                        failure.value =
                            (error as? VaultError) ?? VaultError.connectionFailed("\(error)")
                        ready.signal()
                        return
                    }
                }
                initial = false
                connection = nil
                // The next vaultd numbers its writes above this one's (an older vaultd,
                // from 1 again): what this one numbered says nothing about them.
                self?.state.withLock { s in
                    s.appliedSequence = 0
                    s.ownWrites = [:]
                }
                guard self != nil else { return }
            }
        }
        thread.name = "VaultClient.Defaults"
        thread.start()
        ready.wait()
        if let e = failure.value { throw e }
    }

    /// Applies one Observe reply; returns true for a snapshot. A snapshot replaces the
    /// domain's copy; its differences from the copy (none at the first) go to watchers.
    private func apply(_ reply: JSONObject) -> Bool {
        guard let domain = reply["domain"]?.stringValue else { return false }
        if let values = reply["values"]?.objectValue {
            let decoded = values.compactMapValues { try? PlistValue(tagged: $0) }
            // Every write numbered up to the snapshot's sequence is in it (0 from a vaultd
            // that sends none): a write of ours at or below it must not be applied over it.
            let through = Preferences.sequence(in: reply) ?? 0
            let (old, conts): (PlistDictionary, [AsyncStream<DefaultsChange>.Continuation]) =
                state.withLock { s in
                    defer {
                        s.domains[domain] = decoded
                        s.appliedSequence = through
                    }
                    return (s.domains[domain] ?? [:], Array(s.watchers.values))
                }
            if !conts.isEmpty {
                var keys = ExactSet(old.keys.map { ExactString($0) })
                keys.formUnion(decoded.keys.map { ExactString($0) })
                for key in keys.map(\.string) where old[key] != decoded[key] {
                    for c in conts {
                        c.yield(DefaultsChange(domain: domain, key: key, value: decoded[key]))
                    }
                }
            }
            return true
        }
        guard let key = reply["key"]?.stringValue else { return false }
        let value = reply["value"].flatMap { $0.isNull ? nil : try? PlistValue(tagged: $0) }
        let sequence = Preferences.sequence(in: reply)
        let conts: [AsyncStream<DefaultsChange>.Continuation]? = state.withLock { s in
            defer { if let sequence { s.appliedSequence = max(s.appliedSequence, sequence) } }
            if let own = s.ownWrites[domain]?[key] {
                // A change older than our write already in the copy: it stays.
                if let sequence, sequence < own { return nil }
                s.ownWrites[domain]![key] = nil
            }
            s.domains[domain, default: [:]][key] = value
            return Array(s.watchers.values)
        }
        for c in conts ?? [] { c.yield(DefaultsChange(domain: domain, key: key, value: value)) }
        return false
    }

    // MARK: reading (memory lookups)

    /// The value for `key` through the search list, or nil.
    public func object(forKey key: String) -> PlistValue? {
        state.withLock { s in
            if let v = s.argumentDomain[key] { return v }
            for d in searchList { if let v = s.domains[d]?[key] { return v } }
            return Self.registration.withLock { $0[key] }
        }
    }

    /// As `UserDefaults.string(forKey:)`: strings, and numbers (bools as "1"/"0") as text,
    /// as `NSNumber.stringValue` writes them (a whole real without ".0": see `text(real:)`).
    public func string(forKey key: String) -> String? {
        switch object(forKey: key) {
        case .string(let s)?: return s
        case .integer(let i)?: return String(i)
        case .unsignedInteger(let u)?: return String(u)
        case .real(let d)?: return Self.text(real: d)
        case .bool(let b)?: return b ? "1" : "0"
        default: return nil
        }
    }

    /// A real as `NSNumber.stringValue` writes it on Apple's platforms: the shortest digits
    /// that read back as the same Double, a whole number without a fraction ("1", "-0",
    /// "123456789", "0.1", "1e+20"). Swift's own `description` writes "1.0".
    static func text(real d: Double) -> String {
        let s = String(d)
        return s.hasSuffix(".0") ? String(s.dropLast(2)) : s
    }

    /// The integer for `key`: integers, reals (truncated; beyond Int's range, Int.max or
    /// Int.min), bools (0/1) and strings (their leading integer, as `NSString.integerValue`)
    /// convert, as `UserDefaults.integer(forKey:)`; 0 otherwise.
    public func integer(forKey key: String) -> Int {
        switch object(forKey: key) {
        case .integer(let i)?: return Int(i)
        case .unsignedInteger(let u)?: return Int(truncatingIfNeeded: u)
        case .real(let d)?: return Self.truncated(d)
        case .bool(let b)?: return b ? 1 : 0
        case .string(let s)?: return Self.integer(s)
        default: return 0
        }
    }

    /// `d` truncated toward zero, saturating at Int's bounds (never trapping); 0 for nan and ±inf.
    static func truncated(_ d: Double) -> Int {
        guard d.isFinite else { return 0 }
        if d >= Double(Int.max) { return .max }  // Double(Int.max) is 2^63, just above it
        if d <= Double(Int.min) { return .min }
        return Int(d)
    }

    /// A string's leading decimal integer, as `NSString.integerValue`: leading whitespace
    /// skipped (`afterWhitespace`: no-break and ideographic spaces too), an optional sign and
    /// whitespace after it ("- 5" → -5, as CoreFoundation's scanner), then ASCII digits up to
    /// the first other character ("42abc" → 42, " 7" → 7, "2.5" → 2, "1e3" → 1); saturating
    /// at Int.max / Int.min; 0 when the string does not begin with a number.
    static func integer(_ s: String) -> Int {
        var bytes = afterWhitespace(Substring(s)).utf8[...]
        var negative = false
        if let sign = bytes.first, sign == UInt8(ascii: "+") || sign == UInt8(ascii: "-") {
            negative = sign == UInt8(ascii: "-")
            bytes = afterWhitespace(Substring(bytes.dropFirst())).utf8[...]
        }
        var value = 0
        for b in bytes {
            guard b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") else { break }
            let digit = Int(b - UInt8(ascii: "0"))
            let (times10, o1) = value.multipliedReportingOverflow(by: 10)
            let (next, o2) =
                negative
                ? times10.subtractingReportingOverflow(digit)
                : times10.addingReportingOverflow(digit)
            if o1 || o2 { return negative ? .min : .max }
            value = next
        }
        return value
    }

    /// A string's leading decimal number, as `NSString.doubleValue`: leading whitespace
    /// skipped (as `integer(_:)`, but not after the sign), then what strtod reads of
    /// `[+-]digits[.digits][e[+-]digits]` (digits before or after the point) up to the first
    /// other character ("2.5kg" → 2.5, "1e3" → 1000, "1.e3" → 1000, "0x10" → 0); ±infinity
    /// past Double's range; 0 when the string does not begin with a number (also "inf" and
    /// "nan").
    static func double(_ s: String) -> Double {
        let bytes = Array(afterWhitespace(Substring(s)).utf8)
        func digits(from i: Int) -> Int {
            var j = i
            while j < bytes.count, bytes[j] >= UInt8(ascii: "0"), bytes[j] <= UInt8(ascii: "9") {
                j += 1
            }
            return j
        }
        var start = 0
        if start < bytes.count,
            bytes[start] == UInt8(ascii: "+") || bytes[start] == UInt8(ascii: "-")
        {
            start += 1
        }
        var end = digits(from: start)
        var mantissaDigits = end - start
        // A point is the number's with a digit on either side ("5." is 5, ".5" is 0.5, "." nothing).
        if end < bytes.count, bytes[end] == UInt8(ascii: ".") {
            let fractionEnd = digits(from: end + 1)
            mantissaDigits += fractionEnd - (end + 1)
            if mantissaDigits > 0 { end = fractionEnd }
        }
        guard mantissaDigits > 0 else { return 0 }  // no digit: no number
        if end < bytes.count, bytes[end] == UInt8(ascii: "e") || bytes[end] == UInt8(ascii: "E") {
            var e = end + 1
            if e < bytes.count, bytes[e] == UInt8(ascii: "+") || bytes[e] == UInt8(ascii: "-") {
                e += 1
            }
            let exponentEnd = digits(from: e)
            if exponentEnd > e { end = exponentEnd }
        }
        return Double(String(decoding: bytes[..<end], as: UTF8.self)) ?? 0
    }

    /// `s` from its first character that is not whitespace as CoreFoundation's number
    /// scanner (`__CFIsWhitespace`, behind `NSString.integerValue` / `doubleValue`) has it:
    /// controls and space (below U+0021), U+007F–U+00A0 (no-break space included),
    /// U+2000–U+200B and U+3000.
    private static func afterWhitespace(_ s: Substring) -> Substring {
        Substring(
            s.unicodeScalars.drop(while: { c in
                c.value < 0x21 || (0x7F...0xA0).contains(c.value)
                    || (0x2000...0x200B).contains(c.value) || c.value == 0x3000
            }))
    }

    /// As `UserDefaults.double(forKey:)`: reals, integers, bools (0/1) and strings (their
    /// leading number, as `NSString.doubleValue`) convert; 0 otherwise.
    public func double(forKey key: String) -> Double {
        switch object(forKey: key) {
        case .real(let d)?: return d
        case .integer(let i)?: return Double(i)
        case .unsignedInteger(let u)?: return Double(u)
        case .bool(let b)?: return b ? 1 : 0
        case .string(let s)?: return Self.double(s)
        default: return 0
        }
    }

    /// As `UserDefaults.bool(forKey:)`: true for true, non-zero numbers, "YES"/"true" (any
    /// case) and strings whose leading integer is not zero ("7 days").
    public func bool(forKey key: String) -> Bool {
        switch object(forKey: key) {
        case .bool(let b)?: return b
        case .integer(let i)?: return i != 0
        case .unsignedInteger(let u)?: return u != 0
        case .real(let d)?: return d != 0
        case .string(let s)?:
            return ["yes", "true"].contains(s.lowercased()) || Self.integer(s) != 0
        default: return false
        }
    }

    /// The date for `key`; nil when it is absent or not a date (no conversion).
    public func date(forKey key: String) -> Date? {
        if case .date(let d)? = object(forKey: key) { return d }
        return nil
    }

    /// As `UserDefaults.data(forKey:)`: nil when absent or not data.
    public func data(forKey key: String) -> Data? {
        if case .data(let d)? = object(forKey: key) { return d }
        return nil
    }

    /// As `UserDefaults.float(forKey:)`: `double(forKey:)` rounded to a Float.
    public func float(forKey key: String) -> Float { Float(double(forKey: key)) }

    /// As `UserDefaults.stringArray(forKey:)`: nil when absent, not an array, or when any
    /// element is not a string.
    public func stringArray(forKey key: String) -> [String]? {
        guard case .array(let a)? = object(forKey: key) else { return nil }
        var out: [String] = []
        for case .string(let s) in a { out.append(s) }
        return out.count == a.count ? out : nil
    }

    /// As `UserDefaults.url(forKey:)`: a string holding a URL with a scheme (as
    /// `set(_: URL, forKey:)` stores it) is that URL; an absolute path or a path starting
    /// with `~` or `~user` (expanded to that home directory; nil for a user there is none of)
    /// is a file URL; nil otherwise.
    public func url(forKey key: String) -> URL? {
        guard case .string(let s)? = object(forKey: key), !s.isEmpty else { return nil }
        if s.hasPrefix("/") { return URL(fileURLWithPath: s) }
        if s.hasPrefix("~") {
            // "~user" of no user stays as it is: a relative path, which is no URL here.
            let path = NSString(string: s).expandingTildeInPath
            return path.hasPrefix("/") ? URL(fileURLWithPath: path) : nil
        }
        guard let url = URL(string: s), url.scheme != nil else { return nil }
        return url
    }

    /// As `UserDefaults.array(forKey:)`: nil when absent or not an array.
    public func array(forKey key: String) -> [PlistValue]? {
        if case .array(let a)? = object(forKey: key) { return a }
        return nil
    }

    /// As `UserDefaults.dictionary(forKey:)`: nil when absent or not a dictionary.
    public func dictionary(forKey key: String) -> PlistDictionary? {
        if case .dict(let d)? = object(forKey: key) { return d }
        return nil
    }

    /// Every key visible through the search list, with the value that wins.
    public func dictionaryRepresentation() -> PlistDictionary {
        state.withLock { s in
            var out = Self.registration.withLock { $0 }
            for d in searchList.reversed() { out.merge(s.domains[d] ?? [:]) { $1 } }
            out.merge(s.argumentDomain) { $1 }
            return out
        }
    }

    /// Adds to the registration domain (searched last, never stored; one per process, every
    /// instance sees it, as UserDefaults').
    public func register(defaults: PlistDictionary) {
        Self.registration.withLock { $0.merge(defaults) { $1 } }
    }

    // MARK: writing (to vaultd, durable when they return)

    /// Sets `key` in this instance's domain; nil removes it. Durable when it returns, and
    /// visible at once to this instance and to the process's others that read the domain.
    /// Throws `VaultError` (DomainTooLarge: the domain would pass 4 MiB; InvalidValue: a key over 1 KiB of UTF-8 or a date outside years 0
    /// to 9999; ReadOnlyDomain; MissingEntitlement: the app's install ended;
    /// ConnectionFailed); on error nothing changes.
    public func set(_ value: PlistValue?, forKey key: String) throws {
        guard let value else { return try removeObject(forKey: key) }
        let sequence = try vault.preferences.setReturningSequence(
            value, domain: domainName, key: key)
        applyOwnWrite(value, forKey: key, sequence: sequence)
    }

    /// Puts a write of ours into this instance's copy and into every other instance of the
    /// process (on the same vaultd) whose search list holds the domain, at once, each unless
    /// its Observe stream already brought it (and maybe a newer write of another process
    /// after it: applying ours then would leave the copy with an older value than the
    /// store's for good).
    private func applyOwnWrite(_ value: PlistValue?, forKey key: String, sequence: UInt64?) {
        let domain = domainName
        let socketPath = vault.connection.socketPath
        let others = Self.live.withLock { $0.values.compactMap(\.defaults) }.filter {
            $0 !== self && $0.vault.connection.socketPath == socketPath
                && $0.searchList.containsBytes(domain)
        }
        for d in [self] + others { d.apply(value, domain: domain, key: key, sequence: sequence) }
    }

    private func apply(_ value: PlistValue?, domain: String, key: String, sequence: UInt64?) {
        state.withLock { s in
            if let sequence, sequence <= s.appliedSequence { return }
            s.domains[domain, default: [:]][key] = value
            if let sequence { s.ownWrites[domain, default: [:]][key] = sequence }
        }
    }

    /// Typed forms of `set(_:forKey:)`, as UserDefaults': the same limits and errors. An
    /// `Int` is stored as a 64-bit integer, a `Double` bit-exact (nan and ±inf too), a
    /// `Date` with its fractional seconds.
    public func set(_ value: String, forKey key: String) throws {
        try set(.string(value), forKey: key)
    }
    public func set(_ value: Int, forKey key: String) throws {
        try set(.integer(Int64(value)), forKey: key)
    }
    public func set(_ value: Double, forKey key: String) throws {
        try set(.real(value), forKey: key)
    }
    public func set(_ value: Bool, forKey key: String) throws { try set(.bool(value), forKey: key) }
    public func set(_ value: Date, forKey key: String) throws { try set(.date(value), forKey: key) }
    public func set(_ value: Data, forKey key: String) throws { try set(.data(value), forKey: key) }
    /// A URL is stored as its absolute string (`file:///…` for a file URL; not an archive, as
    /// Apple's `UserDefaults.set(_: URL, forKey:)` makes: other tools read it as text), and
    /// `url(forKey:)` reads it back when it has a scheme, as file URLs and web URLs do. A
    /// relative reference with no base (`URL(string: "docs/a")`) does not come back: its
    /// string is a relative path, which `url(forKey:)` reads as nil ("/docs/a": a file URL).
    public func set(_ value: URL, forKey key: String) throws {
        try set(.string(value.absoluteString), forKey: key)
    }

    /// Removes `key` from this instance's domain (no error when absent). Throws as `set`.
    public func removeObject(forKey key: String) throws {
        let sequence = try vault.preferences.removeReturningSequence(domain: domainName, key: key)
        applyOwnWrite(nil, forKey: key, sequence: sequence)
    }

    // MARK: observation

    /// Changes to the search list's stored domains, whichever process made them (as
    /// UserDefaults' KVO), this instance's own writes included; after vaultd restarts, the
    /// differences from the new snapshot. Not the argument or registration domains. Filter
    /// by key as needed.
    public func changes() -> AsyncStream<DefaultsChange> {
        AsyncStream { continuation in
            let id = UUID()
            state.withLock { s in s.watchers[id] = continuation }
            continuation.onTermination = { [weak self] _ in
                guard let self else { return }
                self.state.withLock { s in _ = s.watchers.removeValue(forKey: id) }
            }
        }
    }
}

/// One change seen by `Defaults.changes()`.
public struct DefaultsChange: Sendable, Equatable {
    /// The domain that changed: the app's, a suite (`group.*`) or `NSGlobalDomain`.
    public var domain: String
    /// The key that changed.
    public var key: String
    /// The new value; nil when the key was removed.
    public var value: PlistValue?
}

/// A value shared between threads under a lock: a class, so that closures can share it (a
/// `Mutex` cannot be captured).
final class LockedBox<T: Sendable>: Sendable {
    private let stored: Mutex<T>
    init(_ value: T) { stored = Mutex(value) }
    var value: T {
        get { stored.withLock { $0 } }
        set { stored.withLock { $0 = newValue } }
    }
}
