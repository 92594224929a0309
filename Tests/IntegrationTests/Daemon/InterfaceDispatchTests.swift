import Foundation
import Testing
import VaultClient
import VaultProtocol

/// vaultd's dispatch table against the interface descriptions, through its socket: every
/// declared method is handled (none answers MethodNotFound, InterfaceNotFound or
/// MethodNotImplemented), every reply matches its method's declaration, and a method no
/// interface declares is not handled. (vaultd's debug build also checks each reply it sends,
/// and stops on a mismatch: a test that goes on talking to it would fail.)
@Suite struct InterfaceDispatchTests {
    static let notHandled: Set<String> = [
        "org.varlink.service.MethodNotFound", "org.varlink.service.InterfaceNotFound",
        "org.varlink.service.MethodNotImplemented",
    ]

    /// Each declared method, called by the owner without parameters (required ones missing are
    /// InvalidParameter, which only a handled method with a declaration gets to), then
    /// the streaming ones with `more`.
    @Test func everyDeclaredMethodIsHandledAndItsReplyMatches() throws {
        let d = try Daemon()
        defer { d.close() }
        let c = try VaultConnection(socketPath: d.socketPath)
        defer { c.close() }
        var answered = 0
        var streaming: [VarlinkMethod] = []
        for method in VarlinkMethod.allCases {
            do {
                let reply = try c.call(method, [:])
                #expect(
                    VarlinkValidation.replyProblem(method: method.name, parameters: reply) == nil,
                    "\(method.name): \(reply)")
            } catch let e as VaultError {
                #expect(
                    !Self.notHandled.contains(e.name),
                    "\(method.name) is declared but not handled: \(e)")
                #expect(
                    e.code != .connectionFailed,
                    "\(method.name): vaultd closed the connection (see its log):\n\(d.log)")
                if e.code == .expectedMore { streaming.append(method) }
            }
            answered += 1
        }
        #expect(answered == VarlinkInterfaces.methodNames.count)
        #expect(streaming == [.vaultObserve, .preferencesObserve, .cachesObserve])
        // The first replies of the streams that start with one (the lock state; a snapshot of
        // each domain observed that holds a key). Caches.Observe waits for a purge.
        try c.call(
            .preferencesSet, ["domain": "com.example.d", "key": "k", "value": ["string": "v"]])
        for (method, parameters) in [
            (VarlinkMethod.vaultObserve, [:] as JSONObject),
            (.preferencesObserve, ["domains": ["com.example.d"]]),
        ] {
            var first: JSONObject?
            let s = try VaultConnection(socketPath: d.socketPath)
            defer { s.close() }
            try s.stream(method, parameters) { reply in
                first = reply
                return false
            }
            let reply = try #require(first, "\(method.name) streamed nothing")
            #expect(
                VarlinkValidation.replyProblem(method: method.name, parameters: reply) == nil,
                "\(method.name): \(reply)")
        }
        // Methods not declared are not served, whatever the interface.
        for name in [
            "io.vaultd.Keychain.Nope", "io.vaultd.Vault.hello", "org.varlink.service.Nope",
        ] {
            #expect(throws: VaultError.self) { try c.call(name) }
            do { try c.call(name) } catch let e as VaultError {
                #expect(
                    e.code == .methodNotFound && e.parameters["method"] == .string(name), "\(e)")
            }
        }
        #expect(
            throws: VaultError(
                name: VaultError.Code.interfaceNotFound.name,
                parameters: [
                    "interface": "io.vaultd.Nope", "message": "no interface io.vaultd.Nope",
                ])
        ) {
            try c.call("io.vaultd.Nope.Call")
        }
    }

    /// GetInterfaceDescription returns each file's text exactly, byte for byte.
    @Test func interfaceDescriptionsAreTheFilesTexts() throws {
        let d = try Daemon()
        defer { d.close() }
        let c = try VaultConnection(socketPath: d.socketPath)
        defer { c.close() }
        let info = try c.call(.serviceGetInfo)
        #expect(
            info["interfaces"]?.arrayValue?.compactMap(\.stringValue) == VarlinkInterfaces.names)
        let dir = Paths.repoRoot.appendingPathComponent("Sources/VaultProtocol/Interfaces")
        for name in VarlinkInterfaces.names {
            let file = try Data(contentsOf: dir.appendingPathComponent(name + ".varlink"))
            let served = try c.call(.serviceGetInterfaceDescription, ["interface": .string(name)])[
                "description"]?.stringValue
            #expect(served.map { Data($0.utf8) } == file, "\(name)")
        }
    }
}
