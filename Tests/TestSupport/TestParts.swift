import Testing

extension Tag {
    /// The system part of the suite: tests that need root, a mount namespace, a private
    /// session bus with a keyring, a sandbox (bwrap) or another real daemon (Syncthing, PAM).
    /// `scripts/test` runs the untagged tests (the fast part) and then these, and times each;
    /// `scripts/test-parts` lists them. Tag the suite when all its tests need the system, the
    /// test otherwise.
    @Tag public static var system: Self
}
