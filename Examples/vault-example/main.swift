import Foundation
import VaultClient
import VaultProtocol

// vault-example: a small app built on VaultClient. vaultd identifies it by its executable
// path, so copies at different paths, registered separately, are different apps. Exit
// statuses as vaultctl's (`ExitCode`).

let usage = """
    usage: vault-example COMMAND
      launch                                  launch info as JSON
      status                                  the vault's figures as this app sees them, as JSON
      token set | token get | token delete    a generic password (service token, account token)
      item add|get|update|delete|list --access-group G --service S --account A   (add, update: secret from stdin)
      defaults set KEY VALUE [--suite group.X] | defaults get KEY [--suite group.X]
      defaults fill N [--prefix P] [--value V] [--suite group.X]   sets P0…P(N-1) to V0…V(N-1), one by one
      cache path | cache write NAME BYTES
      wait SECONDS                            stay connected (a running app), printing the launch info first
      hold N                                  open N more connections that never call, print {"held": N}, keep them until killed
    """

struct Usage: Error { var message: String }

func readStdin() -> Data { FileHandle.standardInput.readDataToEndOfFile() }

func option(_ args: inout [String], _ name: String) -> String? {
    guard let i = args.firstIndex(of: name), i + 1 < args.count else { return nil }
    defer { args.removeSubrange(i...(i + 1)) }
    return args[i + 1]
}

func launchJSON(_ l: LaunchInfo) -> JSON {
    [
        "appID": l.appID.map { .string($0) } ?? .null,
        "generation": l.generation.map { .string($0) } ?? .null,
        "firstLaunch": .bool(l.isFirstLaunch), "wipedCredentials": JSON(l.wipedCredentials),
    ]
}

func run(_ args: [String]) throws {
    var args = args
    guard !args.isEmpty else { throw Usage(message: "a command is needed") }
    // Before connecting: a connection says Hello, which is the first launch of a new install
    // (it wipes the credentials earlier installs left), and `--help` should not be that.
    if ["-h", "--help", "help"].contains(args[0]) {
        print(usage)
        return
    }
    // A command, or a verb the command does not have (the rest of the arguments are checked below).
    let verbs = [
        "token": ["set", "get", "delete"], "item": ["add", "get", "update", "delete", "list"],
        "defaults": ["set", "get", "fill"], "cache": ["path", "write"],
    ]
    guard verbs[args[0]] != nil || ["launch", "status", "wait", "hold"].contains(args[0]) else {
        throw Usage(message: "unknown command '\(args[0])'")
    }
    if let known = verbs[args[0]], args.count < 2 || !known.contains(args[1]) {
        throw Usage(message: "\(args[0]) needs \(known.joined(separator: ", "))")
    }
    if args[0] == "wait", args.count < 2 || !(Double(args[1]).map { $0 >= 0 } ?? false) {
        throw Usage(message: "wait needs a number of seconds")
    }
    if args[0] == "hold", args.count < 2 || !(Int(args[1]).map { $0 >= 0 } ?? false) {
        throw Usage(message: "hold needs a number of connections")
    }
    let vault = try Vault.connect()
    let command = args.removeFirst()
    switch (command, args.first) {
    case ("launch", _):
        print(launchJSON(vault.launch).text)
    case ("status", _):
        let s = try vault.status()
        print(JSON.object(["items": JSON(s.items), "domains": JSON(s.domains)]).text)
    case ("wait", let seconds?):
        guard let s = Double(seconds), s >= 0 else {
            throw Usage(message: "wait needs a number of seconds")
        }
        // Print, flush, then keep the connection open: vaultd counts the app as running.
        print(launchJSON(vault.launch).text)
        fflush(nil)  // every output stream: stdout is a C global Swift 6 will not read
        Thread.sleep(forTimeInterval: s)
        withExtendedLifetime(vault) {}
    case ("hold", let count?):
        // Connections that never call (idle, or over vaultd's cap for this app): what a
        // misbehaving app can do to the daemon.
        let held = try (0..<Int(count)!).map { _ in
            try VaultConnection(socketPath: vault.connection.socketPath)
        }
        print(JSON.object(["held": JSON(held.count)]).text)
        fflush(nil)  // every output stream: stdout is a C global Swift 6 will not read
        while true { pause() }
        withExtendedLifetime((vault, held)) {}
    case ("token", let verb?):
        guard let appID = vault.launch.appID else {
            throw VaultError(.missingEntitlement, "this program is not a registered app")
        }
        let attrs = ItemAttributes(service: "token", account: "token", accessGroup: appID)
        switch verb {
        case "set":
            let secret = readStdin()
            do {
                try vault.keychain.add(attributes: attrs, data: secret)
            } catch let e as VaultError where e.code == .duplicateItem {
                try vault.keychain.update(Query(.genericPassword, attrs), data: secret)
            }
        case "get":
            FileHandle.standardOutput.write(
                try vault.keychain.copyMatching(Query(.genericPassword, attrs), returnData: true)[0]
                    .data ?? Data())
        case "delete":
            try vault.keychain.delete(Query(.genericPassword, attrs))
        default: throw Usage(message: "token needs set, get or delete")
        }
    case ("item", let verb?):
        args.removeFirst()
        let attrs = ItemAttributes(
            service: option(&args, "--service"), account: option(&args, "--account"),
            accessGroup: option(&args, "--access-group"))
        switch verb {
        case "add": try vault.keychain.add(attributes: attrs, data: readStdin())
        case "get":
            FileHandle.standardOutput.write(
                try vault.keychain.copyMatching(Query(.genericPassword, attrs), returnData: true)[0]
                    .data ?? Data())
        case "delete": try vault.keychain.delete(Query(.genericPassword, attrs))
        case "update": try vault.keychain.update(Query(.genericPassword, attrs), data: readStdin())
        case "list":
            for item in try vault.keychain.copyMatching(Query(nil, attrs, matchAll: true)) {
                print(item.attributes?.json.text ?? "{}")
            }
        default: throw Usage(message: "item needs add, get, update, delete or list")
        }
    case ("defaults", let verb?):
        args.removeFirst()
        let defaults = try Defaults(
            vault: vault, suiteName: option(&args, "--suite"), arguments: [])
        switch (verb, args.count) {
        case ("set", 2): try defaults.set(args[1], forKey: args[0])
        case ("get", 1):
            guard let v = defaults.object(forKey: args[0]) else {
                throw VaultError(.keyNotFound, "no value for the key")
            }
            if case .string(let s) = v { print(s) } else { print(v.tagged.text) }
        case ("fill", _):
            let prefix = option(&args, "--prefix") ?? "key"
            let value = option(&args, "--value") ?? "value"
            guard args.count == 1, let n = Int(args[0]), n >= 0 else {
                throw Usage(message: "defaults fill N [--prefix P] [--value V]")
            }
            // Each set is acknowledged (durable) before the next starts.
            for i in 0..<n { try defaults.set("\(value)\(i)", forKey: "\(prefix)\(i)") }
            print("wrote \(n) keys")
        default: throw Usage(message: "defaults set KEY VALUE | defaults get KEY | defaults fill N")
        }
    case ("cache", let verb?):
        args.removeFirst()
        let dir = try vault.cachesDirectory()
        switch (verb, args.count) {
        case ("path", 0): print(dir.path)
        case ("write", 2):
            guard let n = Int(args[1]), n >= 0 else {
                throw Usage(message: "BYTES must be a number")
            }
            try Data(count: n).write(to: dir.appendingPathComponent(args[0]))
        default: throw Usage(message: "cache path | cache write NAME BYTES")
        }
    default:
        throw Usage(message: "unknown command '\(command)'")
    }
}

do {
    try run(Array(CommandLine.arguments.dropFirst()))
    exit(0)
} catch let e as Usage {
    FileHandle.standardError.write(Data("vault-example: \(e.message)\n\(usage)\n".utf8))
    exit(ExitCode.usage.rawValue)
} catch let e as VaultError {
    // The Keychain OSStatus too, where one applies (e.g. -34018 for MissingEntitlement).
    let status = e.status.map { " (status \($0))" } ?? ""
    FileHandle.standardError.write(Data("vault-example: \(e.description)\(status)\n".utf8))
    // The statuses vaultctl exits with (`ExitCode`: 44 not found, 77 not permitted, ...).
    exit(ExitCode(e).rawValue)
} catch {
    FileHandle.standardError.write(Data("vault-example: \(error)\n".utf8))
    exit(1)
}
