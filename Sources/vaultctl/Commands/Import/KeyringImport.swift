import DesktopKeyring
import Foundation
import VaultClient
import VaultProtocol

/// Importing keyring items into the vault: `keyring import` (the Secret Service) and
/// `vaultctl import` (gnome-keyring's files, KeePassXC, pass), one mapping and one set of
/// idempotence rules for all (docs/import.md).
extension KeyringCommand {
    // MARK: import

    func importItems(_ keyring: DesktopKeyring, _ context: Context) throws {
        var (info, items): (KeyringCollection, [KeyringItem])
        do {
            (info, items) = try keyring.items(inCollection: collection, unlock: true)
            // An item's `modified` is in whole seconds, and one of this very second is not
            // recorded (a change later in the second would keep it); an item imported without
            // it would have its keyring copy taken at the next import, over a change made in
            // the vault since (a `vaultctl item update`, a password git stored). So an import
            // that meets one waits for the next second and reads the collection again.
            let now = Date().timeIntervalSince1970
            if items.contains(where: { Double($0.modified) >= now.rounded(.down) }) {
                usleep(UInt32(((now.rounded(.down) + 1 - now) * 1_000_000).rounded(.up)) + 10_000)
                (info, items) = try keyring.items(inCollection: collection, unlock: true)
            }
        } catch let e as KeyringError {
            throw KeyringFailure(e)
        }
        try importEntries(
            items.map { ImportEntry(item: $0) },
            from: ImportOrigin(kind: "collection", label: info.label, path: info.path), context)
    }

    /// Imports `entries` (each source's items, as keyring items) into the import's group and
    /// prints each one's result and the summary; `origin` names where they came from.
    func importEntries(_ entries: [ImportEntry], from origin: ImportOrigin, _ context: Context)
        throws
    {
        // A keyring that is empty, damaged (gnome-keyring starts a new one beside a file it
        // cannot read) or newly created holds nothing: said, not a quiet "0 item(s)".
        if entries.isEmpty {
            printError(
                "warning: \(origin.kind) \(JSON.string(origin.label).text) (\(origin.path)) holds 0 items: nothing to import (is this the \(origin.kind) you meant? an empty, damaged or newly created one holds none)"
            )
        }
        let keychain = try context.vault().keychain
        var counts: [String: Int] = [:]
        var plannedKeys: ExactSet = []
        /// How an item's result is printed: "cannot import", or its verb ("would …" in a dry
        /// run, for a change).
        func shown(_ verb: String) -> String {
            if verb == "fail" { return "cannot import" }
            return dryRun && verb != "unchanged" && verb != "skip" ? "would \(verb)" : verb
        }
        for entry in entries.sorted(by: { $0.item.path < $1.item.path }) {
            let item = entry.item
            if asSecretService {
                let (verb, note) = try importAsSecretServiceItem(item, keychain: keychain)
                counts[verb, default: 0] += 1
                say(
                    "\(shown(verb)) Secret Service item \(JSON.string(item.label).text)\(note.map { ": " + $0 } ?? "")",
                    verb, from: item, item: nil, note: note)
                continue
            }
            let (verb, mapped, note) = try importOne(
                entry, keychain: keychain, plannedKeys: &plannedKeys)
            counts[verb, default: 0] += 1
            say(
                "\(shown(verb)) \(mapped.map { Self.describe($0) + " " } ?? "")from \(JSON.string(item.label).text)\(note.map { ": " + $0 } ?? "")",
                verb, from: item, item: mapped.map { ($0.itemClass, $0.attributes) }, note: note)
        }
        var summary = ["add", "update", "unchanged", "skip"].map {
            "\(counts[$0, default: 0]) \($0 == "add" ? "added" : $0 == "update" ? "updated" : $0 == "skip" ? "skipped" : $0)"
        }
        let failed = counts["fail", default: 0]
        if failed > 0 { summary.append("\(failed) not imported") }
        if json {
            print(summaryJSON(origin, items: entries.count, counts: counts).text)
        } else {
            print(
                "\(dryRun ? "dry run, nothing changed: " : "")\(origin.kind) \(JSON.string(origin.label).text), \(entries.count) item(s): \(summary.joined(separator: ", "))"
            )
        }
        // Every other item was imported; the exit status still says that not all were.
        if failed > 0 {
            throw KeyringFailure(
                KeyringError(
                    .failed,
                    "\(failed) item(s) \(dryRun ? "could not be" : "were not") imported (the lines \"cannot import\" say why)"
                ))
        }
    }

    /// Imports one keyring item: "add", "update", "unchanged", "skip" (with why), or "fail"
    /// (with why: the vault refuses this item, e.g. a secret over 1 MiB, `SecretLimit`).
    /// An item the vault refuses does not end the import: the rest are still imported.
    /// `plannedKeys`: in a dry run, the keys earlier items of this run would have added (they
    /// are not in the vault, yet they would take the key, as in the real import).
    func importOne(_ entry: ImportEntry, keychain: Keychain, plannedKeys: inout ExactSet) throws
        -> (String, KeyringMapping.Mapped?, String?)
    {
        let item = entry.item
        guard var mapped = KeyringMapping.map(entry, accessGroup: accessGroup!) else {
            return ("skip", nil, "vaultd's own unlock secret")
        }
        let secret = Data(item.secret ?? [])
        // Checked here too, so a dry run predicts it.
        if secret.count > SecretLimit.maximumBytes {
            return (
                "fail", mapped,
                "the secret is \(secret.count) bytes; the vault's limit is \(SecretLimit.maximumBytes) bytes (1 MiB)"
            )
        }
        // An item vaultd exported goes back to the group it names only while the vault holds
        // it there (a round trip through the keyring, found unchanged or kept). Otherwise it
        // is imported like any keyring item, into the group this import names: any program
        // on the session bus can write an `io.vaultd.Item`, and one naming another group
        // (an app's, or `git`) must not put a credential there.
        if mapped.exported,
            !(mapped.attributes.accessGroup.map { $0.sameBytes(accessGroup!) } ?? false)
        {
            do {
                _ = try keychain.copyMatching(
                    Query(mapped.itemClass, mapped.primaryKey), returnAttributes: true)
            } catch let e as VaultError where e.code == .itemNotFound {
                mapped.attributes.accessGroup = accessGroup
            }
        }
        var fellBack = false
        while true {
            let key = mapped.itemClass.rawValue + "\u{0}" + mapped.primaryKey.json.text
            let existing: Item?
            do {
                existing = try keychain.copyMatching(
                    Query(mapped.itemClass, mapped.primaryKey), returnData: true,
                    returnAttributes: true
                ).first
            } catch let e as VaultError where e.code == .itemNotFound {
                existing = nil
            }
            guard existing != nil || plannedKeys.contains(ExactString(key)) else {
                if dryRun {
                    plannedKeys.insert(ExactString(key))
                } else if let refused = try Self.refusal({
                    try keychain.add(mapped.itemClass, attributes: mapped.attributes, data: secret)
                }) {
                    return ("fail", mapped, refused)
                }
                return ("add", mapped, nil)
            }
            if let existing {
                if mapped.exported {
                    // A vault item exported earlier: the vault's own copy is the reference.
                    if existing.data == secret { return ("unchanged", mapped, nil) }
                    return (
                        "skip", mapped,
                        "exported from the vault earlier; the vault's item differs and is kept"
                    )
                }
                if let source = KeyringMapping.source(existing.attributes?.generic),
                    source == KeyringMapping.source(mapped.attributes.generic)
                {
                    return try reimport(
                        item, secret: secret, mapped: mapped, existing: existing,
                        keychain: keychain)
                }
            }
            // Another item holds this key (or would, earlier in this dry run): keep both, this
            // one under its full attribute set.
            guard !fellBack else {
                return (
                    "fail", mapped,
                    "its key is taken by another item in group \(JSON.string(accessGroup!).text)"
                )
            }
            fellBack = true
            mapped = KeyringMapping.fallback(entry, accessGroup: accessGroup!)
        }
    }

    /// An entry imported before (the vault item at its key came from the same source entry):
    /// "unchanged" when the source has not changed it since, or when it holds what the vault
    /// holds; else "update" (the source's secret, label and comment are taken), or "fail".
    private func reimport(
        _ item: KeyringItem, secret: Data, mapped: KeyringMapping.Mapped, existing: Item,
        keychain: Keychain
    ) throws -> (String, KeyringMapping.Mapped?, String?) {
        // The same keyring item, imported before. Not modified in the keyring
        // since (its `modified` is the one recorded then): the vault's copy is
        // the reference, so an edit made in the vault since is not undone.
        let recorded = KeyringMapping.modified(existing.attributes?.generic)
        if item.modified > 0 && recorded == item.modified {
            return (
                "unchanged", mapped,
                existing.data == secret
                    ? nil
                    : "changed in the vault since the import; the vault's copy is kept"
            )
        }
        // Modified in the keyring (or never recorded): the keyring's copy is taken.
        // The labels byte for byte: one differing only in Unicode normalisation is another label.
        let sameLabel =
            existing.attributes?.label.map { l in
                mapped.attributes.label?.sameBytes(l) ?? false
            } ?? (mapped.attributes.label == nil)
        // The comment (KeePassXC's notes, the rest of a pass file) likewise, when
        // the source has one.
        let sameComment =
            mapped.attributes.comment.map { c in
                existing.attributes?.comment?.sameBytes(c) ?? false
            } ?? true
        let same = existing.data == secret && sameLabel && sameComment
        if !dryRun && (!same || recorded != item.modified) {
            var changes = ItemAttributes()
            changes.label = mapped.attributes.label
            changes.comment = mapped.attributes.comment
            changes.generic = mapped.attributes.generic
            let write = {
                _ = try keychain.update(
                    Query(mapped.itemClass, mapped.primaryKey), attributes: changes,
                    data: same ? nil : secret)
            }
            if let refused = try Self.refusal(write) {
                return ("fail", mapped, refused)
            }
        }
        return (same ? "unchanged" : "update", mapped, nil)
    }

    /// Imports one keyring item as an item of vaultd's Secret Service (docs/secret-service.md):
    /// a generic password of service `org.freedesktop.secrets` in the import's group, with the
    /// keyring item's label and its attributes as lookup attributes (`xdg:schema` included).
    /// An item of the group with exactly those attributes is the same item: "unchanged", or
    /// "update" (its secret or label taken from the keyring); otherwise "add", under a new ID.
    func importAsSecretServiceItem(_ item: KeyringItem, keychain: Keychain) throws -> (
        String, String?
    ) {
        var attributes = item.attributes
        if let s = item.schema, attributes["xdg:schema"] == nil { attributes["xdg:schema"] = s }
        if attributes["xdg:schema"] == KeyringMapping.unlockSchema {
            return ("skip", "vaultd's own unlock secret")
        }
        let secret = Data(item.secret ?? [])
        if secret.count > SecretLimit.maximumBytes {
            return (
                "fail",
                "the secret is \(secret.count) bytes; the vault's limit is \(SecretLimit.maximumBytes) bytes (1 MiB)"
            )
        }
        var query = ItemAttributes(service: Self.secretServiceService, accessGroup: accessGroup)
        query.lookupAttributes = attributes
        let existing: Item?
        do {
            existing = try keychain.copyMatching(
                Query(.genericPassword, query, matchAll: true), returnData: true,
                returnAttributes: true
            )
            .first { $0.attributes?.lookupAttributes == attributes }
        } catch let e as VaultError where e.code == .itemNotFound {
            existing = nil
        }
        if let existing, let account = existing.attributes?.account {
            let sameLabel =
                existing.attributes?.label.map { $0.sameBytes(item.label) } ?? item.label.isEmpty
            if existing.data == secret && sameLabel { return ("unchanged", nil) }
            if !dryRun {
                let q = Query(
                    .genericPassword,
                    ItemAttributes(
                        service: Self.secretServiceService, account: account,
                        accessGroup: accessGroup))
                if let refused = try Self.refusal({
                    _ = try keychain.update(
                        q, attributes: ItemAttributes(label: item.label), data: secret)
                }) {
                    return ("fail", refused)
                }
            }
            return ("update", nil)
        }
        if !dryRun {
            // The item's ID (the account; its object path's last element): 128 random bits, in hex.
            let id = UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
            var a = ItemAttributes(
                service: Self.secretServiceService, account: id, label: item.label,
                accessGroup: accessGroup)
            a.lookupAttributes = attributes
            if let refused = try Self.refusal({
                _ = try keychain.add(.genericPassword, attributes: a, data: secret)
            }) {
                return ("fail", refused)
            }
        }
        return ("add", nil)
    }
}
