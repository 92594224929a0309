import Foundation

/// A small seeded generator (SplitMix64, Steele, Lea and Flood 2014), so a test's random
/// operations are the same on every run and a failing one replays from its seed.
public struct SeededRandom: RandomNumberGenerator {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// `n` random bytes.
    public mutating func bytes(_ n: Int) -> [UInt8] {
        (0..<n).map { _ in UInt8.random(in: 0...255, using: &self) }
    }
}

/// `count` deterministic pseudo-random bytes from `seed` (8 per step of `SeededRandom`), for
/// large test payloads.
public func pseudoRandomBytes(count: Int, seed: UInt64) -> Data {
    var random = SeededRandom(seed: seed)
    var out = [UInt8]()
    out.reserveCapacity(count + 8)
    while out.count < count {
        withUnsafeBytes(of: random.next().littleEndian) { out.append(contentsOf: $0) }
    }
    return Data(out.prefix(count))
}
