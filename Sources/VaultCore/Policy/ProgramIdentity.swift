import VaultProtocol

/// The program a peer runs, as vaultd established it from the kernel (issue 40 §2,
/// docs/access.md): what an item's creator and a remembered access decision are recorded as.
/// Never a pid: a decision is about a program, whatever process runs it.
///
/// - A registered app: the app (its ID). A Flatpak app: its Flatpak ID, checked against the
///   host's instance record (`PeerIdentity.sandbox`).
/// - A host program: its executable, read through `/proc/PID/exe` while the peer's pidfd
///   is alive: its path and its file (device, inode, owner, whether the user may write it).
/// - An interpreter (python*, node, perl, ruby, sh, bash...): the interpreter's executable
///   plus the script it runs, from `/proc/PID/cmdline`. The script path is what the process
///   says it runs: the weak part (docs/threat-model.md).
public struct ProgramIdentity: Sendable, Equatable {
    public enum Kind: String, Sendable, CaseIterable {
        /// A registered app (`path` is its app ID).
        case app
        /// A Flatpak app vaultd registered on first contact (`path` is its Flatpak ID).
        case flatpak
        /// A host executable (`path`).
        case executable
        /// An interpreter (`path`) running `script`.
        case interpreter
    }

    public var kind: Kind { didSet { refreshMatchKey() } }
    /// The app ID (app, flatpak) or the executable's absolute path.
    public var path: String { didSet { refreshMatchKey() } }
    /// The script an interpreter runs, as its command line names it (made absolute against
    /// the process's working directory when it was relative).
    public var script: String? { didSet { refreshMatchKey() } }
    /// The executable's file (executable, interpreter): device and inode.
    public var device: UInt64 = 0 { didSet { refreshMatchKey() } }
    public var inode: UInt64 = 0 { didSet { refreshMatchKey() } }
    /// The executable file's owner (uid).
    public var ownerUID: UInt32 = 0
    /// Whether the user vaultd runs as may replace the executable: it owns the file, or may
    /// write the file or its directory. Such a program loses its grants when its file changes
    /// (`matchKey`); a program only root can replace keeps them across an upgrade.
    public var userWritable = false { didSet { refreshMatchKey() } }
    /// What two identities must share to be one program (a creator and a reader; a grant
    /// and a reader). A program the user may replace is its path and its file (a new file
    /// at the path, a rebuild or a replacement by anything of the user's, is a new program);
    /// one only root may replace is its path (a package upgrade keeps its grants). An
    /// interpreter adds its script's path. Compared byte for byte. Made when the identity
    /// is and whenever a field it is made of changes, since every secret released compares
    /// two of them.
    public private(set) var matchKey = ""

    public init(
        kind: Kind, path: String, script: String? = nil, device: UInt64 = 0, inode: UInt64 = 0,
        ownerUID: UInt32 = 0, userWritable: Bool = false
    ) {
        self.kind = kind
        self.path = path
        self.script = script
        self.device = device
        self.inode = inode
        self.ownerUID = ownerUID
        self.userWritable = userWritable
        refreshMatchKey()
    }

    /// A registered app's identity.
    public static func app(_ appID: String) -> ProgramIdentity {
        ProgramIdentity(kind: .app, path: appID)
    }

    /// Makes `matchKey` from the fields it is made of.
    private mutating func refreshMatchKey() {
        var key = "\(kind.rawValue)\u{0}\(path)"
        if kind == .executable || kind == .interpreter, userWritable {
            key += "\u{0}\(device):\(inode)"
        }
        if let script { key += "\u{0}\(script)" }
        matchKey = key
    }

    /// How a dialog and `vaultctl access list` name it: the path (an interpreter's, then its
    /// script's, abbreviated to its last two components), an app by its ID.
    public var displayName: String {
        switch kind {
        case .app: return "the app \(path)"
        case .flatpak: return "the Flatpak app \(path)"
        case .executable: return path
        case .interpreter:
            guard let script else { return path }
            // Code on the command line (`-c CODE`): its start.
            if script.hasPrefix("-") {
                return "\(path) \(script.count > 60 ? script.prefix(60) + "…" : script)"
            }
            let parts = script.split(separator: "/", omittingEmptySubsequences: true)
            let short = parts.count > 2 ? "…/" + parts.suffix(2).joined(separator: "/") : script
            return "\(path) \(short)"
        }
    }

    // MARK: stored form

    /// The identity as the store keeps it (sealed: `AccessStore`), and as the wire lists it.
    var json: JSON {
        var o: JSONObject = ["kind": JSON(kind.rawValue), "path": JSON(path)]
        if let script { o["script"] = JSON(script) }
        if kind == .executable || kind == .interpreter {
            o["device"] = JSON(device)
            o["inode"] = JSON(inode)
            o["ownerUID"] = JSON(Int64(ownerUID))
            o["userWritable"] = JSON(userWritable)
        }
        return .object(o)
    }

    /// The identity `json` holds, nil when it is not one.
    init?(json j: JSON) {
        guard let k = j["kind"]?.stringValue.flatMap(Kind.init(rawValue:)),
            let path = j["path"]?.stringValue
        else { return nil }
        self.init(
            kind: k, path: path, script: j["script"]?.stringValue,
            device: j["device"]?.uint64Value ?? 0, inode: j["inode"]?.uint64Value ?? 0,
            ownerUID: UInt32(clamping: j["ownerUID"]?.int64Value ?? 0),
            userWritable: j["userWritable"]?.boolValue ?? false)
    }
}
