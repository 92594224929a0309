extension VarlinkInterfaces {
    static let apps = """
        # Registered apps and their install state (docs/apps.md). Owner only.
        interface io.vaultd.Apps

        # A registered app.
        type App (
          # Reverse-DNS app ID.
          appID: string,
          # The executable that identifies the app (/proc/PID/exe), or null for a Flatpak app.
          executable: ?string,
          # Identified by /.flatpak-info in its sandbox.
          flatpak: bool,
          # Registered keychain access groups.
          accessGroups: []string,
          # App groups (group.*): shared keychain groups and preference suites.
          appGroups: []string,
          # All keychain access groups, in order; the first is the default for Add.
          keychainAccessGroups: []string,
          # Credentials of earlier installs survive a reinstall.
          keepCredentialsOnReinstall: bool,
          installed: bool,
          # The current install generation (UUID).
          generation: string,
          # When the current generation was installed, ISO 8601.
          installedAt: string,
          # The generation whose first launch happened last.
          launchedGeneration: ?string,
          # Installed, but its executable has been absent since then (ISO 8601), or null.
          missingSince: ?string,
          # When it counts as uninstalled if its executable stays absent (ISO 8601), or null.
          uninstallAt: ?string
        )

        # Registers an app, or reinstalls it: a new generation either way.
        method Install(
          appID: string,
          executable: ?string,
          accessGroups: ?[]string,
          appGroups: ?[]string,
          keepCredentialsOnReinstall: ?bool
        ) -> (app: App)

        # Uninstalls: deletes the app's preferences domain and cache directory, keeps its credentials.
        method Uninstall(appID: string) -> (app: App)

        # Every registered app.
        method List() -> (apps: []App)

        # One app.
        method Show(appID: string) -> (app: App)

        # No app with this ID is registered.
        error AppNotFound (message: string)
        # Not a reverse-DNS app ID.
        error InvalidAppID (message: string)

        """
}
