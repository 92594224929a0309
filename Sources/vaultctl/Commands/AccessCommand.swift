import Foundation
import VaultClient
import VaultProtocol

/// `vaultctl access list|grant|revoke`: the programs allowed to use items' secrets
/// (docs/access.md).
struct AccessCommand: Command {
    enum Action: String, CaseIterable { case list, grant, revoke }
    var action: Action
    var program: String?
    var script: String?
    var itemClass: ItemClass?
    var filters = ItemAttributes()
    var json = false

    init(_ a: inout Arguments) throws {
        action = try a.verb(of: "access")
        json = a.flag("--json")
        guard action != .list else { return }
        let named = a.positional(oneOf: ["generic", "internet"])
        itemClass = named.map { $0 == "internet" ? .internetPassword : .genericPassword }
        program = try a.option("--program")
        script = try a.option("--script")
        filters = try ItemCommand.attributes(&a, prefix: "--")
        if action == .grant {
            guard program != nil else {
                throw UsageError(message: "access grant needs --program PATH")
            }
            guard filters != ItemAttributes() else {
                throw UsageError(message: "access grant needs at least one filter, e.g. --service")
            }
        }
        if let p = program {
            program = URL(fileURLWithPath: p).standardizedFileURL.path
        }
    }

    func run(_ context: Context) throws {
        let keychain = try context.vault().keychain
        switch action {
        case .list:
            let grants = try keychain.accessGrants()
            if json {
                print(JSON.array(grants.map(\.json)).text)
                return
            }
            for g in grants {
                let who = g.script.map { "\(g.program) \($0)" } ?? g.program
                let item =
                    g.attributes.label ?? g.attributes.service ?? g.attributes.server ?? "?"
                let account = g.attributes.account.map { " (\($0))" } ?? ""
                print("\(who)\t\(item)\(account)\t\(g.grantedAt.map(PlistDate.format) ?? "")")
            }
        case .grant:
            let n = try keychain.grantAccess(
                to: program!, script: script, Query(itemClass, filters, matchAll: true))
            print("\(program!)\(script.map { " " + $0 } ?? "") may use \(n) item(s)' secrets")
        case .revoke:
            let q =
                filters == ItemAttributes() && itemClass == nil
                ? nil : Query(itemClass, filters, matchAll: true)
            let n = try keychain.revokeAccess(from: program, script: script, q)
            print("revoked \(n) grant(s)")
        }
    }
}
