import Foundation

/// What `SyncService` reports of enrolling a device: init, join, approve and remove name the
/// device concerned, and each adds what the owner needs next.
public struct SyncEnrolment: Sendable, Equatable {
    /// The device made, approved or removed (32 hex digits).
    public var deviceID: String
    /// Init: the group's fingerprint, to compare on the other devices.
    public var fingerprint: String?
    /// Join: the pairing code to give `sync approve` on a device of the group.
    public var code: String?
    /// Remove: the group key's generation after the rotation.
    public var keyGeneration: Int?

    public init(
        deviceID: String, fingerprint: String? = nil, code: String? = nil, keyGeneration: Int? = nil
    ) {
        self.deviceID = deviceID
        self.fingerprint = fingerprint
        self.code = code
        self.keyGeneration = keyGeneration
    }
}

/// The sync state of this device (`SyncService.status`).
public struct SyncStatus: Sendable, Equatable {
    /// One device of the folder.
    public struct Device: Sendable, Equatable {
        public var deviceID: String
        public var thisDevice: Bool
        /// Its segments past its compaction floor.
        public var segments: Int
        /// Of those, not yet read here (and not refused).
        public var pending: Int
        /// Segments refused (bad signature, unknown key, rewritten).
        public var rejected: Int
        /// "member", "left" (it recorded its own leaving), "removed" (another device removed
        /// it) or "unknown" (not in the replicated membership).
        public var membership: String
        /// When it last wrote a segment read here.
        public var lastSeen: Date?
    }

    /// "off", "joining", "member" or "removed".
    public var state: String
    public var folder: String?
    public var deviceID: String?
    public var fingerprint: String?
    public var keyGeneration: Int?
    public var devices: [Device] = []
    /// Device directories in the folder past the `SyncService.maximumDevices` read: ignored.
    public var ignoredDevices = 0
    /// Live items of the merged state.
    public var items: Int?
    /// The last pass's problem, if it failed.
    public var problem: String?
    public var lastPass: Date?
    /// Synchronizable items this device holds back because they are damaged here (docs/sync.md).
    public var damaged: [DamagedItem] = []
    /// Members whose segments in the folder stop short of what a member acknowledged
    /// (withheld or rolled back: docs/sync.md).
    public var rolledBack: [SyncRollback] = []

    public init(state: String) { self.state = state }
}
