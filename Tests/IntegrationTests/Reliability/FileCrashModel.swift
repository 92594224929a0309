import Foundation

/// A power-cut model of the files a program writes outside SQLite, replayed from a real
/// `strace -f -y -xx` of it (after the crash-consistency checkers that record system calls and
/// replay their prefixes, such as ALICE, OSDI 2014). Each file holds what was written to it
/// (volatile) and what its last fsync or fdatasync kept (durable); each directory the names it
/// holds now and those its last fsync kept. After every call of the trace, three crash states
/// are checked for each watched path:
/// - names as the directories' last syncs kept them, contents as the files' last syncs kept
///   them (nothing since reached the disk);
/// - the names as they are now, contents as last synced (the metadata reached the disk, the
///   data not: ext4's zero-length file after a rename of an unsynced file);
/// - names as last synced, contents as they are now.
/// In each, a watched path must hold a version it held after a completed step (a sync or a
/// rename) or, while no version of it was durable yet, nothing. At the end, every watched path
/// must be durable as it is.
struct FileCrashModel {
    /// Paths the model watches: under `roots`, and not `ignored` (SQLite's own files).
    let roots: [String]
    let ignored: (String) -> Bool

    private var volatileContent: [Int: [UInt8]] = [:]
    private var durableContent: [Int: [UInt8]] = [:]
    private var volatileNames: [String: Int] = [:]
    private var durableNames: [String: Int] = [:]
    private var descriptors: [Int: Int] = [:]  // fd -> file
    private var directories: Set<String> = []
    private var nextFile = 0
    /// Per path, the contents it held after a completed step.
    private(set) var versions: [String: Set<[UInt8]>] = [:]
    /// Paths that had a durable version: absent is then a loss.
    private var everDurable: Set<String> = []
    /// What went wrong, the first time for each path.
    private(set) var failures: [String] = []
    private var failed: Set<String> = []
    private(set) var calls = 0

    init(roots: [String], ignored: @escaping (String) -> Bool) {
        self.roots = roots
        self.ignored = ignored
    }

    func watched(_ path: String) -> Bool {
        roots.contains { path.hasPrefix($0 + "/") } && !ignored(path)
    }

    /// A watched path whose name marks it temporary (`.tmp…`, `*.tmp`): not checked itself,
    /// only the name it is renamed to.
    static func isTemporary(_ path: String) -> Bool {
        let name = path.split(separator: "/").last.map(String.init) ?? path
        return name.hasPrefix(".") || name.contains("tmp")
    }

    // MARK: replaying calls

    mutating func replay(_ call: TracedCall) {
        switch call.name {
        case "openat":
            guard let fd = call.result, let path = call.resultPath else { return }
            descriptors[fd] = nil
            var isDirectory: ObjCBool = false
            if (roots.contains(path) || watched(path))
                && FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory)
                && isDirectory.boolValue
            {
                directories.insert(path)
                descriptors[fd] = -1
                return
            }
            guard watched(path) else { return }
            var file = volatileNames[path]
            if file == nil {
                // A file this trace did not create, opened to read: not the model's.
                guard call.arguments.contains("O_CREAT") else { return }
                file = nextFile
                nextFile += 1
                volatileContent[file!] = []
                volatileNames[path] = file
            } else if call.arguments.contains("O_TRUNC") {
                volatileContent[file!] = []
            }
            descriptors[fd] = file
        case "close":
            if let fd = call.fd { descriptors[fd] = nil }
        case "write", "pwrite64":
            guard let file = file(of: call), let data = call.data else { return }
            let offset = call.name == "pwrite64" ? (call.lastInteger ?? 0) : nil
            var content = volatileContent[file] ?? []
            let at = offset ?? content.count
            if content.count < at + data.count {
                content += [UInt8](repeating: 0, count: at + data.count - content.count)
            }
            content.replaceSubrange(at..<(at + data.count), with: data)
            volatileContent[file] = content
        case "ftruncate":
            guard let file = file(of: call), let size = call.lastInteger else { return }
            var content = volatileContent[file] ?? []
            if content.count > size {
                content.removeSubrange(size...)
            } else {
                content += [UInt8](repeating: 0, count: size - content.count)
            }
            volatileContent[file] = content
        case "fsync", "fdatasync":
            if let path = call.fdPath, directories.contains(path) {
                for (name, _) in durableNames where parent(name) == path {
                    durableNames[name] = nil
                }
                for (name, file) in volatileNames where parent(name) == path {
                    durableNames[name] = file
                }
            } else if let file = file(of: call) {
                durableContent[file] = volatileContent[file]
                completedStep(volatileNames.filter { $0.value == file }.map(\.key))
            }
        case "rename", "renameat", "renameat2":
            guard let (from, to) = call.renamePaths, watched(from) || watched(to) else { return }
            volatileNames[to] = volatileNames.removeValue(forKey: from)
            completedStep([to])
        case "link", "linkat":
            guard let (from, to) = call.renamePaths, watched(to) else { return }
            volatileNames[to] = volatileNames[from]
            completedStep([to])
        case "unlink", "unlinkat":
            if let path = call.unlinkPath { volatileNames[path] = nil }
        default:
            return
        }
        calls += 1
        checkCrashStates(after: call)
    }

    /// The end of the trace: every watched path is a version, and durable as it is.
    mutating func finish() {
        completedStep(Array(volatileNames.keys))
        for (path, file) in volatileNames where !Self.isTemporary(path) {
            if durableNames[path] != file || durableContent[file] != volatileContent[file] {
                fail(path, "\(path) is not durable at the end (no fsync of it or its directory)")
            }
        }
    }

    private mutating func fail(_ path: String, _ what: String) {
        if failed.insert(path).inserted { failures.append(what) }
    }

    private func file(of call: TracedCall) -> Int? {
        if let fd = call.fd, let file = descriptors[fd] { return file >= 0 ? file : nil }
        return call.fdPath.flatMap { watched($0) ? volatileNames[$0] : nil }
    }

    private func parent(_ path: String) -> String {
        String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)])
    }

    /// `paths` now hold a complete version: a sync of their file, or a rename onto them.
    private mutating func completedStep(_ paths: [String]) {
        for path in paths where !Self.isTemporary(path) {
            if let file = volatileNames[path] {
                versions[path, default: []].insert(volatileContent[file] ?? [])
            }
        }
    }

    private mutating func checkCrashStates(after call: TracedCall) {
        let states: [(String, [String: Int], [Int: [UInt8]])] = [
            ("nothing since the last syncs", durableNames, durableContent),
            ("names on disk, data not", volatileNames, durableContent),
            ("data on disk, names not", durableNames, volatileContent),
        ]
        let paths = Set(volatileNames.keys).union(durableNames.keys).filter {
            !Self.isTemporary($0)
        }
        for path in paths {
            for (state, names, contents) in states {
                guard let file = names[path] else {
                    if everDurable.contains(path) {
                        fail(path, "\(path) is gone after \(call.summary) (\(state))")
                    }
                    continue
                }
                let content = contents[file] ?? []
                if !(versions[path]?.contains(content) ?? false) {
                    fail(
                        path,
                        "\(path) holds \(content.count) bytes that were never a complete version, after \(call.summary) (\(state))"
                    )
                }
            }
            if let file = durableNames[path], durableContent[file] != nil {
                everDurable.insert(path)
            }
        }
    }
}

/// One call of an `strace -f -qq -y -xx` trace, its unfinished and resumed halves joined.
struct TracedCall {
    var name: String
    /// The arguments as printed, strings and `-y` paths decoded.
    var arguments: String
    var result: Int?
    var resultPath: String?
    /// The first argument's descriptor and its `-y` path.
    var fd: Int?
    var fdPath: String?
    /// The bytes of the first string argument (what write and pwrite64 write).
    var data: [UInt8]?
    /// The last integer argument (pwrite64's offset, ftruncate's length).
    var lastInteger: Int?
    /// The strings and `-y` paths of the arguments, in order.
    var strings: [String]
    var paths: [String]

    var summary: String { "\(name)(\(strings.first ?? paths.first ?? ""))" }

    /// rename(from, to) and link(from, to) with absolute paths; renameat, renameat2 and
    /// linkat(dirfd<dir>, "name", dirfd<dir>, "name", …).
    var renamePaths: (String, String)? {
        if name == "rename" || name == "link", strings.count >= 2 {
            return (strings[0], strings[1])
        }
        guard paths.count >= 2, strings.count >= 2 else { return nil }
        func join(_ dir: String, _ name: String) -> String {
            name.hasPrefix("/") ? name : dir + "/" + name
        }
        return (join(paths[0], strings[0]), join(paths[1], strings[1]))
    }

    var unlinkPath: String? {
        guard let s = strings.first else { return nil }
        if name == "unlink" || s.hasPrefix("/") { return s }
        return paths.first.map { $0 + "/" + s }
    }

    /// Parses a trace into its successful calls, in the order they ended.
    static func parse(_ text: String) -> [TracedCall] {
        var unfinished: [Substring: String] = [:]
        var calls: [TracedCall] = []
        for line in text.split(separator: "\n") {
            guard let space = line.firstIndex(of: " ") else { continue }
            let tid = line[..<space]
            var body = line[space...].drop(while: { $0 == " " })
            if body.hasSuffix("<unfinished ...>") {
                unfinished[tid] = String(body.dropLast("<unfinished ...>".count))
                continue
            }
            if body.hasPrefix("<... ") {
                guard let start = unfinished.removeValue(forKey: tid),
                    let end = body.range(of: "resumed>")
                else { continue }
                body = Substring(start + body[end.upperBound...])
            }
            // strace pads a resumed call's result (`)      = 0`); strings and paths are all
            // \x escapes under -xx, so no ")" of theirs is touched.
            let joined = String(body).replacingOccurrences(
                of: #"\)\s+= "#, with: ") = ", options: .regularExpression)
            if let call = TracedCall(joined) { calls.append(call) }
        }
        return calls
    }

    init?(_ line: String) {
        guard let open = line.firstIndex(of: "("),
            let equals = line.range(of: ") = ", options: .backwards)
        else { return nil }
        name = String(line[..<open])
        let args = String(line[line.index(after: open)..<equals.lowerBound])
        let ret = line[equals.upperBound...]
        guard let r = Int(ret.prefix(while: { $0 == "-" || $0.isNumber })), r >= 0 else {
            return nil
        }
        result = r
        resultPath = TracedCall.decodedPaths(String(ret)).first
        strings = TracedCall.decodedStrings(args)
        paths = TracedCall.decodedPaths(args)
        arguments = args
        fd = Int(args.prefix(while: { $0.isNumber }))
        fdPath = fd != nil ? paths.first : nil
        data = TracedCall.firstStringBytes(args)
        lastInteger = args.split(separator: ",").last.flatMap {
            Int($0.trimmingCharacters(in: .whitespaces))
        }
    }

    /// `\xHH` escapes (and the few others strace prints) decoded to bytes.
    static func unescape<S: StringProtocol>(_ s: S) -> [UInt8] {
        var out: [UInt8] = []
        let u = Array(s.utf8)
        var i = 0
        while i < u.count {
            if u[i] == UInt8(ascii: "\\"), i + 3 < u.count, u[i + 1] == UInt8(ascii: "x"),
                let b = UInt8(String(decoding: u[(i + 2)...(i + 3)], as: UTF8.self), radix: 16)
            {
                out.append(b)
                i += 4
            } else {
                out.append(u[i])
                i += 1
            }
        }
        return out
    }

    /// The quoted string arguments, decoded.
    static func decodedStrings(_ args: String) -> [String] {
        args.components(separatedBy: "\"").enumerated().compactMap { i, part in
            i % 2 == 1 ? String(decoding: unescape(part), as: UTF8.self) : nil
        }
    }

    static func firstStringBytes(_ args: String) -> [UInt8]? {
        let parts = args.components(separatedBy: "\"")
        return parts.count >= 3 ? unescape(parts[1]) : nil
    }

    /// The `-y` annotations (`<\x2f…>`) outside quoted strings, decoded.
    static func decodedPaths(_ text: String) -> [String] {
        var out: [String] = []
        for (i, part) in text.components(separatedBy: "\"").enumerated() where i % 2 == 0 {
            var rest = Substring(part)
            while let open = rest.firstIndex(of: "<"), let close = rest[open...].firstIndex(of: ">")
            {
                let inside = rest[rest.index(after: open)..<close]
                if inside.hasPrefix("\\x") {
                    out.append(String(decoding: unescape(inside), as: UTF8.self))
                }
                rest = rest[rest.index(after: close)...]
            }
        }
        return out
    }
}
