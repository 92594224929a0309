import CCrashVFS
import Foundation
import Synchronization
import TestSupport
import Testing
import VaultProtocol

@testable import VaultCore

/// Power cuts, played as SQLite plays them in its own crash tests: the store runs through a VFS
/// (`Tests/CCrashVFS`) that remembers what the disk was not yet told to keep, the machine
/// "dies" after a random number of writes and syncs, and the cut then leaves each file as its
/// last sync kept it plus a random subset of the later writes, some whole, some torn into
/// 512-byte sectors. The fdatasync vaultd makes itself (`WALSync`, outside SQLite) reports to
/// the VFS through `WALSync.probe`. After each cut the store must pass `integrity_check`, and
/// every write the engine acknowledged (its call returned) must be there; a write whose call
/// failed may be there or not, and nothing else may have changed.
///
/// `VAULTD_POWER_CUTS` sets the number of cuts (default 500, about half a minute; the
/// benchmark's run takes 10,000). Seeds are the round's number: a failure names its round.
@Suite(.serialized) struct PowerCutTests {
    static let vfs = "vaultd-power-cut"

    /// Registers the VFS once and routes the store's connections and WALSync's syncs through
    /// it. Only files under the watched directory (`crash_vfs_watch`) are counted or cut:
    /// every other test's store passes through untouched.
    static let installed: Void = {
        precondition(crash_vfs_register(vfs, Database.vfs) == 0, "cannot register the VFS")
        Database.vfsForTests.withLock { $0 = vfs }
        WALSync.probe.withLock {
            $0 = WALSync.Probe(
                willSync: { path in crash_vfs_sync_begin(path) },
                didSync: { path, token in crash_vfs_sync_end(path, token ?? .max) != 0 })
        }
    }()

    static var rounds: Int {
        ProcessInfo.processInfo.environment["VAULTD_POWER_CUTS"].flatMap(Int.init) ?? 500
    }

    @Test func noAcknowledgedWriteIsLostAndTheStoreStaysWhole() throws {
        _ = Self.installed
        // On a tmpfs where there is one: the VFS plays the disk's durability, so the real
        // fdatasync calls need not wait for one.
        let shm = "/dev/shm/vaultcore-power-cuts-\(getpid())"
        let onTmpfs = mkdir(shm, 0o700) == 0
        defer { if onTmpfs { try? FileManager.default.removeItem(atPath: shm) } }
        try withTemporaryDirectory { disk in
            let tmp = onTmpfs ? shm : disk
            let template = tmp + "/template"
            let v = try Vault(dataDirectory: template, passphrasePolicy: .tests)
            _ = try v.initialize(passphrase: nil, caller: .owner)
            v.close()
            var totals = Totals()
            for round in 0..<Self.rounds {
                try Self.cut(
                    round: round, template: template, directory: tmp + "/round", totals: &totals)
            }
            let line =
                "power cuts: \(totals.rounds) cuts (\(totals.midway) in the middle of the writes), \(totals.acknowledged) acknowledged writes, 0 lost; \(totals.unsynced) unsynced writes dropped or torn; integrity_check ok after each"
            print("reliability: \(line)")
            if let path = ProcessInfo.processInfo.environment["VAULTD_RELIABILITY_REPORT"],
                !path.isEmpty, let out = FileHandle(forWritingAtPath: path)
            {
                out.seekToEndOfFile()
                out.write(Data((line + "\n").utf8))
                out.closeFile()
            }
            #expect(totals.rounds == Self.rounds)
            #expect(totals.acknowledged > 0 && totals.midway > 0)
        }
    }

    struct Totals {
        var rounds = 0
        var midway = 0
        var acknowledged = 0
        var unsynced: UInt64 = 0
    }

    /// One round: a copy of the template vault, writers until the machine dies (or all their
    /// writes are done), the cut, then the checks.
    static func cut(round: Int, template: String, directory: String, totals: inout Totals)
        throws
    {
        try? FileManager.default.removeItem(atPath: directory)
        try FileManager.default.copyItem(atPath: template, toPath: directory)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var random = SeededRandom(seed: UInt64(round) &+ 1)
        let writers = round % 3 == 2 ? 4 : 1
        crash_vfs_watch(directory + "/")
        defer { crash_vfs_watch(nil) }
        let vault = try Vault(dataDirectory: directory, passphrasePolicy: .tests)
        // A durable write is two to four VFS operations: the cut falls anywhere in the run.
        crash_vfs_arm(UInt64.random(in: 1...UInt64(160 * writers), using: &random))
        let models = (0..<writers).map { _ in Model() }
        let bodies: [@Sendable () -> Void] = (0..<writers).map { w in
            let seed = random.next()
            return { [models] in Self.write(vault, writer: w, model: models[w], seed: seed) }
        }
        runToEnd(bodies)
        let midway = crash_vfs_dead() != 0
        vault.close()
        totals.unsynced += crash_vfs_power_cut(UInt64(round))
        crash_vfs_watch(nil)

        let db = try Database(path: directory + "/vault.sqlite")
        let check = try db.rows("PRAGMA integrity_check")
        db.close()
        #expect(check == [[.text("ok")]], "round \(round): integrity_check \(check)")
        let reopened = try Vault(dataDirectory: directory, passphrasePolicy: .tests)
        defer { reopened.close() }
        for model in models {
            for (key, allowed) in model.expected {
                let found = try reopened.secretOf(key)
                #expect(
                    allowed.contains(found),
                    "round \(round): \(key) is \(found.map { String(decoding: $0, as: UTF8.self) } ?? "absent"), expected one of \(allowed.map { $0.map { String(decoding: $0, as: UTF8.self) } ?? "absent" })"
                )
            }
            totals.acknowledged += model.acknowledged
        }
        totals.rounds += 1
        if midway { totals.midway += 1 }
    }

    /// Runs each of `bodies` on a thread of its own and waits for all to end (they end by
    /// themselves: every write fails once the machine is dead).
    static func runToEnd(_ bodies: [@Sendable () -> Void]) {
        let done = DispatchSemaphore(value: 0)
        for body in bodies {
            Thread {
                body()
                done.signal()
            }.start()
        }
        for _ in bodies {
            #expect(done.wait(timeout: .now() + 120) == .success, "a writer did not end")
        }
    }

    /// What one writer's keys may hold after the cut: per key, the values a reader may find
    /// (nil: absent). An acknowledged write leaves one; a failed one, the value before or
    /// after it. The writer stops at its first failure (the machine is dead then).
    final class Model: @unchecked Sendable {
        // `@unchecked Sendable`: written by its writer's thread only, read after that thread
        // ended (`runToEnd` waits for it).
        var expected: [String: [[UInt8]?]] = [:]
        var acknowledged = 0
    }

    /// Up to 30 random writes on the writer's own six items: adds, updates, deletes.
    static func write(_ vault: Vault, writer: Int, model: Model, seed: UInt64) {
        var random = SeededRandom(seed: seed)
        var current: [String: [UInt8]?] = [:]
        for step in 0..<30 {
            let key = "w\(writer)-k\(Int.random(in: 0..<6, using: &random))"
            let before = current[key] ?? nil
            let value: [UInt8]? =
                before != nil && Int.random(in: 0..<4, using: &random) == 0
                ? nil : Array("\(key)-\(step)".utf8)
            do {
                try vault.change(key, from: before, to: value)
                current[key] = value
                model.expected[key] = [value]
                model.acknowledged += 1
            } catch {
                model.expected[key] = [before, value]
                return
            }
        }
    }
}

extension Vault {
    fileprivate static func query(_ key: String) -> ItemQuery {
        ItemQuery(
            itemClass: .genericPassword, attributes: ItemAttributes(service: key, account: "a"))
    }

    /// Adds, updates or deletes item `key` (service `key`, account "a") from `old` to `new`.
    fileprivate func change(_ key: String, from old: [UInt8]?, to new: [UInt8]?) throws {
        switch (old, new) {
        case (nil, let new?):
            try addGeneric(service: key, account: "a", secret: new)
        case (_?, let new?):
            _ = try updateItems(
                Self.query(key), changes: ItemAttributes(), secret: SecureBytes(copying: new),
                caller: .owner)
        case (_?, nil):
            _ = try deleteItems(Self.query(key), caller: .owner)
        case (nil, nil):
            break
        }
    }

    /// The secret of item `key`, nil when there is none.
    fileprivate func secretOf(_ key: String) throws -> [UInt8]? {
        do {
            let found = try copyMatching(Self.query(key), returnData: true, caller: .owner)
            return plain(found.first?.data)
        } catch let e as VaultFailure where e.code == .itemNotFound {
            return nil
        }
    }
}
