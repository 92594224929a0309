// Coverage-guided fuzz target (libFuzzer) for what vaultd does with a peer's bytes before any
// engine code runs: framing (FrameReader), JSON parsing, call decoding (VarlinkCall), the
// check of a call against its method's declaration (VarlinkValidation), and the parameter
// decoders that take raw JSON (PlistValue's tagged form, ItemAttributes); and the IDL parser
// (VarlinkIDL), given the input as an interface description. Built by Fuzz/run.sh together
// with Sources/VaultProtocol (one module: it checks internals), outside Package.swift.
//
// Invariants checked (a violation traps, which libFuzzer reports as a crash):
// - nothing crashes, hangs or leaks (AddressSanitizer, libFuzzer's -timeout/-rss_limit_mb);
// - a frame never exceeds the limit, and framing the same bytes in one chunk or byte by
//   byte gives the same frames;
// - a parsed JSON value serializes to text that parses back to the same value;
// - a decoded call re-encodes to JSON that decodes to the same call;
// - a decoded property-list value re-encodes to the same tagged JSON value.
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    // Small limit so the fuzzer reaches the too-large path.
    var whole = FrameReader(maximumFrameSize: 4096)
    var split = FrameReader(maximumFrameSize: 4096)
    whole.append(bytes)
    var framesWhole: [[UInt8]] = []
    var failedWhole = false
    do {
        while let f = try whole.nextFrame() {
            precondition(f.count <= 4096)
            framesWhole.append(f)
        }
    } catch { failedWhole = true }
    var framesSplit: [[UInt8]] = []
    var failedSplit = false
    outer: for b in bytes {
        split.append([b])
        do {
            while let f = try split.nextFrame() { framesSplit.append(f) }
        } catch {
            failedSplit = true
            break outer
        }
    }
    if !failedWhole && !failedSplit {
        precondition(framesWhole == framesSplit, "framing depends on how the bytes were chunked")
        precondition(whole.pendingByteCount == split.pendingByteCount)
    }

    // Every frame (and the input as one document) through the decoders.
    for frame in framesWhole + [bytes] {
        guard let json = try? JSON.parse(frame) else { continue }
        let text = json.serialized()
        guard let again = try? JSON.parse(text) else {
            preconditionFailure(
                "serialized JSON does not parse: \(String(decoding: text, as: UTF8.self))")
        }
        precondition(again == json, "JSON round trip changed the value")

        if let call = try? VarlinkCall(json: json) {
            _ = VarlinkInterfaces.undeclaredParameter(in: call)
            // The check every call passes before dispatch, against its method's declaration.
            _ = VarlinkValidation.callRefusal(call)
            let decoded = try? VarlinkCall(json: call.json)
            precondition(decoded == call, "VarlinkCall round trip changed the call")
            for (_, v) in call.parameters { exercise(v) }
        }
        exercise(json)
        if case .object(let o) = json { for (_, v) in o { exercise(v) } }
    }
    // The input as an interface description: the IDL parser refuses it or parses it, never traps.
    if let text = String(validating: bytes, as: UTF8.self), let i = try? VarlinkIDL.parse(text) {
        precondition(i.text == text)
    }
    return 0
}

/// The parameter decoders that take raw JSON.
func exercise(_ v: JSON) {
    if let p = try? PlistValue(tagged: v) {
        let t = p.tagged
        guard let back = try? PlistValue(tagged: t) else {
            preconditionFailure("re-encoded plist value does not decode: \(t.text)")
        }
        precondition(back == p, "plist round trip changed the value")
    }
    _ = try? ItemAttributes(json: v)
    _ = try? VarlinkReply(json: v)
}
