// libFuzzer target for what vaultd reads of a sandbox's `/.flatpak-info`, which the sandbox
// can write itself: `FlatpakInfo.value` (a GKeyFile group's key) and
// `FlatpakInfo.isInstanceID`, compiled with Sources/vaultd/FlatpakInfo.swift by Fuzz/run.sh.
// Seeds: instance records as Flatpak writes them (Fuzz/corpus/flatpak-info/).
//
// Invariants (a violation traps): nothing crashes, hangs or leaks; a value found is
// non-empty and has no line break; an instance ID accepted is 1 to 64
// bytes of [A-Za-z0-9_-] (so never "..", never a '/', as it names a directory).
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    for (group, key) in [("Application", "name"), ("Instance", "instance-id")] {
        guard let v = FlatpakInfo.value(bytes, group: group, key: key) else { continue }
        precondition(!v.isEmpty && !v.contains(where: \.isNewline), "a value with a line break")
        if FlatpakInfo.isInstanceID(v) {
            precondition(
                v.utf8.count <= 64 && !v.contains("/") && v != "." && v != "..",
                "an instance ID that could leave its directory")
        }
    }
    return 0
}
