import CVaultSys
import Dispatch
import Foundation
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

// vaultd: the per-user vault daemon. Config, socket, signals; the engine is VaultCore.

func fail(_ message: String, code: Int32 = 1) -> Never {
    FileHandle.standardError.write(Data("vaultd: \(message)\n".utf8))
    exit(code)
}

let environment = ProcessInfo.processInfo.environment
let configuration: Configuration
do {
    configuration = try Configuration.parse(Array(CommandLine.arguments.dropFirst()), environment: environment)
} catch let e as Configuration.UsageError {
    if e.message.isEmpty {
        print(Configuration.usage)
        exit(0)
    }
    fail("\(e.message)\n\(Configuration.usage)", code: 64)
}

// No core dumps, no same-uid ptrace: keys live in this process's memory.
_ = vault_set_nondumpable()
signal(SIGPIPE, SIG_IGN)

let vault: Vault
do {
    vault = try Vault(dataDirectory: configuration.dataDirectory)
} catch {
    fail("cannot open the vault in \(configuration.dataDirectory): \(error)")
}

let activated = Listener.fromActivation(environment: environment)
let listener: UnixSocket
do {
    listener = try activated ?? Listener.bind(path: configuration.socketPath, strictDirectory: configuration.socketPathIsDefault)
} catch {
    fail("\(error)")
}

let server = Server(listener: listener, dispatcher: Dispatcher(vault: vault)) { _ in Caller.owner }
server.start()
log("serving \(activated == nil ? configuration.socketPath : "socket from systemd") (data: \(configuration.dataDirectory))")

func shutdown(_ signalName: String) -> Never {
    log("\(signalName): stopping")
    server.stop(timeout: 10)
    vault.close()
    if activated == nil { unlink(configuration.socketPath) }
    log("stopped")
    exit(0)
}

var signalSources: [DispatchSourceSignal] = []
for (sig, name) in [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT")] {
    signal(sig, SIG_IGN)
    let source = DispatchSource.makeSignalSource(signal: sig, queue: .main)
    source.setEventHandler { shutdown(name) }
    source.resume()
    signalSources.append(source)
}
dispatchMain()
