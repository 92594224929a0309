import Testing
import VaultProtocol

@Suite("FrameReader")
struct FrameReaderTests {
    @Test func severalFramesInOneChunk() throws {
        var reader = FrameReader()
        reader.append(bytes("{\"a\":1}\0[2]\0\0tail"))
        #expect(try reader.nextFrame() == bytes("{\"a\":1}"))
        #expect(try reader.nextFrame() == bytes("[2]"))
        #expect(try reader.nextFrame() == [])  // an empty frame is still a frame
        #expect(try reader.nextFrame() == nil)
        #expect(reader.pendingByteCount == 4)
        reader.append([0])
        #expect(try reader.nextFrame() == bytes("tail"))
        #expect(try reader.nextFrame() == nil)
        #expect(reader.pendingByteCount == 0)
    }

    @Test func oneFrameSplitOverManyChunks() throws {
        let message = bytes("{\"method\":\"io.vaultd.Vault.Status\",\"parameters\":{}}")
        var reader = FrameReader()
        for b in message {
            reader.append([b])
            #expect(try reader.nextFrame() == nil)
        }
        #expect(reader.pendingByteCount == message.count)
        // The NUL arrives together with the start of the next frame.
        reader.append([0] + bytes("{\"x\""))
        #expect(try reader.nextFrame() == message)
        #expect(try reader.nextFrame() == nil)
        reader.append(bytes(":1}"))
        reader.append([0])
        #expect(try JSON.parse(try #require(try reader.nextFrame())) == ["x": 1])
    }

    @Test func noNULYetReturnsNil() throws {
        var reader = FrameReader()
        #expect(try reader.nextFrame() == nil)
        reader.append(bytes("{\"partial\":"))
        #expect(try reader.nextFrame() == nil)
        #expect(try reader.nextFrame() == nil)  // asking again changes nothing
        #expect(reader.pendingByteCount == 11)
    }

    @Test func frameAtTheLimitIsAccepted() throws {
        var reader = FrameReader(maximumFrameSize: 8)
        reader.append([UInt8](repeating: 0x41, count: 8))
        #expect(try reader.nextFrame() == nil)
        reader.append([0])
        #expect(try reader.nextFrame() == [UInt8](repeating: 0x41, count: 8))
    }

    @Test func frameTooLargeWithoutNULThrows() throws {
        var reader = FrameReader(maximumFrameSize: 8)
        reader.append([UInt8](repeating: 0x41, count: 5))
        #expect(try reader.nextFrame() == nil)
        reader.append([UInt8](repeating: 0x41, count: 4))
        #expect(throws: FrameReader.Failure.frameTooLarge(9)) { try reader.nextFrame() }
    }

    @Test func frameTooLargeWithItsNULInTheSameChunkThrows() throws {
        var reader = FrameReader(maximumFrameSize: 8)
        reader.append([UInt8](repeating: 0x41, count: 9) + [0])
        #expect(throws: FrameReader.Failure.frameTooLarge(9)) { try reader.nextFrame() }
    }

    @Test func defaultLimitLeavesRoomForTheNUL() {
        #expect(Varlink.maximumMessageSize == 8 * 1024 * 1024)
        #expect(FrameReader().maximumFrameSize == 8 * 1024 * 1024 - 1)
    }
}

@Suite("VarlinkCall and VarlinkReply")
struct VarlinkMessageTests {
    @Test func missingMethodIsInvalidParameter() throws {
        let e = expectVaultError(.invalidParameter) {
            _ = try VarlinkCall(json: try JSON.parse(#"{"parameters":{}}"#))
        }
        #expect(e?.parameters["parameter"] == "method")
        #expect(e?.name == "org.varlink.service.InvalidParameter")
        #expect(e?.status == nil)
    }

    @Test(arguments: [
        #"{"method":5}"#, #"{"method":""}"#, #"{"method":null}"#, #"{"method":["a.B"]}"#,
    ])
    func methodMustBeANonEmptyString(text: String) throws {
        let e = expectVaultError(.invalidParameter) {
            _ = try VarlinkCall(json: try JSON.parse(text))
        }
        #expect(e?.parameters["parameter"] == "method")
    }

    @Test(arguments: [
        #"{"method":"a.b.C","parameters":[1]}"#, #"{"method":"a.b.C","parameters":"x"}"#,
        #"{"method":"a.b.C","parameters":5}"#, #"{"method":"a.b.C","parameters":true}"#,
    ])
    func parametersMustBeAnObject(text: String) throws {
        let e = expectVaultError(.invalidParameter) {
            _ = try VarlinkCall(json: try JSON.parse(text))
        }
        #expect(e?.parameters["parameter"] == "parameters")
    }

    @Test func callMustBeAnObject() {
        expectVaultError(.invalidParameter) { _ = try VarlinkCall(json: [1, 2]) }
        expectVaultError(.invalidParameter) { _ = try VarlinkCall(json: "io.vaultd.Vault.Status") }
    }

    @Test func flagsAreParsed() throws {
        let plain = try VarlinkCall(json: try JSON.parse(#"{"method":"io.vaultd.Vault.Status"}"#))
        #expect(
            plain
                == VarlinkCall(
                    method: "io.vaultd.Vault.Status", parameters: [:], oneway: false, more: false))
        #expect(plain.interface == "io.vaultd.Vault")

        let oneway = try VarlinkCall(
            json: try JSON.parse(
                #"{"method":"a.b.C","oneway":true,"more":false,"parameters":{"k":"v"}}"#))
        #expect(oneway.oneway == true)
        #expect(oneway.more == false)
        #expect(oneway.parameters == ["k": "v"])

        let more = try VarlinkCall(
            json: try JSON.parse(
                #"{"method":"io.vaultd.Vault.Observe","more":true,"parameters":null}"#))
        #expect(more.more == true)
        #expect(more.oneway == false)
        #expect(more.parameters.isEmpty)
        #expect(more.interface == "io.vaultd.Vault")
    }

    @Test func nonBooleanFlagsAreRefused() {
        let e = expectVaultError(.invalidParameter) {
            _ = try VarlinkCall(json: try JSON.parse(#"{"method":"a.b.C","oneway":"yes"}"#))
        }
        #expect(e?.parameters["parameter"] == "oneway")
        let m = expectVaultError(.invalidParameter) {
            _ = try VarlinkCall(json: try JSON.parse(#"{"method":"a.b.C","more":1}"#))
        }
        #expect(m?.parameters["parameter"] == "more")
        let u = expectVaultError(.invalidParameter) {
            _ = try VarlinkCall(json: try JSON.parse(#"{"method":"a.b.C","upgrade":"yes"}"#))
        }
        #expect(u?.parameters["parameter"] == "upgrade")
    }

    /// An upgrade request is a well-formed call (vaultd refuses it per call, not as a broken message).
    @Test func upgradeIsParsed() throws {
        let call = try VarlinkCall(json: try JSON.parse(#"{"method":"a.b.C","upgrade":true}"#))
        #expect(call.upgrade && !call.oneway && !call.more)
        #expect(call.json == ["method": "a.b.C", "upgrade": true])
        #expect(try VarlinkCall(json: try JSON.parse(#"{"method":"a.b.C"}"#)).upgrade == false)
    }

    @Test func callJSONRoundTrips() throws {
        let call = VarlinkCall(
            method: "io.vaultd.Keychain.Add", parameters: ["class": "genericPassword", "n": 5],
            oneway: true, more: true)
        #expect(try VarlinkCall(json: try JSON.parse(call.json.serialized())) == call)
        #expect(VarlinkCall(method: "a.b.C").json.text == #"{"method":"a.b.C"}"#)
    }

    @Test func errorReplyRoundTripsWithStatus() throws {
        let reply = VarlinkReply(error: VaultError(.itemNotFound, "no item matches the query"))
        let text = reply.json.text
        #expect(
            text
                == #"{"error":"io.vaultd.Keychain.ItemNotFound","parameters":{"message":"no item matches the query","status":-25300}}"#
        )
        let back = try VarlinkReply(json: try JSON.parse(text))
        let e = try #require(back.vaultError)
        #expect(e.code == .itemNotFound)
        #expect(e.status == -25300)
        #expect(e.message == "no item matches the query")
        #expect(back.continues == false)
    }

    /// The standard org.varlink.service errors carry only their declared parameters; vaultd's
    /// message rides in the reply's vendor extension and comes back into the error's parameters.
    @Test func serviceErrorCarriesOnlyItsDeclaredParameters() throws {
        let invalid = VarlinkReply(error: .invalidParameter("domain", "must be a string")).json.text
        #expect(
            invalid
                == #"{"error":"org.varlink.service.InvalidParameter","io.vaultd":{"message":"invalid parameter 'domain': must be a string"},"parameters":{"parameter":"domain"}}"#
        )
        let e = try #require(try VarlinkReply(json: try JSON.parse(invalid)).vaultError)
        #expect(e.code == .invalidParameter && e.parameters["parameter"] == "domain")
        #expect(e.message == "invalid parameter 'domain': must be a string")

        let more = VarlinkReply(error: VaultError(.expectedMore, "call it with more")).json.text
        #expect(
            more
                == #"{"error":"org.varlink.service.ExpectedMore","io.vaultd":{"message":"call it with more"},"parameters":{}}"#
        )
        #expect(
            try VarlinkReply(json: try JSON.parse(more)).vaultError?.message == "call it with more")
    }

    @Test func continuingReplyRoundTrips() throws {
        let reply = VarlinkReply(parameters: ["state": "locked"], continues: true)
        let back = try VarlinkReply(json: try JSON.parse(reply.json.serialized()))
        #expect(back == reply)
        #expect(back.vaultError == nil)
    }

    @Test func keychainStatusesMatchKeychainServices() {
        #expect(VaultError(.duplicateItem, "x").status == -25299)
        #expect(VaultError(.itemNotFound, "x").status == -25300)
        #expect(VaultError(.interactionNotAllowed, "x").status == -25308)
        #expect(VaultError(.missingEntitlement, "x").status == -34018)
        #expect(VaultError(.authFailed, "x").status == -25293)
        #expect(VaultError.param("x").status == -50)
        #expect(VaultError(.invalidValue, "x").status == nil)
    }
}
