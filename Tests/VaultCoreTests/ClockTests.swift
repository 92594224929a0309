import Foundation
import Testing
import VaultProtocol

@testable import VaultCore

/// The engine's clocks: `OffsetClock` (vaultd's test clock) runs ahead of the system's by an
/// offset that only grows, on both its wall and its monotonic time; the vault's failed-unlock
/// waits and its executable scan go by the clock it was given.
@Suite struct ClockTests {
    @Test func anOffsetClockRunsAheadAndNeverGoesBack() {
        let clock = OffsetClock()
        #expect(clock.offsetSeconds == 0)
        let before = (Date(), MonotonicClock.nanoseconds())
        #expect(clock.setOffset(90))
        let (wall, mono) = (clock.now, clock.monotonicNanoseconds)
        #expect(
            wall.timeIntervalSince(before.0) >= 90 && wall.timeIntervalSince(before.0) < 100,
            "\(wall) vs \(before.0)")
        #expect(mono >= before.1 + 90_000_000_000 && mono < before.1 + 100_000_000_000)
        // Back, not a number, negative, past 10⁹ s: refused, the offset as it was.
        for refused in [89.0, .nan, .infinity, -1, 2e9] {
            #expect(!clock.setOffset(refused), "\(refused)")
        }
        #expect(clock.offsetSeconds == 90)
        #expect(clock.setOffset(90) && clock.setOffset(120.5))
        clock.advance(by: 0.25)
        clock.advance(by: -5)
        #expect(clock.offsetSeconds == 120.75)
    }

    /// Failed unlocks on a clock that stands still impose exactly the documented waits, which
    /// end when the clock is moved past them, and only then.
    @Test func theFailedUnlockWaitsGoByTheVaultsClock() throws {
        let clock = ManualClock()
        try withVault(initialize: false, clock: clock) { vault, _ in
            _ = try vault.initialize(passphrase: secret("right"), caller: .owner)
            _ = try vault.lockVault(caller: .owner)
            for n in 1...5 {
                expectFailure(.wrongPassphrase) {
                    _ = try vault.unlock(passphrase: secret("guess \(n)"), caller: .owner)
                }
                let wait = try vault.status(caller: .owner).retryAfter
                #expect(wait == Vault.unlockWait(afterFailures: n), "after \(n) failures")
                guard wait > 0 else { continue }
                clock.advance(by: wait / 2)
                let limited = expectFailure(.rateLimited) {
                    _ = try vault.unlock(passphrase: secret("right"), caller: .owner)
                }
                #expect(limited?.details.retryAfter == wait / 2)
                clock.advance(by: wait / 2)
            }
            _ = try vault.unlock(passphrase: secret("right"), caller: .owner)
            #expect(vault.lockState.state == .unlocked)
        }
    }
}
