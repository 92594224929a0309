import Foundation
import VaultProtocol

extension Age {
    /// Takes bytes: all of the buffer is written, or it throws.
    public typealias Sink = (UnsafeRawBufferPointer) throws -> Void
    /// Gives bytes: up to the buffer's size, the number given, 0 at the end.
    public typealias Source = (UnsafeMutableRawBufferPointer) throws -> Int

    /// Fills `buffer` from `source` as far as it gives; the bytes read (fewer at its end).
    static func readFully(_ source: Source, into buffer: inout [UInt8]) throws -> Int {
        var got = 0
        while got < buffer.count {
            let n = try buffer.withUnsafeMutableBytes {
                try source(UnsafeMutableRawBufferPointer(rebasing: $0[got...]))
            }
            if n == 0 { break }
            got += n
        }
        return got
    }

    /// Writes an age v1 file to a sink as its plaintext comes: the header at once, then each
    /// 64 KiB payload chunk sealed as soon as the next byte shows it is not the last. Holds
    /// one chunk of plaintext (in secure memory) and one sealed chunk, whatever the size.
    public final class Writer {
        private let sink: Sink
        private let payloadKey: SecureBytes
        /// The plaintext of the chunk being filled, and how much of it is.
        private let plain = SecureBytes(count: Age.chunkSize)
        private var filled = 0
        private var sealed = [UInt8](
            repeating: 0, count: Age.chunkSize + AgePrimitives.aeadTagLength)
        private var counter: UInt64 = 0
        private var finished = false

        /// Writes the header for `recipients` and the payload's nonce to `sink`. Throws Param
        /// for a set of recipients age refuses, InternalError when scrypt cannot allocate its
        /// memory, and what `sink` throws.
        public init(to recipients: [Recipient], sink: @escaping Sink) throws {
            self.sink = sink
            let fileKey = SecureBytes.random(count: Age.fileKeyLength)
            let nonce = Sodium.randomBytes(16)
            payloadKey = AgePrimitives.hkdf(ikm: fileKey, salt: nonce, info: "payload")
            try (Age.header(wrapping: fileKey, for: recipients) + nonce).withUnsafeBytes {
                try sink($0)
            }
        }

        /// Appends `bytes` to the plaintext.
        public func write(_ bytes: UnsafeRawBufferPointer) throws {
            precondition(!finished, "written after finish")
            var at = 0
            while at < bytes.count {
                // A full chunk is sealed only now that more follows: it is not the last.
                if filled == Age.chunkSize { try seal(last: false) }
                let n = min(Age.chunkSize - filled, bytes.count - at)
                plain.withUnsafeMutableBytes {
                    ($0.baseAddress! + filled).copyMemory(
                        from: bytes.baseAddress! + at, byteCount: n)
                }
                filled += n
                at += n
            }
        }

        public func write(_ bytes: [UInt8]) throws { try bytes.withUnsafeBytes { try write($0) } }

        /// Seals the last chunk (empty when nothing was written) and writes it.
        public func finish() throws {
            precondition(!finished, "finished twice")
            try seal(last: true)
            finished = true
        }

        private func seal(last: Bool) throws {
            let length = filled + AgePrimitives.aeadTagLength
            sealed.withUnsafeMutableBytes { out in
                plain.withUnsafeBytes { p in
                    AgePrimitives.seal(
                        UnsafeRawBufferPointer(rebasing: p[..<filled]), key: payloadKey,
                        nonce: Age.chunkNonce(counter, last: last), into: out.baseAddress!)
                }
            }
            try sealed.withUnsafeBytes { try sink(UnsafeRawBufferPointer(rebasing: $0[..<length])) }
            counter += 1
            filled = 0
        }
    }

    /// Reads an age v1 file from a source as a stream of plaintext: the header first (at
    /// most 64 KiB), then one payload chunk at a time, each authenticated before any of its
    /// bytes is given, the last one known by reading one byte past it and checked for
    /// STREAM's last-chunk flag. `read` gives 0 only after that last chunk authenticated, so a
    /// reader that reads to the end has checked the whole file. Holds one sealed chunk (and a
    /// byte) and one chunk of plaintext (in secure memory), whatever the file's size.
    public final class Reader {
        private let source: Source
        /// The file key the header gave (to read the same file again without its KDF).
        let fileKey: SecureBytes
        private let payloadKey: SecureBytes
        private let maximumSize: Int
        /// Bytes read past the header with it, given before any more of `source`'s.
        private var early: [UInt8]
        private var sealed = [UInt8](repeating: 0, count: Reader.sealedChunk + 1)
        /// Bytes in `sealed`: at most one (the byte past a chunk) between chunks.
        private var buffered = 0
        private let plain = SecureBytes(count: Age.chunkSize)
        private var plainCount = 0
        private var plainAt = 0
        private var counter: UInt64 = 0
        private var ended = false
        /// Plaintext bytes authenticated so far.
        private(set) var plaintextBytes = 0

        private static let sealedChunk = Age.chunkSize + AgePrimitives.aeadTagLength

        /// Reads the header and the payload's nonce, and opens the file key with the first of
        /// `identities` that unwraps it. `maximumSize`: the plaintext may be at most this many
        /// bytes (refused at the chunk that passes it). Throws `Failure`, InternalError when
        /// scrypt cannot allocate its memory, and what `source` throws.
        public convenience init(
            source: @escaping Source, identities: [Identity], maximumSize: Int = Int.max
        ) throws {
            try self.init(source: source, maximumSize: maximumSize) { stanzas in
                try Age.unwrap(stanzas, identities)
            }
        }

        /// The same, with the file key a Reader of this file opened before.
        convenience init(source: @escaping Source, fileKey: SecureBytes, maximumSize: Int)
            throws
        {
            try self.init(source: source, maximumSize: maximumSize) { _ in fileKey }
        }

        private init(
            source: @escaping Source, maximumSize: Int,
            fileKey key: ([Stanza]) throws -> SecureBytes
        ) throws {
            self.source = source
            self.maximumSize = maximumSize
            // One byte over the header's limit tells "too long" from "ends inside".
            var head = [UInt8](repeating: 0, count: Age.maximumHeaderSize + 1)
            let got = try Age.readFully(source, into: &head)
            head.removeLast(head.count - got)
            let (stanzas, macked, mac, payloadStart) = try Age.parseHeader(head)
            fileKey = try key(stanzas)
            let expected = Age.headerMAC(head[..<macked], fileKey: fileKey)
            let macOK = expected.withUnsafeBytes { e in
                mac.withUnsafeBytes { AgePrimitives.equal(e, $0) }
            }
            guard macOK else {
                throw Failure(
                    .altered, "the file's header does not authenticate: the file was altered")
            }
            // The payload's 16-byte nonce: what the header's read took of it, then the rest.
            var rest = Array(head[payloadStart...])
            var nonce = Array(rest.prefix(16))
            rest.removeFirst(nonce.count)
            var more = [UInt8](repeating: 0, count: 16 - nonce.count)
            nonce += more[..<(try Age.readFully(source, into: &more))]
            guard nonce.count == 16 else {
                throw Failure(
                    .truncated, "the file is truncated: its payload ends before its first chunk")
            }
            early = rest
            payloadKey = AgePrimitives.hkdf(ikm: fileKey, salt: nonce, info: "payload")
        }

        /// The file's bytes after the header: the early ones, then the source's.
        private func readRaw(into out: UnsafeMutableRawBufferPointer) throws -> Int {
            guard early.isEmpty else {
                let n = min(out.count, early.count)
                early.withUnsafeBytes {
                    out.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[..<n]))
                }
                early.removeFirst(n)
                return n
            }
            return try source(out)
        }

        /// Up to `out.count` bytes of plaintext, authenticated; 0 at the end of the file, once
        /// its last chunk authenticated. Throws `Failure` (altered, truncated, too large).
        public func read(into out: UnsafeMutableRawBufferPointer) throws -> Int {
            while plainAt == plainCount {
                guard try nextChunk() else { return 0 }
            }
            let n = min(out.count, plainCount - plainAt)
            plain.withUnsafeBytes {
                out.copyMemory(from: UnsafeRawBufferPointer(rebasing: $0[plainAt..<(plainAt + n)]))
            }
            plainAt += n
            return n
        }

        /// Opens the next chunk into `plain`; false after the last one.
        private func nextChunk() throws -> Bool {
            guard !ended else { return false }
            let tag = AgePrimitives.aeadTagLength
            while buffered < sealed.count {
                let n = try sealed.withUnsafeMutableBytes {
                    try readRaw(into: UnsafeMutableRawBufferPointer(rebasing: $0[buffered...]))
                }
                if n == 0 { break }
                buffered += n
            }
            // A byte past a whole sealed chunk: that chunk is not the last.
            let last = buffered <= Self.sealedChunk
            let length = min(buffered, Self.sealedChunk)
            // Only a file's one chunk may be empty; a last chunk shorter than a tag was cut.
            guard length > tag || (length == tag && counter == 0) else {
                throw Failure(
                    .truncated,
                    counter == 0
                        ? "the file is truncated: its payload ends before its first chunk"
                        : "the file is truncated, or its payload ends in an empty chunk")
            }
            guard plaintextBytes + length - tag <= maximumSize else {
                throw Failure(
                    .malformed, "the file holds more than \(maximumSize) bytes, which are accepted")
            }
            let box = { (nonce: [UInt8]) -> Bool in
                self.sealed.withUnsafeBytes { s in
                    self.plain.withUnsafeMutableBytes { p in
                        AgePrimitives.open(
                            UnsafeRawBufferPointer(rebasing: s[..<length]), key: self.payloadKey,
                            nonce: nonce, into: p.baseAddress!)
                    }
                }
            }
            guard box(Age.chunkNonce(counter, last: last)) else {
                // A full final chunk that is not flagged last: the rest was cut off.
                if last && length == Self.sealedChunk && box(Age.chunkNonce(counter, last: false)) {
                    throw Failure(
                        .truncated, "the file is truncated: it ends before its last chunk")
                }
                throw Failure(
                    .altered,
                    "chunk \(counter) of the file's payload does not authenticate: the file was altered or truncated"
                )
            }
            if last {
                ended = true
                buffered = 0
            } else {
                sealed[0] = sealed[Self.sealedChunk]
                buffered = 1
            }
            plainCount = length - tag
            plainAt = 0
            plaintextBytes += plainCount
            counter += 1
            return true
        }
    }
}
