import Foundation
import Testing
import VaultProtocol

@testable import VaultCore

@Suite("OrderedEvents")
struct OrderedEventsTests {
    /// Runs `body` on a thread of its own; false when it has not returned within `seconds`
    /// (a deadlock: the thread and the vault are then left as they are).
    private func finishes(within seconds: Double, _ body: @escaping @Sendable () -> Void) -> Bool {
        let done = DispatchSemaphore(value: 0)
        Thread {
            body()
            done.signal()
        }.start()
        return done.wait(timeout: .now() + seconds) == .success
    }

    /// `addObserver` promises handlers run "after it committed, outside the engine lock", so a
    /// handler may call the vault: one that mirrors a preference into another domain must
    /// not deadlock (the events were emitted holding the lock that `Ticket.take` needs).
    @Test func anObserverMayWriteAPreference() throws {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent(
            "vaultcore-tests-\(UUID().uuidString)")
        let vault = try Vault(dataDirectory: url.path + "/data", passphrasePolicy: .tests)
        _ = try vault.initialize(passphrase: nil, caller: .owner)
        let mirrored = LockedList()
        _ = vault.addObserver { event in
            guard case .preference(let d, let k, let v, _) = event, d == "org.example.a" else {
                return
            }
            if let v {
                _ = try? vault.setPreference(
                    domain: "org.example.b", key: k, value: v, caller: .owner)
            }
            mirrored.append(k)
        }
        let ok = finishes(within: 10) {
            _ = try? vault.setPreference(
                domain: "org.example.a", key: "colour", value: .string("red"), caller: .owner)
        }
        #expect(ok, "a preference write whose observer writes another preference deadlocked")
        guard ok else { return }  // the stuck thread holds the engine lock: leave the vault open
        defer {
            vault.close()
            try? FileManager.default.removeItem(at: url)
        }
        #expect(mirrored.items == ["colour"])
        #expect(
            try vault.preference(domain: "org.example.b", key: "colour", caller: .owner)
                == .string("red"))
    }

    /// A handler that takes the engine lock (reads the lock state) while another thread
    /// writes: the writer takes its number under the engine lock, so the two must not wait
    /// for each other.
    @Test func anObserverMayTakeTheEngineLockWhileOthersWrite() throws {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent(
            "vaultcore-tests-\(UUID().uuidString)")
        let vault = try Vault(dataDirectory: url.path + "/data", passphrasePolicy: .tests)
        _ = try vault.initialize(passphrase: nil, caller: .owner)
        _ = vault.addObserver { event in
            guard case .preference = event else { return }
            _ = vault.lockState
        }
        let ok = finishes(within: 20) {
            DispatchQueue.concurrentPerform(iterations: 8) { t in
                for i in 0..<1000 {
                    _ = try? vault.setPreference(
                        domain: "org.example.a", key: "k\(t)", value: .integer(Int64(i)),
                        caller: .owner)
                }
            }
        }
        #expect(ok, "writers and an observer that reads the lock state deadlocked")
        guard ok else { return }
        vault.close()
        try? FileManager.default.removeItem(at: url)
    }

    /// Writers publishing at once while another thread emits: every event is handed out
    /// once, in commit order, and none is left waiting once every writer has returned (the
    /// thread that emits is a writer still in its call, so a write's return never strands
    /// the events it left to that thread).
    @Test func concurrentWritersEventsAreAllEmittedOnceInOrder() throws {
        try withVault { vault, _ in
            let sequences = LockedSequences()
            _ = vault.addObserver { event in
                guard case .preference(_, _, _, let sequence) = event else { return }
                sequences.append(sequence)
            }
            let writers = 8
            let writes = 400
            DispatchQueue.concurrentPerform(iterations: writers) { t in
                for i in 0..<writes {
                    _ = try? vault.setPreference(
                        domain: "org.example.order", key: "k\(t)", value: .integer(Int64(i)),
                        caller: .owner)
                }
            }
            let seen = sequences.items
            #expect(
                seen.count == writers * writes,
                "events handed out by the time every writer returned")
            #expect(seen == seen.sorted() && Set(seen).count == seen.count, "out of order or twice")
        }
    }
}

extension OrderedEventsTests {
    /// Lock-state events reach every observer in the order the changes were made: an
    /// observer that locks the vault when it sees it unlocked (which handlers may do) made
    /// observers emitted after it see "locked" before "unlocked", and they were left showing
    /// the vault unlocked while it was locked (3 of 6 in a probe).
    @Test func lockStateEventsComeInTheOrderOfTheChanges() throws {
        try withVault(initialize: false) { vault, _ in
            _ = try vault.initialize(passphrase: secret("correct horse"), caller: .owner)
            let seen = (0..<6).map { _ in LockedList() }
            for (i, list) in seen.enumerated() {
                _ = vault.addObserver { event in
                    guard case .lockState(let state) = event else { return }
                    let s = state.state.rawValue
                    list.append(s)
                    if i == 2 && s == "unlocked" { _ = try? vault.lockVault(caller: .owner) }
                }
            }
            for _ in 0..<20 {
                _ = try vault.unlock(passphrase: secret("correct horse"), caller: .owner)
                #expect(vault.lockState.state == .locked)
            }
            for (i, list) in seen.enumerated() {
                #expect(
                    list.items
                        == Array(repeating: ["unlocked", "locked"], count: 20).flatMap { $0 },
                    "observer \(i)")
            }
        }
    }
}

final class LockedSequences: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [UInt64] = []
    func append(_ s: UInt64) { lock.withLock { stored.append(s) } }
    var items: [UInt64] { lock.withLock { stored } }
}

final class LockedList: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [String] = []
    func append(_ s: String) { lock.withLock { stored.append(s) } }
    var items: [String] { lock.withLock { stored } }
}

@Suite("UninstallThenInstall")
struct UninstallThenInstallTests {
    /// An uninstall removes the cache directory after its commit, outside the registration
    /// lock: an install that ran in between (here: an observer of the uninstall's preference
    /// events installs the app again and its cache gets a file) had its new cache removed
    /// by the late removal.
    @Test func anInstallBetweenAnUninstallsCommitAndItsRemovalKeepsItsCache() throws {
        try withVault { vault, _ in
            let app = "org.example.reinstalled"
            _ = try vault.installApp(app, executable: "/bin/true", caller: .owner)
            try vault.setPreference(
                domain: app, key: "colour", value: .string("red"), caller: .owner)
            let kept = LockedList()
            _ = vault.addObserver { event in
                guard case .preference(app, "colour", nil, _) = event, kept.items.isEmpty else {
                    return
                }
                do {
                    _ = try vault.installApp(app, executable: "/bin/true", caller: .owner)
                    let path = try vault.cacheDirectory(for: app, caller: .owner) + "/kept"
                    #expect(FileManager.default.createFile(atPath: path, contents: Data("x".utf8)))
                    kept.append(path)
                } catch {
                    Issue.record("reinstall: \(error)")
                }
            }
            _ = try vault.uninstallApp(app, caller: .owner)
            #expect(try vault.app(app, caller: .owner).installed)
            #expect(kept.items.count == 1)
            if let path = kept.items.first {
                #expect(
                    FileManager.default.fileExists(atPath: path),
                    "the reinstalled app's cache file was removed by the uninstall")
            }
        }
    }
}
