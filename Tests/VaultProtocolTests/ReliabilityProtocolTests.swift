import Foundation
import Testing
import VaultProtocol

/// Reliability at the unit level: the frame reader under pipelining and the strict call checks
/// (unknown call members, undeclared parameters) that the malformed-input corpus relies on.
@Suite("Reliability: framing and call checks")
struct ReliabilityProtocolTests {
    @Test func manyPipelinedFramesComeOutInOrder() throws {
        var reader = FrameReader()
        let count = 20_000
        var stream: [UInt8] = []
        for i in 0..<count { stream += Array("{\"n\":\(i)}".utf8) + [0] }
        // Fed in odd-sized chunks, frames split across chunk boundaries.
        var out: [[UInt8]] = []
        var offset = 0
        while offset < stream.count {
            let n = min(4097, stream.count - offset)
            reader.append(stream[offset..<offset + n])
            offset += n
            while let f = try reader.nextFrame() { out.append(f) }
        }
        #expect(out.count == count)
        #expect(out.first == Array("{\"n\":0}".utf8))
        #expect(out.last == Array("{\"n\":\(count - 1)}".utf8))
        #expect(reader.pendingByteCount == 0)
    }

    @Test func aBigFrameThenSmallOnesStillFrame() throws {
        var reader = FrameReader()
        let big = [UInt8](repeating: UInt8(ascii: "x"), count: 3 << 20)
        reader.append(big + [0] + Array("tail".utf8))
        #expect(try reader.nextFrame() == big)
        #expect(try reader.nextFrame() == nil)
        #expect(reader.pendingByteCount == 4)
        reader.append([0, UInt8(ascii: "z"), 0])
        #expect(try reader.nextFrame() == Array("tail".utf8))
        #expect(try reader.nextFrame() == Array("z".utf8))
        #expect(reader.pendingByteCount == 0)
    }

    @Test func limitIsCountedFromTheStartOfTheUnfinishedFrame() throws {
        var reader = FrameReader(maximumFrameSize: 8)
        reader.append(Array("12345678".utf8) + [0] + Array("abcdefgh".utf8))
        #expect(try reader.nextFrame() == Array("12345678".utf8))
        #expect(try reader.nextFrame() == nil)  // 8 pending: at the limit, not over it
        reader.append(Array("i".utf8))
        #expect(throws: FrameReader.Failure.frameTooLarge(9)) { try reader.nextFrame() }
    }

    @Test func declaredParametersComeFromTheInterfaceDescriptions() {
        let t = VarlinkInterfaces.inputParameters
        #expect(t["io.vaultd.Keychain.Add"] == ["class", "attributes", "data"])
        #expect(
            t["io.vaultd.Keychain.CopyMatching"] == [
                "class", "query", "matchLimit", "returnData", "returnAttributes",
            ])
        #expect(t["io.vaultd.Preferences.Set"] == ["domain", "key", "value"])
        #expect(t["io.vaultd.Vault.Status"] == [])
        #expect(t["org.varlink.service.GetInterfaceDescription"] == ["interface"])
        // Every method of every interface is in the table.
        for (name, text) in VarlinkInterfaces.all {
            let methods = text.split(separator: "\n").filter {
                $0.trimmingCharacters(in: .whitespaces).hasPrefix("method ")
            }
            let inTable = t.keys.filter {
                $0.hasPrefix(name + ".") && !$0.dropFirst(name.count + 1).contains(".")
            }
            #expect(
                methods.count == inTable.count,
                "\(name): \(methods.count) methods, \(inTable.count) in the table")
        }
    }

    @Test func undeclaredParameterIsFound() {
        let ok = VarlinkCall(
            method: "io.vaultd.Preferences.Get", parameters: ["domain": "d", "key": "k"])
        #expect(VarlinkInterfaces.undeclaredParameter(in: ok) == nil)
        let bad = VarlinkCall(
            method: "io.vaultd.Preferences.Get",
            parameters: ["domain": "d", "key": "k", "zzz": 1, "extra": 2])
        #expect(VarlinkInterfaces.undeclaredParameter(in: bad) == "extra")
        // Unknown methods are MethodNotFound's business, not this check's.
        #expect(
            VarlinkInterfaces.undeclaredParameter(
                in: VarlinkCall(method: "io.vaultd.Vault.Nope", parameters: ["x": 1])) == nil)
    }

    @Test func unknownCallMembersAreRefusedButVendorExtensionsPass() throws {
        #expect(throws: VaultError.self) {
            try VarlinkCall(json: try JSON.parse(#"{"method":"a.b.C","bogus":1}"#))
        }
        #expect(throws: VaultError.self) {
            try VarlinkCall(json: try JSON.parse(#"{"method":"a.b.C","com.example.x":1}"#))
        }
        let c = try VarlinkCall(
            json: try JSON.parse(#"{"method":"a.b.C","com.example.trace":{"id":7}}"#))
        #expect(c.method == "a.b.C")
    }
}
