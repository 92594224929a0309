import Foundation
import Testing

/// The `DeviceKeyTPM` setting without a TPM: a value that is none is refused at start, a TPM
/// named but absent stops a new vault with the reason, and `none` keeps the key in a file.
/// (With a TPM: `TPMDeviceKeyTests`, in the system part.)
@Suite struct DeviceKeySettingTests {
    @Test func aBadValueIsRefusedAtStart() throws {
        let d = try Daemon(start: false)
        defer { d.close() }
        #expect(throws: (any Error).self) { try d.startWithDeviceKeyTPM("device: /dev/tpm0") }
        #expect(d.log.contains("DeviceKeyTPM must be auto, none or a TCTI string"), "\(d.log)")
    }

    @Test func anAbsentTPMNamedExplicitlyStopsANewVaultSayingWhy() throws {
        let d = try Daemon(start: false)
        defer { d.close() }
        // Port 1 of the loopback: nothing listens there.
        #expect(throws: (any Error).self) {
            try d.startWithDeviceKeyTPM("swtpm:host=127.0.0.1,port=1")
        }
        #expect(d.log.contains("cannot seal a new device key with the TPM"), "\(d.log)")
        let files = (try? FileManager.default.contentsOfDirectory(atPath: d.dataDirectory)) ?? []
        #expect(!files.contains("device.key") && !files.contains("device.key.tpm"), "\(files)")
    }

    @Test func noneKeepsTheKeyInAFile() throws {
        let d = try Daemon(start: false)
        defer { d.close() }
        try d.startWithDeviceKeyTPM("none")
        try #require(d.initialize().status == 0)
        #expect(d.ctl(["status"]).stdoutText.contains("device key: a file in the data directory"))
        let json = try #require(d.statusJSON())
        #expect(json["deviceKey"] as? String == "file", "\(json)")
        #expect(FileManager.default.fileExists(atPath: d.dataDirectory + "/device.key"))
    }
}
