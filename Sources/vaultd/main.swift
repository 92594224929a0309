import CVaultSys
import Dispatch
import Foundation
import Synchronization
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

// vaultd: the per-user vault daemon. Config, socket, signals; the engine is VaultCore.

func fail(_ message: String, code: Int32 = 1) -> Never {
    writeToStandardError("vaultd: \(message)\n")
    exit(code)
}

StandardOutput.occupyClosedDescriptors()

let environment = ProcessInfo.processInfo.environment
/// vaultd's log (stderr, with journald's level prefixes when stderr is the journal), at the
/// default level until config.plist's `LogLevel` is read; passed to what logs.
let logger = Logger.standardError(environment: environment)

// The signals vaultd handles (SIGHUP, SIGUSR1, SIGTERM, SIGINT) are blocked in every thread,
// from before the first one exists (a thread inherits its creator's mask). Their dispatch
// sources are made before the socket serves, but libdispatch registers a source on a thread
// of its own after `resume` returns; until then a signal that is not blocked would be
// discarded (ignored) or end vaultd (default action). Blocked, it stays pending, and the
// source's signalfd reads it once registered: a signal sent as soon as vaultd answers is
// handled, never lost. (vaultd starts no child process, which would inherit the mask.)
var handledSignals = sigset_t()
sigemptyset(&handledSignals)
for sig in [SIGHUP, SIGUSR1, SIGTERM, SIGINT] { sigaddset(&handledSignals, sig) }
pthread_sigmask(SIG_BLOCK, &handledSignals, nil)

// Buffers of 256 KiB and more (large calls and replies, up to 8 MiB each) get pages of their
// own, given back to the system when freed. glibc's default raises that threshold as such
// buffers are freed, and later ones stay in its heaps: a few large calls at once would
// leave vaultd holding their memory resident for good.
if vault_set_mmap_threshold(256 << 10) != 1 {
    logger.warning("cannot set malloc's mmap threshold")
}

let configuration: Configuration
do {
    configuration = try Configuration.parse(
        Array(CommandLine.arguments.dropFirst()), environment: environment)
} catch let e as Configuration.UsageError {
    if e.message.isEmpty {
        print(Configuration.usage)
        exit(0)
    }
    fail("\(e.message)\n\(Configuration.usage)", code: 64)
}

let initialSettings: Settings
do {
    initialSettings = try Settings.load(
        configuration.configFile, explicit: configuration.configFileIsExplicit)
} catch {
    fail("\(error)")
}
logger.setLevel(initialSettings.logLevel)
if let file = configuration.configFile, let message = initialSettings.unknownKeysMessage(file) {
    logger.warning(message)
}
initialSettings.logInForce(logger)
/// The settings in force: config.plist as read at start, and again on SIGHUP.
let currentSettings = Mutex(initialSettings)
nonisolated var settings: Settings { currentSettings.withLock { $0 } }

let limits: Limits
do {
    limits = try Limits.fromEnvironment(environment)
} catch {
    fail("\(error)", code: 64)
}

// No core dumps, no same-uid ptrace, no crash report with memory: keys live in this
// process's memory. (Non-dumpable does not stop a crash reporter running as root: a vaultd
// run as root, SIGSEGVed, printed the memory at each register.)
_ = vault_set_nondumpable()
CrashOutput.keepSecretsOut()
signal(SIGPIPE, SIG_IGN)
// SIGHUP reloads config.plist and SIGUSR1 runs the periodic tasks, through dispatch sources
// made before the socket serves (below); neither ends vaultd uncleanly, and one sent before
// its source is registered waits, blocked (above).
signal(SIGHUP, SIG_IGN)
signal(SIGUSR1, SIG_IGN)

let activated = Listener.fromActivation(environment: environment)
// A daemon already serving the socket is the likelier reason for a store in use, and says so.
if activated == nil {
    do {
        try Listener.refuseIfServed(
            path: configuration.socketPath, strictDirectory: configuration.socketPathIsDefault,
            logger: logger)
    } catch {
        fail("\(error)")
    }
}

// For tests only, and only in debug builds: VAULTD_ARGON2_TEST_COST=min (TestCost).
let passphrasePolicy: PassphrasePolicy
do {
    passphrasePolicy = try TestCost.policy(from: environment)
} catch {
    fail("\(error)", code: 64)
}
// For tests only, and only in debug builds: VAULTD_TEST_SECRET_ACCESS (TestSecretAccess).
do {
    if let mode = try TestSecretAccess.mode(from: environment) {
        logger.notice("test settings: SecretAccess \(mode.rawValue) unless config.plist sets it")
    }
} catch {
    fail("\(error)", code: 64)
}
if passphrasePolicy.kdfCost != .moderate {
    logger.notice("test settings: Argon2id cost \(passphrasePolicy.kdfCost.rawValue)")
}
// For tests only, and only in debug builds: VAULTD_TEST_CLOCK_FILE, a clock the tests move
// (TestClock). Otherwise the system's.
let testClockFile: String?
do {
    testClockFile = try TestClock.file(from: environment)
} catch {
    fail("\(error)", code: 64)
}
let testClock = testClockFile.map { _ in OffsetClock() }
if let testClockFile, let testClock {
    TestClock.update(testClock, from: testClockFile, logger: logger)
    logger.notice(
        "test settings: the clock runs \(testClock.offsetSeconds) s ahead of the system's, and as far ahead as \(logField(testClockFile)) says at each SIGUSR1"
    )
}

let vault: Vault
do {
    vault = try Vault(
        dataDirectory: configuration.dataDirectory, cacheDirectory: configuration.cacheDirectory,
        newDeviceKey: configuration.newDeviceKey, deviceKeyTPM: initialSettings.deviceKeyTPM,
        passphrasePolicy: passphrasePolicy, clock: testClock ?? SystemClock(), logger: logger)
} catch {
    // Named as a client would see it (io.vaultd.Vault.StoreDamaged: …).
    fail("cannot open the vault in \(configuration.dataDirectory): \(VaultError.wire(error))")
}

// The Secret Service on the session bus (a second front-end), before the socket is bound: once
// the socket answers, the bus name is vaultd's (or the log says why not). Returns once the bus
// has answered the name request; a failure is logged, and the socket is served regardless.
let secretService: SecretService? = {
    guard configuration.secretService || initialSettings.secretService else { return nil }
    let s = SecretService(
        vault: vault, replace: configuration.replaceSecretService,
        promptTimeout: initialSettings.secretServicePromptTimeout)
    return s.start() ? s : nil
}()

let listener: UnixSocket
do {
    listener =
        try activated
        ?? Listener.bind(
            path: configuration.socketPath, strictDirectory: configuration.socketPathIsDefault,
            logger: logger)
} catch {
    fail("\(error)")
}
/// The socket file this vaultd bound (device and inode), so that a stop removes only that
/// one: the path may hold another vaultd's socket by then (this one's removed meanwhile).
let boundSocketFile: (dev: UInt64, ino: UInt64)? = {
    guard activated == nil, let st = try? SystemCall.lstat(configuration.socketPath) else {
        return nil
    }
    return (UInt64(st.st_dev), UInt64(st.st_ino))
}()

initialSettings.apply(to: vault)
// Per-program access (docs/access.md): the questions go to vaultd's own dialogs.
vault.accessGate.asker = AccessPrompter(
    dialogs: secretService?.dialogs ?? PromptDialogs(service: nil, logger: logger))
// Where the scan looks for Flatpak apps' deployments (docs/apps.md).
vault.appSettings.flatpakInstallations = FlatpakInstallations.fromEnvironment()

let running = RunningApps()
// The idle auto-lock's clock, touched by every call except those that only look (Status).
let idle = IdleClock(vault.clock)
// Sync of synchronizable items through a replicated folder (docs/sync.md): its watcher
// starts with the server, and passes only once `vaultctl sync init` or `join` configured it.
let syncService = SyncService(vault: vault)
// The interface descriptions are parsed now, before the first call, along with the dispatch
// table built from them (a description that does not parse stops vaultd here).
_ = (VarlinkInterfaces.parsed, Dispatcher.table)
let dispatcher = Dispatcher(
    vault: vault, runningApps: { running.server?.runningApps ?? [] }, activity: { idle.touch() },
    sync: syncService)
let server = Server(
    listener: listener, listenerIsShared: activated != nil, dispatcher: dispatcher, limits: limits,
    logger: logger
) { @Sendable peer in
    PeerIdentity.session(for: peer, vault: vault)
}
// SIGTERM and SIGINT stop vaultd cleanly from the moment it can answer a call, so they are
// handled before the server starts. Signals are handled on a queue of their own, not the
// main queue: `dispatchMain` parks the main thread in `sigsuspend` on a mask in read-only
// memory, which valgrind (3.19, Debian 12) writes to and crashes on, and scripts/profile runs
// vaultd under valgrind's callgrind.
let signalQueue = DispatchQueue(label: "vaultd.signals")
var signalSources: [DispatchSourceSignal] = []
for (sig, name) in [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT")] {
    signal(sig, SIG_IGN)
    let source = DispatchSource.makeSignalSource(signal: sig, queue: signalQueue)
    source.setEventHandler { @Sendable in shutdown(name) }
    source.resume()
    signalSources.append(source)
}
running.server = server

// Uninstall detection: registered executables that vanish (for the grace period) or come
// back, at start and every second.
vault.scanExecutables()
let scanQueue = DispatchQueue(label: "vaultd.apps-scan")
let scanTimer = DispatchSource.makeTimerSource(queue: scanQueue)
scanTimer.schedule(deadline: .now() + 1, repeating: 1)
scanTimer.setEventHandler { @Sendable in vault.scanExecutables() }
scanTimer.resume()

// The cache policy: purge when free space or the budget crosses its mark.
let maintenance = DispatchQueue(label: "vaultd.maintenance")
// Rescheduled by a SIGHUP on the maintenance queue: a `Mutex`, as the timer (not `Sendable`)
// is used from that queue and from here.
let cacheTimer = Mutex(DispatchSource.makeTimerSource(queue: maintenance))
cacheTimer.withLock { timer in
    timer.schedule(deadline: .now() + 0.2, repeating: settings.cacheCheckInterval)
    timer.setEventHandler { @Sendable in
        _ = vault.enforceCachePolicy(settings.cachePolicy, running: server.runningApps)
        vault.replenishReserve()
    }
    timer.resume()
}

// Idle auto-lock (off unless AutoLockSeconds is set; checked each second, so a reload can turn it on).
let autoLockTimer = DispatchSource.makeTimerSource(queue: maintenance)
autoLockTimer.schedule(deadline: .now() + 1, repeating: 1)
func checkIdleLock() {
    let seconds = settings.autoLockSeconds
    if seconds > 0, idle.secondsSinceLastCall() >= seconds, vault.isUnlockedWithPassphrase {
        // The owner's setting, carried out on the owner's behalf.
        _ = try? vault.daemonSession(for: .idleLock).lock()
        logger.notice("locked after \(Int(seconds)) s without a call")
    }
}
autoLockTimer.setEventHandler { @Sendable in checkIdleLock() }
autoLockTimer.resume()

/// SIGUSR1 (`systemctl --user kill -s USR1 vaultd`): runs each periodic task once, now, on the
/// queue its timer runs on (the executable scan, then the cache policy, the space reserve
/// (`Vault.replenishReserve`) and the idle-lock check), and logs `periodic tasks ran (N)` when all are done, N counting from 1. A test
/// clock (`VAULTD_TEST_CLOCK_FILE`, debug builds) reads its file first. For an
/// owner who wants a purge now, and the tick tests wait for instead of sleeping through the
/// timers. The signal needs the owner's uid (or root), and signals coalesce, so a burst runs
/// the tasks once or twice, never a backlog.
let periodicPasses = Atomic<Int>(0)
let tickSource = DispatchSource.makeSignalSource(signal: SIGUSR1, queue: maintenance)
tickSource.setEventHandler { @Sendable in
    // A test's clock is moved first, so the tasks run at the time the test set.
    if let testClockFile, let testClock {
        TestClock.update(testClock, from: testClockFile, logger: logger)
    }
    scanQueue.sync { vault.scanExecutables() }
    _ = vault.enforceCachePolicy(settings.cachePolicy, running: server.runningApps)
    vault.replenishReserve()
    checkIdleLock()
    let n = periodicPasses.add(1, ordering: .relaxed).newValue
    logger.info("SIGUSR1: periodic tasks ran (\(n))")
}
tickSource.resume()

/// SIGHUP (`systemctl --user reload vaultd`): reads config.plist again. A file that does not
/// load leaves the settings in force, and says so.
func reloadSettings() {
    var source = "from \(configuration.configFile ?? "")"
    if let file = configuration.configFile, !SystemCall.access(file, F_OK) {
        source = "(\(file) is absent: the defaults)"
    }
    if configuration.configFile == nil { source = "(no config file: the defaults)" }
    do {
        let fresh = try Settings.load(
            configuration.configFile, explicit: configuration.configFileIsExplicit)
        let old = settings
        currentSettings.withLock { $0 = fresh }
        fresh.apply(to: vault)
        if fresh.cacheCheckInterval != old.cacheCheckInterval {
            cacheTimer.withLock {
                $0.schedule(deadline: .now() + 0.2, repeating: fresh.cacheCheckInterval)
            }
        }
        logger.setLevel(fresh.logLevel)
        logger.notice(
            "SIGHUP: settings reloaded \(source) (AutoLockSeconds \(fresh.autoLockSeconds > 0 ? String(Int(fresh.autoLockSeconds)) : "off"))"
        )
        if let file = configuration.configFile, let message = fresh.unknownKeysMessage(file) {
            logger.warning("SIGHUP: \(message)")
        }
        fresh.logInForce(logger)
    } catch {
        logger.warning("SIGHUP: settings not reloaded, the ones in force stay: \(error)")
    }
}
let hangupSource = DispatchSource.makeSignalSource(signal: SIGHUP, queue: maintenance)
hangupSource.setEventHandler { @Sendable in reloadSettings() }
hangupSource.resume()

// Whether vaultd is the login keyring itself, known before any connection can ask for an
// unlock from it.
KeyringUnlock.isOwnKeyring.store(secretService != nil, ordering: .releasing)

// Served only now: every signal vaultd takes has its handler, so one sent as soon as vaultd
// answers (a reload, a tick) is handled, not lost.
server.start()
syncService.start()

// Unlock at login from the passphrase remembered in the login keyring (never blocks serving);
// not when vaultd is that keyring.
KeyringUnlock.atStart(vault, logger: logger)

logger.notice(
    "serving \(activated == nil ? configuration.socketPath : "socket from systemd") (data: \(configuration.dataDirectory))"
)

/// When the last call arrived (for the idle auto-lock).
final class IdleClock: Sendable {
    /// The vault's clock (the system's, but a test's).
    private let clock: any VaultClock
    /// The clock's monotonic nanoseconds at the last call: touched by every call, so no lock,
    /// and not moved by changes to the wall clock.
    private let last: Atomic<UInt64>
    init(_ clock: any VaultClock) {
        self.clock = clock
        last = Atomic(clock.monotonicNanoseconds)
    }
    func touch() { last.store(clock.monotonicNanoseconds, ordering: .relaxed) }
    func secondsSinceLastCall() -> Double {
        let now = clock.monotonicNanoseconds
        let then = last.load(ordering: .relaxed)
        return now > then ? Double(now - then) / 1e9 : 0
    }
}

/// Lets the dispatcher ask the server which apps are connected (the server is made after the
/// dispatcher).
final class RunningApps: Sendable {
    private struct Reference: Sendable { weak var server: Server? }
    private let reference = Mutex(Reference())
    var server: Server? {
        get { reference.withLock { $0.server } }
        set { reference.withLock { $0.server = newValue } }
    }
}

func shutdown(_ signalName: String) -> Never {
    logger.notice("\(signalName): stopping")
    server.stop(timeout: 10)
    vault.close()
    if let bound = boundSocketFile, let st = try? SystemCall.lstat(configuration.socketPath),
        UInt64(st.st_dev) == bound.dev, UInt64(st.st_ino) == bound.ino
    {
        try? SystemCall.unlink(configuration.socketPath)
    }
    logger.notice("stopped")
    exit(0)
}

while true { pause() }
