import VaultProtocol

/// What the kernel says of a bus peer that calls the Flatpak secret portal's backend
/// interface (`org.freedesktop.impl.portal.Secret`), gathered by the front-end and judged by
/// `Policy.decidePortalRequest`. Nothing in it comes from what the peer sends.
public struct PortalPeer: Sendable, Equatable {
    /// The program the peer runs, as `/proc/PID/exe` names it.
    public var executable: String
    /// The peer runs in vaultd's own mount namespace and root directory (a host process,
    /// no sandbox): the path means the file vaultd sees there.
    public var onHost: Bool
    /// `executable`, looked up now in vaultd's namespace, is the very file the peer runs
    /// (device and inode of `/proc/PID/exe` and of the path).
    public var runsThatFile: Bool
    /// The owner (uid) and mode bits of that file.
    public var fileOwner: UInt32
    public var fileMode: UInt32
    /// Every directory from `/` down to the file is owned by root and writable by no one
    /// else, so no user can put another program at that path.
    public var pathOnlyRootWritable: Bool
    /// Why the process may run code it did not come with (`LD_PRELOAD` or `LD_AUDIT` in its
    /// environment, a tracer attached), nil when nothing of the kind shows.
    public var injected: String?

    public init(
        executable: String, onHost: Bool, runsThatFile: Bool, fileOwner: UInt32, fileMode: UInt32,
        pathOnlyRootWritable: Bool, injected: String?
    ) {
        self.executable = executable
        self.onHost = onHost
        self.runsThatFile = runsThatFile
        self.fileOwner = fileOwner
        self.fileMode = fileMode
        self.pathOnlyRootWritable = pathOnlyRootWritable
        self.injected = injected
    }
}

extension Policy {
    /// Where distributions install xdg-desktop-portal (Debian, Fedora, openSUSE: libexec;
    /// Arch: lib). The backend interface is called by that program and no other: it names the
    /// app it asks for, which it learned from the kernel (`/proc/PID/root/.flatpak-info`).
    public static let desktopPortalExecutables = [
        "/usr/libexec/xdg-desktop-portal", "/usr/lib/xdg-desktop-portal",
    ]

    /// The most bytes a portal secret is: a 64-byte random master secret per app, as
    /// gnome-keyring makes it (libsecret's file backend derives its keyring key from it).
    public static let portalSecretSize = 64

    /// Decides a call of the secret portal's backend (`RetrieveSecret`), docs/threat-model.md:
    /// - the caller `portal` must be the system's xdg-desktop-portal: a host process of the
    ///   user running one of `desktopPortalExecutables`, that file owned by root and not
    ///   writable by group or others, in directories only root may write, with nothing
    ///   injected; anything else (another program, a copy of the binary, a sandbox) is
    ///   PermissionDenied, as is any fact that could not be found (the front-end then gives
    ///   none);
    /// - the app it names, `appID`, must be the app vaultd itself identified as the one that
    ///   asked the portal (`requester`, from the kernel's record of the request's sender): a
    ///   Flatpak app of that ID. xdg-desktop-portal 1.16 takes any sandbox's
    ///   `/.flatpak-info` at its word; vaultd also checks it against Flatpak's record of the
    ///   instance, so a sandbox that wrote its own cannot ask for another app's secret.
    ///   Otherwise PermissionDenied.
    static func decidePortalRequest(appID: String, requester: Caller, portal: PortalPeer)
        throws
    {
        try requireDesktopPortal(portal)
        guard let id = requester.appID, id.sameBytes(appID) else {
            throw VaultFailure(
                .permissionDenied,
                "the portal asks for app \(logField(appID)), but the request came from \(requester.appID.map { "app " + logField($0) } ?? "a program of the owner's, not a sandboxed app")"
            )
        }
    }

    /// The caller checks of `decidePortalRequest`: whether `peer` is the system's
    /// xdg-desktop-portal. Throws PermissionDenied naming the first check that fails.
    public static func requireDesktopPortal(_ peer: PortalPeer) throws {
        func refuse(_ why: String) -> VaultFailure {
            VaultFailure(
                .permissionDenied,
                "only the system's xdg-desktop-portal may call the secret portal's backend: the caller (\(logField(peer.executable))) \(why)"
            )
        }
        guard desktopPortalExecutables.contains(where: { $0.sameBytes(peer.executable) }) else {
            throw refuse(
                "is another program (allowed: \(desktopPortalExecutables.joined(separator: ", ")))")
        }
        guard peer.onHost else { throw refuse("runs in a sandbox or another mount namespace") }
        guard peer.runsThatFile else { throw refuse("runs another file than the one at that path") }
        guard peer.fileOwner == 0, peer.fileMode & 0o022 == 0 else {
            throw refuse("runs a file not owned by root, or writable by group or others")
        }
        guard peer.pathOnlyRootWritable else {
            throw refuse("runs a file in a directory that someone but root may write")
        }
        if let why = peer.injected { throw refuse("may run code it did not come with (\(why))") }
    }
}
