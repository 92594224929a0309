internal import CSodium
import Foundation
import VaultProtocol

/// Where the device key is kept (config.plist `DeviceKeyTPM`, docs/configuration.md).
public enum DeviceKeyTPM: Equatable, Sendable {
    /// The system's TPM (`device:/dev/tpmrm0`) when `/dev/tpmrm0` exists, or when the key is
    /// already sealed by a TPM; otherwise a file in the data directory.
    case auto
    /// Always a file in the data directory (`device.key`).
    case none
    /// The TPM this TCTI configuration names (tpm2-tss's `Tss2_TctiLdr_Initialize`):
    /// `device:/dev/tpmrm0`, `swtpm:host=127.0.0.1,port=2321`, ...
    case tcti(String)

    /// The system's resource-managed TPM device, the one `auto` uses.
    public static let systemDevice = "/dev/tpmrm0"

    /// Parses the setting: `auto`, `none` or a TCTI string (`NAME` or `NAME:CONFIG`, printable
    /// ASCII, at most 256 bytes). Nil for anything else.
    public init?(setting: String) {
        switch setting {
        case "auto": self = .auto
        case "none": self = .none
        default:
            let bytes = Array(setting.utf8)
            guard !bytes.isEmpty, bytes.count <= 256, bytes.allSatisfy({ $0 > 0x20 && $0 < 0x7f }),
                bytes.first != UInt8(ascii: ":")
            else { return nil }
            self = .tcti(setting)
        }
    }
}

/// Where this start found the device key: `LockState`'s companion in `VaultStatus`.
public struct DeviceKeyStatus: Equatable, Sendable {
    public enum Kind: String, Sendable {
        /// Sealed by a TPM 2.0 (`device.key.tpm`).
        case tpm
        /// A file in the data directory (`device.key`).
        case file
    }
    public var kind: Kind
    /// Why the device key is not available (the TPM is missing or refused it), or nil when it
    /// is. Without it, ThisDeviceOnly items are NotAvailableOnThisDevice; nothing is rewritten.
    public var problem: String?
}

/// Loads, creates, seals and migrates the device key (docs/keychain.md "The device key").
///
/// Files in the data directory: `device.key` (the key itself, 32 bytes, 0600) when it is kept
/// in a file; `device.key.tpm` (`TPMSeal.Blob`, 0600) when a TPM seals it. Never both for
/// long: a key found in a file when a TPM is configured is sealed, the seal checked by an
/// unseal, and the file then overwritten and removed (`migrate`).
enum DeviceKey {
    struct Loaded {
        /// Nil when the key is sealed but the TPM cannot unseal it now.
        var key: SecureBytes?
        var status: DeviceKeyStatus
    }

    static let length = Sodium.keyLength

    /// Loads the key of the vault in `directory`. `initialized`: the store holds keys, so a
    /// missing device key is not made anew unless `newDeviceKey` (a data directory moved to a
    /// new device on purpose). Throws InternalError for a damaged, foreign or loose key file,
    /// a missing key of an initialised vault, or a TPM named explicitly that cannot seal a new
    /// key; a sealed key the TPM cannot unseal is not an error (`Loaded.key` nil, said in
    /// `status.problem` and the log).
    static func load(
        directory: String, setting: DeviceKeyTPM, initialized: Bool, newDeviceKey: Bool,
        logger: Logger
    ) throws -> Loaded {
        let filePath = directory + "/device.key"
        let blobPath = directory + "/device.key.tpm"
        let blobExists = exists(blobPath)
        let fileExists = exists(filePath)
        let tcti: String?
        switch setting {
        case .none: tcti = nil
        case .tcti(let t): tcti = t
        case .auto:
            tcti = blobExists || exists(DeviceKeyTPM.systemDevice) ? "device:/dev/tpmrm0" : nil
        }
        guard let tcti else {
            if blobExists && !fileExists {
                let problem =
                    "the device key is sealed by a TPM (\(blobPath)) but DeviceKeyTPM is none: ThisDeviceOnly items are not available. Set DeviceKeyTPM to auto or to the TPM's TCTI"
                logger.warning(problem)
                return Loaded(key: nil, status: DeviceKeyStatus(kind: .tpm, problem: problem))
            }
            return Loaded(
                key: try loadFile(
                    filePath, initialized: initialized, newDeviceKey: newDeviceKey, logger: logger),
                status: DeviceKeyStatus(kind: .file))
        }
        if blobExists {
            return try unsealStored(
                blobPath, filePath: fileExists ? filePath : nil, tcti: tcti, logger: logger)
        }
        if fileExists {
            let key = try FileSystem.loadOrCreateKey(at: filePath, length: length)
            return migrate(key, filePath: filePath, blobPath: blobPath, tcti: tcti, logger: logger)
        }
        guard !initialized || newDeviceKey else { throw missing(blobPath, directory) }
        let key = SecureBytes.random(count: length)
        do {
            let blob = try TPMSeal.seal(key, tcti: tcti)
            try FileSystem.writeAtomically(blob.bytes, to: blobPath)
        } catch let e as TPMSeal.Failure {
            guard setting == .auto else {
                throw VaultFailure(
                    .internalError,
                    "cannot seal a new device key with the TPM \(tcti): \(e.message). Fix the TPM, or set DeviceKeyTPM to none to keep the key in a file"
                )
            }
            logger.notice("\(e.message); the device key is kept in a file (DeviceKeyTPM auto)")
            return Loaded(
                key: try loadFile(
                    filePath, initialized: initialized, newDeviceKey: newDeviceKey, logger: logger),
                status: DeviceKeyStatus(kind: .file))
        }
        if initialized {
            logger.notice(
                "made a new device key sealed by the TPM (--new-device-key); ThisDeviceOnly items made with the old one are not available on this device"
            )
        }
        return Loaded(key: key, status: DeviceKeyStatus(kind: .tpm))
    }

    /// The key in `blobPath`, unsealed by the TPM. A TPM that is gone or refuses gives no key
    /// and a problem, and nothing is rewritten. A `device.key` left beside it (a migration cut
    /// short after the seal was stored) is removed once the sealed key proves the same.
    private static func unsealStored(
        _ blobPath: String, filePath: String?, tcti: String, logger: Logger
    ) throws
        -> Loaded
    {
        let bytes = try FileSystem.readPrivateFile(blobPath, limit: TPMSeal.Blob.maximumSize)
        let key: SecureBytes
        do {
            key = try TPMSeal.unseal(TPMSeal.Blob(bytes: bytes), tcti: tcti)
        } catch let e as TPMSeal.Failure {
            let problem =
                "\(e.message); ThisDeviceOnly items are not available until it unseals the device key (\(blobPath) is kept as it is)"
            logger.warning(problem)
            return Loaded(key: nil, status: DeviceKeyStatus(kind: .tpm, problem: problem))
        }
        guard key.count == length else {
            let problem =
                "\(blobPath) unseals to a key of \(key.count) bytes, not \(length): damaged"
            logger.warning(problem)
            return Loaded(key: nil, status: DeviceKeyStatus(kind: .tpm, problem: problem))
        }
        if let filePath {
            if let old = try? FileSystem.loadOrCreateKey(at: filePath, length: length),
                old.constantTimeEquals(key)
            {
                FileSystem.removeSecurely(filePath, logger: logger)
                logger.notice("removed \(filePath): the TPM seals the same key")
            } else {
                logger.warning(
                    "\(filePath) is a key other than the one the TPM seals: left as it is, unused")
            }
        }
        return Loaded(key: key, status: DeviceKeyStatus(kind: .tpm))
    }

    /// Seals `key`, kept in `filePath` until now, with the TPM: the seal is stored, checked by
    /// an unseal giving the same key, and only then is the file overwritten and removed. Any
    /// failure keeps the file (and the key in it) as it was, and says so.
    private static func migrate(
        _ key: SecureBytes, filePath: String, blobPath: String, tcti: String, logger: Logger
    )
        -> Loaded
    {
        do {
            let blob = try TPMSeal.seal(key, tcti: tcti)
            guard try TPMSeal.unseal(blob, tcti: tcti).constantTimeEquals(key) else {
                throw TPMSeal.Failure(message: "the TPM unsealed another key than it sealed")
            }
            try FileSystem.writeAtomically(blob.bytes, to: blobPath)
        } catch {
            try? SystemCall.unlink(blobPath)
            let problem =
                "a TPM is configured (\(tcti)) but the device key could not be sealed with it (\(error)); it stays in \(filePath)"
            logger.warning(problem)
            return Loaded(key: key, status: DeviceKeyStatus(kind: .file, problem: nil))
        }
        FileSystem.removeSecurely(filePath, logger: logger)
        logger.notice(
            "sealed the device key with the TPM (\(tcti)) in \(blobPath), and removed \(filePath)")
        return Loaded(key: key, status: DeviceKeyStatus(kind: .tpm))
    }

    /// `device.key` as vaultd has always kept it: read, or made for a vault not initialised
    /// yet (or with `newDeviceKey`).
    private static func loadFile(
        _ path: String, initialized: Bool, newDeviceKey: Bool, logger: Logger
    ) throws
        -> SecureBytes
    {
        if !exists(path) && initialized {
            guard newDeviceKey else {
                throw missing(path, (path as NSString).deletingLastPathComponent)
            }
            logger.notice(
                "\(path) was missing: made a new device key (--new-device-key); ThisDeviceOnly items made with the old one are not available on this device"
            )
        }
        return try FileSystem.loadOrCreateKey(at: path, length: length)
    }

    private static func missing(_ path: String, _ directory: String) -> VaultFailure {
        VaultFailure(
            .internalError,
            "\(path) is missing, but the vault in \(directory) is initialised: its ThisDeviceOnly items open only with that key. Put it back (from a backup of this device) and start vaultd again; only if this data directory was moved to a new device on purpose, start vaultd once with --new-device-key (the ThisDeviceOnly items made with the old key then stay unavailable)"
        )
    }

    private static func exists(_ path: String) -> Bool {
        (try? SystemCall.lstat(path)) != nil
    }
}
