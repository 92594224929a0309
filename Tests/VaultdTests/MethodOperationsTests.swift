import Testing
import VaultCore
import VaultProtocol

@testable import vaultd

/// The varlink front-end's method table against the interface descriptions: no method ships
/// without an operation, and the table names no method that does not exist.
@Suite struct MethodOperationsTests {
    /// Every method the interface descriptions declare, fully qualified.
    static let declared = Set(VarlinkInterfaces.inputParameters.keys)

    @Test func everyDeclaredMethodHasAPolicyDecision() {
        // The descriptions were parsed at all (a parser that found nothing would pass below):
        // the 31 methods of today, or more.
        #expect(
            Self.declared.contains("io.vaultd.Keychain.Add") && Self.declared.count >= 31,
            "\(Self.declared.sorted())")
        for method in Self.declared.sorted() {
            #expect(
                VarlinkOperations.of(method) != nil,
                "\(method) is declared but has no policy decision")
        }
    }

    @Test func everyPolicyEntryNamesADeclaredMethod() {
        for method in VarlinkOperations.byMethod.keys.sorted() {
            #expect(
                Self.declared.contains(method),
                "the policy decides \(method), which no interface declares")
        }
    }

    /// Only the service's own description is open to anyone; everything else is an engine
    /// operation, which the engine authorizes.
    @Test func onlyTheServiceDescriptionNeedsNoDecision() {
        let open = VarlinkOperations.byMethod.filter { $0.value == .open }.keys.sorted()
        #expect(
            open == ["org.varlink.service.GetInfo", "org.varlink.service.GetInterfaceDescription"])
    }

    /// Every operation kind is some method's (of varlink or the Secret Service), or vaultd's
    /// own subscription for the Secret Service's signals: an operation no front-end names
    /// would be one the tables (and docs/architecture.md) do not show.
    @Test func everyOperationKindIsSomeMethods() {
        let named = Set(
            (Array(VarlinkOperations.byMethod.values)
                + Array(SecretServiceOperations.byMember.values))
                .compactMap { d -> VaultCore.Operation.Kind? in
                    if case .operation(let k) = d { return k }
                    return nil
                } + [.observeItemChanges])
        #expect(
            named == Set(VaultCore.Operation.Kind.allCases),
            "not named by any method: \(Set(VaultCore.Operation.Kind.allCases).subtracting(named))")
    }
}
