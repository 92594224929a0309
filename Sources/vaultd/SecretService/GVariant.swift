import CGio
import VaultProtocol

/// One reference to a GVariant, released at deinit. New values are sunk at once (GLib makes
/// them floating), so every `GV` owns exactly one reference and a container it is put in
/// takes a reference of its own.
final class GV {
    let raw: OpaquePointer

    /// A new (floating) value from a `g_variant_new_*` call.
    init(new: OpaquePointer) { raw = g_variant_ref_sink(new) }
    /// A value the caller already holds a full reference to (`g_variant_get_child_value`).
    init(owned: OpaquePointer) { raw = owned }
    /// A value GLib lends (a method call's parameters): a reference of our own is taken.
    init(borrowing: OpaquePointer) { raw = g_variant_ref(borrowing) }

    deinit { g_variant_unref(raw) }

    /// Lends the value to a C call: kept alive until `body` returns (Swift may release an
    /// object right after its last use, which `raw` alone would be).
    func pass<T>(_ body: (OpaquePointer) throws -> T) rethrows -> T {
        try withExtendedLifetime(self) { try body(raw) }
    }

    /// A new reference for a callee that takes one (GDBus's get_property).
    var retained: OpaquePointer { g_variant_ref(raw) }

    // MARK: making values

    static func string(_ s: String) -> GV { GV(new: g_variant_new_string(s)) }
    /// `path` must be a valid object path (vaultd's own paths are: `SecretServicePath`).
    static func objectPath(_ path: String) -> GV { GV(new: g_variant_new_object_path(path)) }
    static func bool(_ b: Bool) -> GV { GV(new: g_variant_new_boolean(b ? 1 : 0)) }
    static func uint64(_ n: UInt64) -> GV { GV(new: g_variant_new_uint64(guint64(n))) }
    static func variant(_ v: GV) -> GV { v.pass { GV(new: g_variant_new_variant($0)) } }

    static func tuple(_ items: [GV]) -> GV {
        var raws: [OpaquePointer?] = items.map(\.raw)
        return withExtendedLifetime(items) {
            GV(new: g_variant_new_tuple(&raws, gsize(raws.count)))
        }
    }

    /// An array of `elementType` (needed when `items` is empty).
    static func array(_ elementType: String, _ items: [GV]) -> GV {
        var raws: [OpaquePointer?] = items.map(\.raw)
        return withExtendedLifetime(items) {
            GV(new: g_variant_new_array(cg_type(elementType), &raws, gsize(raws.count)))
        }
    }

    static func objectPaths(_ paths: [String]) -> GV { array("o", paths.map(objectPath)) }

    static func dictEntry(_ key: GV, _ value: GV) -> GV {
        withExtendedLifetime((key, value)) { GV(new: g_variant_new_dict_entry(key.raw, value.raw)) }
    }

    /// `a{ss}`.
    static func stringDictionary(_ d: ExactDictionary<String>) -> GV {
        array("{ss}", d.sortedByKey().map { dictEntry(string($0.key), string($0.value)) })
    }

    /// `ay`, copied into GLib's memory.
    static func bytes(_ b: UnsafeRawBufferPointer) -> GV {
        GV(new: g_variant_new_fixed_array(cg_type("y"), b.baseAddress, gsize(b.count), 1))
    }

    // MARK: reading values

    func isOfType(_ type: String) -> Bool { g_variant_is_of_type(raw, cg_type(type)) != 0 }
    var count: Int { Int(g_variant_n_children(raw)) }
    func child(_ i: Int) -> GV { GV(owned: g_variant_get_child_value(raw, gsize(i))) }
    var children: [GV] { (0..<count).map(child) }
    /// A string, object path or signature's text.
    var string: String { String(cString: g_variant_get_string(raw, nil)) }
    var bool: Bool { g_variant_get_boolean(raw) != 0 }
    var uint32: UInt32 { g_variant_get_uint32(raw) }
    /// The value inside a `v`.
    var unboxed: GV { GV(owned: g_variant_get_variant(raw)) }

    /// The bytes of an `ay`, lent for the duration of `body` (GLib owns them).
    func withBytes<T>(_ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        var n: gsize = 0
        let p = g_variant_get_fixed_array(raw, &n, 1)
        return try body(UnsafeRawBufferPointer(start: p, count: p == nil ? 0 : Int(n)))
    }

    /// The value of `key` in an `a{sv}`, when it has one of `type`.
    func lookup(_ key: String, _ type: String) -> GV? {
        g_variant_lookup_value(raw, key, cg_type(type)).map { GV(owned: $0) }
    }
}
