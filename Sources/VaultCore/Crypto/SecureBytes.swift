internal import CSodium
import Foundation
import Synchronization
import VaultProtocol

/// Key material in `sodium_malloc` memory: locked against swap, excluded from core dumps,
/// wiped (zeroed) on release. Compared in constant time; prints as `[REDACTED]`; its bytes are
/// reachable only through `withUnsafeBytes`.
///
/// Small buffers (item keys, typical secrets: up to `SecureArena.largestSlot` bytes) are
/// slots of larger `sodium_malloc` regions (`SecureArena`), because one `sodium_malloc` per
/// buffer costs an mmap, two mprotects and an mlock, and its free an munlock and an munmap:
/// more than the rest of a lookup. Only a region has guard pages around it: the slots of one
/// region are adjacent, so a write past a slot's end reaches its neighbour, not a guard page.
/// Larger buffers get a region of their own, with its guard pages and canary.
///
/// `@unchecked Sendable` without a lock: `pointer` never changes (a pointer is not
/// `Sendable`); its bytes are written by whoever made the buffer before it is shared, and
/// only read after.
public final class SecureBytes: @unchecked Sendable, CustomStringConvertible,
    CustomDebugStringConvertible
{
    private let pointer: UnsafeMutableRawPointer
    /// Length in bytes.
    public let count: Int
    /// The arena slot class, or -1 for a region of its own.
    private let slotClass: Int

    /// `count` bytes of zeros. Traps when libsodium cannot allocate (out of memory).
    public init(count: Int) {
        Sodium.initialize()
        if let (p, c) = SecureArena.shared.allocate(count) {
            pointer = p
            slotClass = c
        } else {
            guard let p = sodium_malloc(max(count, 1)) else {
                fatalError("sodium_malloc failed: out of memory")
            }
            pointer = p
            slotClass = -1
            sodium_memzero(p, max(count, 1))
        }
        self.count = count
    }

    /// Fresh random bytes (`randombytes_buf`).
    public static func random(count: Int) -> SecureBytes {
        let s = SecureBytes(count: count)
        randombytes_buf(s.pointer, count)
        return s
    }

    /// Copies `bytes` in. The caller should wipe its own copy when it is secret.
    public convenience init<C: Collection>(copying bytes: C) where C.Element == UInt8 {
        self.init(count: bytes.count)
        let p = pointer.assumingMemoryBound(to: UInt8.self)
        // One copy from contiguous storage (arrays, Data, UTF-8 strings). Element by element
        // through this unspecialized generic costs runtime metadata lookups per byte.
        let copied: Void? = bytes.withContiguousStorageIfAvailable { b in
            if let base = b.baseAddress { p.update(from: base, count: b.count) }
        }
        if copied == nil {
            var i = 0
            for b in bytes {
                p[i] = b
                i += 1
            }
        }
    }

    deinit {
        if slotClass >= 0 {
            SecureArena.shared.release(pointer, slotClass: slotClass)
        } else {
            sodium_free(pointer)
        }
    }

    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: pointer, count: count))
    }

    public func withUnsafeMutableBytes<R>(_ body: (UnsafeMutableRawBufferPointer) throws -> R)
        rethrows -> R
    {
        try body(UnsafeMutableRawBufferPointer(start: pointer, count: count))
    }

    /// A copy in secure memory of its own (no copy passes through ordinary memory).
    public func copy() -> SecureBytes {
        let out = SecureBytes(count: count)
        out.pointer.copyMemory(from: pointer, byteCount: count)
        return out
    }

    /// Constant-time comparison (`sodium_memcmp`).
    public func constantTimeEquals(_ other: SecureBytes) -> Bool {
        count == other.count && sodium_memcmp(pointer, other.pointer, count) == 0
    }

    /// The bytes that the base64 text `text` (RFC 4648 with padding: libsodium's
    /// `sodium_base64_VARIANT_ORIGINAL`) encodes, decoded by `sodium_base642bin` straight
    /// into secure memory; nil when `text` is not exactly that (no whitespace, no other
    /// characters, the padding bits zero).
    public static func decodingBase64(_ text: UnsafeBufferPointer<UInt8>) -> SecureBytes? {
        guard text.count % 4 == 0 else { return nil }
        var padding = 0
        while padding < 2, padding < text.count, text[text.count - 1 - padding] == UInt8(ascii: "=")
        { padding += 1 }
        let out = SecureBytes(count: text.count / 4 * 3 - padding)
        guard text.count > 0 else { return out }
        var decoded = 0
        var end: UnsafePointer<CChar>?
        let rc = text.withMemoryRebound(to: CChar.self) { t in
            sodium_base642bin(
                out.pointer.assumingMemoryBound(to: UInt8.self), out.count, t.baseAddress, t.count,
                nil, &decoded, &end,
                sodium_base64_VARIANT_ORIGINAL)
        }
        guard rc == 0, decoded == out.count,
            end == text.withMemoryRebound(to: CChar.self, { $0.baseAddress! + $0.count })
        else { return nil }
        return out
    }

    /// The string a JSON string's text (between its quotes, already validated: as
    /// `JSON.parseCall` leaves a member in a message) stands for, unescaped straight into
    /// secure memory: its UTF-8 bytes.
    public static func unescapingJSONString(_ text: UnsafeBufferPointer<UInt8>) -> SecureBytes {
        let scratch = SecureBytes(count: text.count)
        let n = JSON.unescape(text, into: scratch.pointer.assumingMemoryBound(to: UInt8.self))
        return SecureBytes(
            copying: UnsafeBufferPointer(
                start: scratch.pointer.assumingMemoryBound(to: UInt8.self), count: n))
    }

    /// Length of `base64` of `count` bytes (with padding, without a NUL).
    public static func base64Length(of count: Int) -> Int { (count + 2) / 3 * 4 }

    /// Writes these bytes as base64 (`sodium_bin2base64`, VARIANT_ORIGINAL) to `out`, which
    /// has room for `base64Length(of: count)` bytes; no NUL is left after them.
    public func writeBase64(to out: UnsafeMutableRawPointer) {
        let length = Self.base64Length(of: count)
        // sodium_bin2base64 writes a NUL after the text: into a scratch buffer of secure memory
        // one byte longer, then copied.
        let scratch = SecureBytes(count: length + 1)
        _ = sodium_bin2base64(
            scratch.pointer.assumingMemoryBound(to: CChar.self), length + 1,
            pointer.assumingMemoryBound(to: UInt8.self), count, sodium_base64_VARIANT_ORIGINAL)
        out.copyMemory(from: scratch.pointer, byteCount: length)
    }

    public var description: String { "[REDACTED]" }
    public var debugDescription: String { "[REDACTED]" }
}

/// Slots for small `SecureBytes`, carved from `sodium_malloc` regions (each guarded by
/// inaccessible pages and locked against swap). A released slot is zeroed before it is
/// reused; regions are kept for the life of the process, so their number follows the peak
/// count of live buffers. Thread-safe: the free lists are read and written under `free`.
final class SecureArena: Sendable {
    static let shared = SecureArena()
    /// Slot sizes, one free list each; larger buffers do not come from the arena.
    static let slotSizes = [32, 64, 128, 256, 512, 1024]
    static var largestSlot: Int { slotSizes.last! }
    /// Bytes of one region (a multiple of every slot size).
    static let regionSize = 16 << 10

    /// Each slot class's free slots, by address (an address is `Sendable`, a pointer is not).
    private let free = Mutex<[[UInt]]>(
        Array(repeating: [], count: SecureArena.slotSizes.count))

    /// A zeroed slot of at least `count` bytes and its class, or nil when `count` is too large
    /// (or no region could be had: the caller falls back to its own `sodium_malloc`).
    func allocate(_ count: Int) -> (UnsafeMutableRawPointer, Int)? {
        guard let c = Self.slotSizes.firstIndex(where: { $0 >= count }) else { return nil }
        let slot = free.withLock { free -> UInt? in
            if free[c].isEmpty {
                let size = Self.slotSizes[c]
                guard let region = sodium_malloc(Self.regionSize) else { return nil }
                sodium_memzero(region, Self.regionSize)
                // Handed out from the front first.
                for i in stride(from: Self.regionSize / size - 1, through: 0, by: -1) {
                    free[c].append(UInt(bitPattern: region + i * size))
                }
            }
            return free[c].removeLast()
        }
        return slot.map { (UnsafeMutableRawPointer(bitPattern: $0)!, c) }
    }

    /// Zeroes the slot and makes it available again.
    func release(_ p: UnsafeMutableRawPointer, slotClass c: Int) {
        sodium_memzero(p, Self.slotSizes[c])
        let address = UInt(bitPattern: p)
        free.withLock { $0[c].append(address) }
    }
}
