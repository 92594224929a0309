import Foundation
import Testing
import VaultCore
import VaultProtocol

@Suite("PreferenceEvents")
struct PreferenceEventsTests {
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
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("vaultcore-tests-\(UUID().uuidString)")
        let vault = try Vault(dataDirectory: url.path + "/data")
        _ = try vault.initialize(passphrase: nil, caller: .owner)
        let mirrored = LockedList()
        _ = vault.addObserver { event in
            guard case .preference(let d, let k, let v, _) = event, d == "org.example.a" else { return }
            if let v { _ = try? vault.setPreference(domain: "org.example.b", key: k, value: v) }
            mirrored.append(k)
        }
        let ok = finishes(within: 10) { _ = try? vault.setPreference(domain: "org.example.a", key: "colour", value: .string("red")) }
        #expect(ok, "a preference write whose observer writes another preference deadlocked")
        guard ok else { return }  // the stuck thread holds the engine lock: leave the vault open
        defer {
            vault.close()
            try? FileManager.default.removeItem(at: url)
        }
        #expect(mirrored.items == ["colour"])
        #expect(try vault.preference(domain: "org.example.b", key: "colour") == .string("red"))
    }

    /// A handler that takes the engine lock (reads the lock state) while another thread
    /// writes: the writer takes its number under the engine lock, so the two must not wait
    /// for each other.
    @Test func anObserverMayTakeTheEngineLockWhileOthersWrite() throws {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("vaultcore-tests-\(UUID().uuidString)")
        let vault = try Vault(dataDirectory: url.path + "/data")
        _ = try vault.initialize(passphrase: nil, caller: .owner)
        _ = vault.addObserver { event in
            guard case .preference = event else { return }
            _ = vault.lockState
        }
        let ok = finishes(within: 20) {
            DispatchQueue.concurrentPerform(iterations: 8) { t in
                for i in 0..<1000 { _ = try? vault.setPreference(domain: "org.example.a", key: "k\(t)", value: .integer(Int64(i))) }
            }
        }
        #expect(ok, "writers and an observer that reads the lock state deadlocked")
        guard ok else { return }
        vault.close()
        try? FileManager.default.removeItem(at: url)
    }
}

final class LockedList: @unchecked Sendable {
    private let lock = NSLock()
    private var stored: [String] = []
    func append(_ s: String) { lock.withLock { stored.append(s) } }
    var items: [String] { lock.withLock { stored } }
}
