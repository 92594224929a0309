import VaultProtocol

extension Vault {
    /// Admits a call by an app (the owner always passes). The connection's app must still be
    /// installed under the generation it was identified with: an instance connected before an
    /// uninstall or a reinstall gets MissingEntitlement, so it cannot re-create what the
    /// uninstall removed. With `launch` (keychain calls), a generation that has not launched
    /// yet launches now, Hello or not: the leftovers of earlier installs are wiped first, as
    /// Hello would (a client that skips Hello must not see them); the first Hello after it
    /// still reports the first launch and the count wiped (`unreportedLaunchWipe`).
    /// An app caller without a generation (not made from a registration) is refused: fail
    /// closed, since only `AppRecord.caller` makes an app's caller.
    func admit(_ caller: Caller, launch: Bool = false) throws {
        guard let appID = caller.appID else { return }
        let a = try Self.current(try read({ try apps.find(appID, in: $0) }), of: caller, appID)
        if launch && a.launchedGeneration != a.generation {
            _ = try self.launch(caller, reporting: false)
        }
    }

    /// `admit`'s check again, inside a write (in its transaction, `db`, engine lock held),
    /// so the write and the check see one state: an uninstall or reinstall that commits
    /// between `admit` and the write would otherwise let the write land after it (a
    /// preference set would re-create the domain the uninstall had just removed, and the
    /// next install would read it). Throws MissingEntitlement, as `admit` does.
    func admitInWrite(_ caller: Caller, in db: Database) throws {
        guard let appID = caller.appID else { return }
        _ = try Self.current(try apps.find(appID, in: db), of: caller, appID)
    }

    /// `record`, when it is `caller`'s install (installed, the same generation); throws
    /// MissingEntitlement otherwise (`admit`, `admitInWrite`).
    private static func current(_ record: AppRecord?, of caller: Caller, _ appID: String) throws
        -> AppRecord
    {
        guard let a = record, a.installed, let generation = caller.generation,
            a.generation == generation
        else {
            throw VaultFailure(
                .missingEntitlement,
                "\(appID) was uninstalled or reinstalled after this connection was made; reconnect")
        }
        return a
    }
}
