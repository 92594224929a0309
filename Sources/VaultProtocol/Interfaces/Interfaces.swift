/// The varlink interfaces vaultd serves, from their descriptions: the `.varlink` files in
/// this directory, one per interface, named after it (io.vaultd.Keychain.varlink). They are
/// the source of truth for the protocol: every method, field and error, with a comment each.
/// Their texts are compiled in (`Texts/`, written from the files by
/// scripts/generate-interfaces; a test fails while the two differ) and parsed once, by
/// `VarlinkIDL`, the first time anything here is used. Calls are checked against them
/// (`VarlinkValidation`), GetInterfaceDescription returns their texts, and the method names
/// everyone uses (`VarlinkMethod`) are held to them by a test.
public enum VarlinkInterfaces {
    /// The interfaces in the order `GetInfo` lists them.
    public static let names = [
        "org.varlink.service", "io.vaultd.Vault", "io.vaultd.Keychain", "io.vaultd.Preferences",
        "io.vaultd.Caches", "io.vaultd.Apps",
        "io.vaultd.Sync",
    ]

    /// Every interface, parsed, in `names`' order. A description that does not parse, or
    /// whose `interface` line names another interface, stops the process at its first use:
    /// it is part of the program, and a test parses each.
    public static let parsed: [VarlinkIDL.Interface] = names.map { name in
        guard let text = texts[name] else {
            fatalError("no description of the interface \(name) (InterfaceTexts.swift)")
        }
        do {
            let interface = try VarlinkIDL.parse(text)
            guard interface.name == name else {
                fatalError("\(name).varlink declares the interface \(interface.name)")
            }
            return interface
        } catch {
            fatalError("\(name).varlink does not parse: \(error)")
        }
    }

    private static let byName: [String: VarlinkIDL.Interface] = Dictionary(
        uniqueKeysWithValues: parsed.map { ($0.name, $0) })

    /// Interface name → description text, in the order `GetInfo` lists them.
    public static var all: [(name: String, description: String)] {
        parsed.map { ($0.name, $0.text) }
    }

    /// The description of the interface `name`, exactly as its file holds it; nil when vaultd
    /// serves no such interface.
    public static func description(of name: String) -> String? { byName[name]?.text }

    public static func interface(_ name: String) -> VarlinkIDL.Interface? { byName[name] }

    /// The declaration of the fully-qualified method `name` ("io.vaultd.Keychain.Add") and its
    /// interface; nil when no served interface declares it.
    public static func method(_ name: String) -> (VarlinkIDL.Interface, VarlinkIDL.Method)? {
        methodsByName[name]
    }

    /// Every declared method by its fully-qualified name, with its interface: one lookup a call.
    private static let methodsByName: [String: (VarlinkIDL.Interface, VarlinkIDL.Method)] =
        Dictionary(
            uniqueKeysWithValues: parsed.flatMap { i in
                i.methods.values.map { (i.name + "." + $0.name, (i, $0)) }
            })

    /// Every declared method, fully qualified, in the order of `names` and of each description.
    public static let methodNames: [String] = parsed.flatMap { i in
        i.methodOrder.map { i.name + "." + $0 }
    }

    /// The input parameter names of every method: `"io.vaultd.Keychain.Add"` → `["class", "attributes", "data"]`.
    public static let inputParameters: [String: Set<String>] = Dictionary(
        uniqueKeysWithValues: parsed.flatMap { i in
            i.methods.values.map { (i.name + "." + $0.name, Set($0.input.map(\.name))) }
        })

    /// `inputParameters`, compared byte for byte.
    static let inputNames: [String: Set<ExactString>] = inputParameters.mapValues {
        Set($0.map { s in ExactString(s) })
    }

    /// The parameter names of every error, by its fully-qualified name:
    /// `"org.varlink.service.InvalidParameter"` → `["parameter"]`.
    public static let errorParameters: [String: Set<String>] = Dictionary(
        uniqueKeysWithValues: parsed.flatMap { i in
            i.errors.values.map { (i.name + "." + $0.name, Set($0.parameters.map(\.name))) }
        })

    /// The first parameter of `call` (in sorted order) that its method does not declare, or
    /// nil when all are declared or the method is not one of ours (MethodNotFound follows).
    public static func undeclaredParameter(in call: VarlinkCall) -> String? {
        guard let declared = inputNames[call.method] else { return nil }
        guard call.parameters.contains(where: { !declared.contains(ExactString($0.key)) }) else {
            return nil
        }
        return call.parameters.keys.map { ExactString($0) }.filter { !declared.contains($0) }
            .sorted().first?.string
    }
}
