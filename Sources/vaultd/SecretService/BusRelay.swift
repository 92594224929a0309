import CGio
import CVaultSys
import Foundation
import Synchronization
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// What answers calls on the relay's thread, before GDBus sees them (`InlineReads.swift`).
/// Every method runs on the relay's thread.
protocol BusResponder: AnyObject, Sendable {
    /// Whether call `header` (not yet its body) is one to read whole and offer to `answer`.
    func wantsWhole(_ header: BusHeader) -> Bool
    /// Call `message` (its bytes, header and body) of `sender`: the reply's bytes, numbered
    /// `replySerial`; `.taken` when it is answered later (through `BusRelay.deliver`, with
    /// that serial, or through GDBus); `.pass` to hand it to GDBus.
    func answer(_ message: [UInt8], header: BusHeader, sender: String, replySerial: UInt32)
        -> BusAnswer
    /// A call of `sender` went on to GDBus, which will answer it (`replied`), unless it wants
    /// no reply.
    func handedOn(sender: String, serial: UInt32, wantsNoReply: Bool)
    /// GDBus's reply to call `serial` of `destination` is going out.
    func replied(to destination: String, serial: UInt32)
}

enum BusAnswer {
    case reply([UInt8])
    case taken
    case pass
}

/// Bounds what the session bus can make vaultd hold. GDBus decodes each message whole into
/// GVariants before any handler can count it (one SearchItems of 60 MB grew vaultd by 1 GB),
/// so vaultd owns the bus socket itself and hands GDBus one end of a socketpair, with this
/// relay between them on a thread of its own (`vaultd-busrelay`):
///
/// - The authentication (SASL) passes through unchanged both ways, until GDBus's `BEGIN`;
///   the bus identifies vaultd by the socket vaultd connected, as before.
/// - From the bus to GDBus, it reads each message's framing (`BusHeader`): the 16-byte start
///   gives the header's and the body's lengths before either is read. A message over
///   `maximumMessage` reaches GDBus as its header alone, with an empty body, no signature and
///   no descriptors (`BusHeader.withoutBody`): its call is answered InvalidArgs by the usual
///   signature check (GDBus's, or vaultd's own for items), and its body is read and dropped
///   in `chunk`-sized pieces, never held. A header over `BusHeader.maximumHeader`, or one
///   whose fields do not parse, is dropped with its body (no client's call has one).
/// - Descriptors passed with a message (SCM_RIGHTS: the secret portal's RetrieveSecret) go
///   on with it; those of a dropped message are closed.
/// - It counts the calls handed to GDBus and not yet answered (it sees each reply go out), by
///   what they may cost decoded (`decodedCost`), and reads nothing more from the bus while
///   that is over `budget`: the calls GDBus has queued are bounded too. A call not answered
///   stops counting after `unansweredTimeout` seconds, one wanting no reply after
///   `noReplyTimeout`.
/// - The reads of a lookup are answered here, on the relay's thread, by its `BusResponder`
///   (`InlineReads.swift`): a call it `wantsWhole` is read whole (it is under
///   `maximumMessage`) and offered to it; its reply goes to the bus between GDBus's messages,
///   with a serial of the relay's own (`ownSerials`). A call it does not answer goes on to
///   GDBus as any other. Each hand-over to GDBus and back costs two thread wake-ups and GDBus's
///   decoding, more than the read itself.
/// - From GDBus to the bus, bytes pass unchanged (vaultd's own messages).
///
/// `VAULTD_SECRET_SERVICE_RELAY=0` connects GDBus to the bus directly, as before (for
/// measuring the difference).
///
/// `@unchecked Sendable` without a lock: its buffers and counts belong to its own thread
/// (`vaultd-busrelay`); the other threads only hold it.
final class BusRelay: @unchecked Sendable {
    /// The largest message vaultd takes from the bus whole (bytes on the wire). The largest a
    /// client needs is a CreateItem or SetSecret with a secret at `SecretLimit.maximumBytes`
    /// (1 MiB, plus the session's padding) and attributes at their 64 KiB limit; 2 MiB holds
    /// it with room, and a GetSecrets, Lock or Unlock naming some 20,000 items.
    static let maximumMessage = 2 << 20
    /// The most that calls handed to GDBus and not answered may cost decoded (`decodedCost`).
    static let budget = 64 << 20
    /// What an admitted call costs at least: GDBus's message, invocation and dispatch.
    static let minimumCost = 4 << 10
    /// Seconds after which a call not answered stops counting, and after which one that
    /// wants no reply does (GDBus handles it at once; its end is not seen).
    static let unansweredTimeout: UInt64 = 25
    static let noReplyTimeout: UInt64 = 1
    /// The bytes read or written at once (a body dropped goes through in pieces of this
    /// size: each piece is a wake-up, and a lookup queued behind 100 MB waits for them all),
    /// and the most queued towards either side before the relay stops reading the other.
    static let chunk = 1 << 20
    static let maximumQueued = 256 << 10
    static let droppedLog = RateLimitedLog()
    /// The serials of the replies the relay sends itself: GDBus numbers vaultd's messages from
    /// 1 up, so the relay numbers its own from the top half, where GDBus's never reach (the
    /// bus matches a reply by its REPLY_SERIAL; a serial is only to be non-zero).
    static let ownSerials: ClosedRange<UInt32> = 0x8000_0000...UInt32.max

    /// What a message of `bytes` on the wire with body `signature` may cost once GDBus has
    /// decoded it: strings, object paths and arrays of fixed-size values stay one block
    /// (measured: `as`, `a{ss}`, `ay` at about 1×); every variant, and every array of
    /// containers, becomes GVariants of their own (measured: `av` of bytes 40×, `aay` 15×).
    static func decodedCost(bytes: Int, signature: String) -> Int {
        // On the signature's bytes (ASCII type codes), in place: Foundation's substring
        // search costs more than the rest of the relay's work on a message.
        var signature = signature
        let expanding = signature.withUTF8 { s -> Bool in
            func has(_ part: StaticString) -> Bool {
                let p = UnsafeBufferPointer(start: part.utf8Start, count: part.utf8CodeUnitCount)
                guard s.count >= p.count else { return false }
                return (0...(s.count - p.count)).contains {
                    s[$0..<$0 + p.count].elementsEqual(p)
                }
            }
            return s.contains(UInt8(ascii: "v")) || s.contains(UInt8(ascii: "("))
                || has("aa") || has("a{sv}") || has("a{sa")
        }
        return max(minimumCost, bytes * (expanding ? 40 : 1))
    }

    private let bus: Int32
    /// Told of the messages the relay drops or cuts.
    private let logger: Logger
    private let gdbus: Int32
    private var toBus = Outbox()
    private var toGDBus = Outbox()
    private var fromBus = Inbound.authenticating
    private var fromGDBus = Outbound()
    /// Calls handed to GDBus, by sender and serial: their cost and when they stop counting.
    private var unanswered: [CallKey: (cost: Int, until: UInt64)] = [:]
    private var unansweredCost = 0
    /// Who answers calls here (none until the service is set up: everything goes to GDBus).
    private let responder = Mutex<(any BusResponder)?>(nil)
    /// The relay's replies waiting for the end of the message GDBus is writing, and their bytes.
    private var heldReplies: [[UInt8]] = []
    private var heldReplyBytes = 0
    private var nextOwnSerial = BusRelay.ownSerials.lowerBound
    /// Replies answered on other threads (`deliver`), each with what runs once it is queued,
    /// and the pipe that wakes the relay for them (its read end, polled, and its write end).
    private let deliveries = Mutex<[(bytes: [UInt8], then: @Sendable () -> Void)]>([])
    private let wake: (read: Int32, write: Int32)

    struct CallKey: Hashable {
        let sender: String
        let serial: UInt32
    }

    /// A relay between `bus` and `gdbus`, not yet running (`start` runs it on its thread; the
    /// tests drive one by hand through `fromBusBytes`, `fromGDBusBytes` and `flushToGDBus`).
    init(bus: Int32, gdbus: Int32, wake: (read: Int32, write: Int32), logger: Logger) {
        self.logger = logger
        self.bus = bus
        self.gdbus = gdbus
        self.wake = wake
    }

    /// Connects to the bus at `address` and starts the relay; returns the socket GDBus is to
    /// use (its end of the socketpair) and the relay, or throws with why not.
    static func start(address: String, logger: Logger) throws -> (fd: Int32, relay: BusRelay) {
        var err: UnsafeMutablePointer<GError>?
        let bus = cg_dbus_address_connect_fd(address, &err)
        guard bus >= 0 else {
            defer { g_error_free(err) }
            throw BusError(.failed, String(cString: cg_error_message(err)))
        }
        let pair: (Int32, Int32)
        do {
            pair = try SystemCall.socketpair(
                AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
        } catch {
            SystemCall.close(bus)
            throw BusError(.failed, "socketpair: \(String(cString: strerror(error.code)))")
        }
        let wake: (read: Int32, write: Int32)
        do {
            wake = try SystemCall.pipe()
        } catch {
            for fd in [bus, pair.0, pair.1] { SystemCall.close(fd) }
            throw BusError(.failed, "pipe: \(String(cString: strerror(error.code)))")
        }
        for fd in [bus, pair.0, wake.read, wake.write] {
            if let flags = try? SystemCall.fcntl(fd, F_GETFL) {
                _ = try? SystemCall.fcntl(fd, F_SETFL, flags | O_NONBLOCK)
            }
        }
        // A receive buffer of 4 MiB (the kernel may give less): fewer wake-ups of the relay
        // and the bus daemon while a large message goes through.
        try? SystemCall.setsockopt(bus, SOL_SOCKET, SO_RCVBUF, Int32(4 << 20))
        let relay = BusRelay(bus: bus, gdbus: pair.0, wake: wake, logger: logger)
        let thread = Thread {
            vault_set_thread_name("vaultd-busrelay")
            relay.run()
        }
        // The responder's reads run on this thread (SQLite and the engine): GDBus's worker's
        // size, not the 1 MiB the relay alone needs.
        thread.stackSize = 8 << 20
        thread.start()
        return (pair.1, relay)
    }

    /// From now on calls go to `r` first (`BusResponder`).
    func serve(_ r: any BusResponder) {
        responder.withLock { $0 = r }
    }

    /// Sends `bytes`, the reply to a call the responder took (`.taken`) and answered on another
    /// thread, numbered with the serial `answer` was given; then runs `then` on the relay's
    /// thread, once the reply is queued ahead of anything GDBus writes after. Any thread.
    func deliver(_ bytes: [UInt8], then: @escaping @Sendable () -> Void) {
        deliveries.withLock { $0.append((bytes, then)) }
        // A full pipe holds wake-ups already: the write may fail then.
        _ = try? [UInt8(1)].withUnsafeBytes { try SystemCall.write(wake.write, $0) }
    }

    /// Queues the replies delivered, each followed by its `then`.
    private func takeDeliveries() {
        var drained = [UInt8](repeating: 0, count: 64)
        _ = try? drained.withUnsafeMutableBytes { try SystemCall.read(wake.read, into: $0) }
        for d in deliveries.withLock({ d in
            defer { d = [] }
            return d
        }) {
            sendOwn(d.bytes)
            d.then()
        }
    }

    // MARK: the loop

    private func run() {
        var buffer = [UInt8](repeating: 0, count: Self.chunk)
        var fds = [Int32](repeating: -1, count: Int(VAULT_MAX_PASSED_FDS))
        defer {
            SystemCall.close(bus)
            SystemCall.close(gdbus)
            SystemCall.close(wake.read)
            SystemCall.close(wake.write)
            toBus.discard()
            toGDBus.discard()
            for var r in heldReplies { wipe(&r) }
            for var d in deliveries.withLock({ $0 }) { wipe(&d.bytes) }
            for fd in heldFDs + passedFDs { SystemCall.close(fd) }
        }
        while true {
            expireUnanswered()
            let readBus =
                toGDBus.bytes < Self.maximumQueued && unansweredCost < Self.budget
                && heldReplyBytes < Self.maximumQueued
            let readGDBus = toBus.bytes < Self.maximumQueued
            var polled = [
                pollfd(
                    fd: bus, events: Int16((readBus ? POLLIN : 0) | (toBus.isEmpty ? 0 : POLLOUT)),
                    revents: 0),
                pollfd(
                    fd: gdbus,
                    events: Int16((readGDBus ? POLLIN : 0) | (toGDBus.isEmpty ? 0 : POLLOUT)),
                    revents: 0),
                pollfd(fd: wake.read, events: Int16(readGDBus ? POLLIN : 0), revents: 0),
            ]
            // While calls count, wake each second to let the expired ones go.
            let timeout: Int32 = unanswered.isEmpty ? -1 : 1000
            guard
                (try? polled.withUnsafeMutableBufferPointer({
                    try SystemCall.poll($0, timeout: timeout)
                })) != nil
            else { return }
            let closing = Int16(POLLHUP | POLLERR)
            if polled[0].revents & Int16(POLLIN) != 0 || polled[0].revents & closing != 0 {
                guard receive(from: bus, &buffer, &fds, into: { fromBusBytes($0, $1) }) else {
                    return
                }
            }
            if polled[1].revents & Int16(POLLIN) != 0 || polled[1].revents & closing != 0 {
                guard receive(from: gdbus, &buffer, &fds, into: { fromGDBusBytes($0, $1) }) else {
                    return
                }
            }
            if polled[2].revents & Int16(POLLIN) != 0 { takeDeliveries() }
            guard toBus.flush(to: bus), toGDBus.flush(to: gdbus) else { return }
        }
    }

    /// Writes what GDBus's side takes now of what is queued for it; false when that failed.
    func flushToGDBus() -> Bool { toGDBus.flush(to: gdbus) }

    /// Reads what is there on `fd` and hands it to `handle`; false once `fd` ended or failed
    /// (the relay then closes both sides: GDBus sees its connection close).
    private func receive(
        from fd: Int32, _ buffer: inout [UInt8], _ fds: inout [Int32],
        into handle: (ArraySlice<UInt8>, [Int32]) -> Void
    ) -> Bool {
        var count: Int32 = 0
        let n: Int
        do {
            n = try buffer.withUnsafeMutableBytes { b in
                try fds.withUnsafeMutableBufferPointer { f in
                    try retryingOnInterrupt("recvmsg") {
                        vault_recv_fds(
                            fd, b.baseAddress, b.count, f.baseAddress, Int32(f.count), &count)
                    }
                }
            }
        } catch let e as Errno {
            return e.code == Errno.wouldBlock
        } catch { return false }
        if n == 0 { return false }
        handle(buffer[0..<n], Array(fds[0..<Int(count)]))
        // What was read may hold a secret (a CreateItem's, a reply's): not left behind.
        buffer.withUnsafeMutableBytes { explicit_bzero($0.baseAddress!, n) }
        return true
    }

    // MARK: from the bus

    /// Where the stream from the bus is: the authentication, a header being read, a body
    /// passed on, a body dropped, or a call read whole for the responder.
    private enum Inbound {
        case authenticating
        case header([UInt8], need: Int)
        case passing(Int)
        case dropping(Int)
        case collecting(BusHeader, [UInt8], need: Int)
    }

    /// Descriptors still to be closed for a dropped message.
    private var fdsToClose = 0
    /// Descriptors received and not yet matched to the message that declares them (its
    /// UNIX_FDS field; the bus passes a message's descriptors only with it), which they go on
    /// with, sent with its first byte (a descriptor cannot be sent without a byte).
    private var heldFDs: [Int32] = []
    /// The descriptors of the message whose bytes begin what is being gathered for GDBus (the
    /// message that declares them, UNIX_FDS).
    private var passedFDs: [Int32] = []

    /// Takes bytes read from the bus, and the descriptors that came with them.
    func fromBusBytes(_ bytes: ArraySlice<UInt8>, _ fds: [Int32]) {
        var fds = fds
        while fdsToClose > 0, let fd = fds.first {
            SystemCall.close(fd)
            fds.removeFirst()
            fdsToClose -= 1
        }
        heldFDs += fds
        var rest = bytes
        var passed: [UInt8] = []
        while !rest.isEmpty {
            switch fromBus {
            case .authenticating:
                // The bus sends nothing after its last answer until GDBus's BEGIN, and every
                // message after it.
                guard fromGDBus.begun else {
                    passed += rest
                    rest = []
                    continue
                }
                fromBus = .header([], need: BusHeader.fixedSize)
            case .passing(let n):
                let k = min(n, rest.count)
                passed += rest.prefix(k)
                rest = rest.dropFirst(k)
                fromBus = k == n ? .header([], need: BusHeader.fixedSize) : .passing(n - k)
            case .dropping(let n):
                let k = min(n, rest.count)
                rest = rest.dropFirst(k)
                fromBus = k == n ? .header([], need: BusHeader.fixedSize) : .dropping(n - k)
            case .collecting(let header, var body, let need):
                fromBus = .authenticating  // `body` is then the only reference: appended in place
                let k = min(need - body.count, rest.count)
                body += rest.prefix(k)
                rest = rest.dropFirst(k)
                fromBus =
                    body.count < need
                    ? .collecting(header, body, need: need) : whole(header, &body, &passed)
            case .header(var acc, let need):
                let k = min(need - acc.count, rest.count)
                acc += rest.prefix(k)
                rest = rest.dropFirst(k)
                fromBus = acc.count < need ? .header(acc, need: need) : headerRead(acc, &passed)
            }
        }
        if !passed.isEmpty {
            toGDBus.append(passed, fds: passedFDs)
            passedFDs = []
        }
    }

    /// What follows a header read up to `acc` (its fixed start, or all of it): more of it to
    /// read, or its body to pass on or drop, once what GDBus gets of it is in `passed`.
    private func headerRead(_ acc: [UInt8], _ passed: inout [UInt8]) -> Inbound {
        guard let (headerLength, bodyLength) = BusHeader.lengths(acc[...]) else {
            // No message start: the stream cannot be followed. GDBus is given what came, and
            // fails the connection on it.
            logger.warning("secret service: the bus sent bytes that start no D-Bus message")
            passed += acc
            return .passing(Int.max)
        }
        if acc.count < headerLength && headerLength <= BusHeader.maximumHeader {
            return .header(acc, need: headerLength)
        }
        guard acc.count == headerLength, let header = BusHeader(acc) else {
            _ = Self.droppedLog.log(
                "header", to: logger, .warning,
                "secret service: dropped a bus message whose header (\(headerLength) bytes) vaultd does not read (at most \(BusHeader.maximumHeader))"
            )
            closeHeldFDs(heldFDs.count)
            return .dropping(headerLength - acc.count + bodyLength)
        }
        let sender = header.string(.sender) ?? ""
        if headerLength + bodyLength > Self.maximumMessage {
            closeHeldFDs(Int(header.uint32(.unixFDs) ?? 0))
            _ = Self.droppedLog.log(
                "body", to: logger, .warning,
                "secret service: a bus message of \(headerLength + bodyLength) bytes from \(logField(sender)) (\(logField(header.string(.member) ?? ""))) is over \(Self.maximumMessage): handed on without its body"
            )
            passed += header.withoutBody()
            count(header, sender: sender, bytes: headerLength)
            return .dropping(bodyLength)
        }
        if header.type == BusHeader.MessageType.methodCall.rawValue,
            (header.uint32(.unixFDs) ?? 0) == 0,
            let r = responder.withLock({ $0 }), r.wantsWhole(header)
        {
            var none: [UInt8] = []
            return bodyLength == 0
                ? whole(header, &none, &passed) : .collecting(header, [], need: bodyLength)
        }
        let declared = Int(header.uint32(.unixFDs) ?? 0)
        if declared > 0 {
            // Its descriptors go with its own first byte: what came before it in this read (the
            // end of another message: the kernel hands over a message's descriptors with the
            // bytes before it from the same writer) goes to GDBus first, without them.
            if !passed.isEmpty {
                toGDBus.append(passed, fds: passedFDs)
                passed = []
            }
            passedFDs = Array(heldFDs.prefix(declared))
            heldFDs.removeFirst(passedFDs.count)
        }
        passed += acc
        count(header, sender: sender, bytes: headerLength + bodyLength)
        return bodyLength == 0 ? .header([], need: BusHeader.fixedSize) : .passing(bodyLength)
    }

    /// Call `header` with `body`, read whole: offered to the responder, whose reply goes to the
    /// bus, now or once delivered; or, if it does not answer it, passed on to GDBus as any other.
    private func whole(
        _ header: BusHeader, _ body: inout [UInt8], _ passed: inout [UInt8]
    ) -> Inbound {
        var message = header.bytes + body
        // A call answered here may carry a secret (CreateItem's): its bytes are zeroed after.
        wipe(&body)
        let sender = header.string(.sender) ?? ""
        let serial = nextOwnSerial
        nextOwnSerial =
            serial == Self.ownSerials.upperBound ? Self.ownSerials.lowerBound : serial + 1
        switch responder.withLock({ $0 })?.answer(
            message, header: header, sender: sender, replySerial: serial)
        {
        case .reply(let bytes)?:
            sendOwn(bytes)
            wipe(&message)
        case .taken?:
            wipe(&message)
        case .pass?, nil:
            passed += message
            count(header, sender: sender, bytes: message.count)
        }
        return .header([], need: BusHeader.fixedSize)
    }

    /// Queues a reply of the relay's own towards the bus: now if GDBus's stream is between
    /// messages, else once the message it is writing ends (`fromGDBusBytes`).
    private func sendOwn(_ bytes: [UInt8]) {
        if atMessageEnd {
            toBus.append(bytes, fds: [], wipe: true)
        } else {
            heldReplies.append(bytes)
            heldReplyBytes += bytes.count
        }
    }

    /// Closes the `n` descriptors of a message dropped or cut: those received already (the
    /// kernel hands over descriptors with the first bytes of their message, never merged
    /// into one read with another message's), then the rest as they come.
    private func closeHeldFDs(_ n: Int) {
        let now = min(n, heldFDs.count)
        for fd in heldFDs.prefix(now) { SystemCall.close(fd) }
        heldFDs.removeFirst(now)
        fdsToClose += n - now
    }

    /// Counts a call handed to GDBus until its reply goes out (`fromGDBusBytes`), and tells the
    /// responder it went on.
    private func count(_ header: BusHeader, sender: String, bytes: Int) {
        guard header.type == BusHeader.MessageType.methodCall.rawValue else { return }
        responder.withLock({ $0 })?.handedOn(
            sender: sender, serial: header.serial,
            wantsNoReply: header.flags & BusHeader.noReplyExpected != 0)
        let cost = Self.decodedCost(
            bytes: bytes, signature: bytes == header.bytes.count ? "" : header.signature)
        let key = CallKey(sender: sender, serial: header.serial)
        if let old = unanswered[key] { unansweredCost -= old.cost }
        let wantsNoReply = header.flags & BusHeader.noReplyExpected != 0
        let seconds = wantsNoReply ? Self.noReplyTimeout : Self.unansweredTimeout
        unanswered[key] = (cost, MonotonicClock.nanoseconds() + seconds * 1_000_000_000)
        unansweredCost += cost
    }

    private func answered(_ key: CallKey) {
        if let c = unanswered.removeValue(forKey: key) { unansweredCost -= c.cost }
    }

    private func expireUnanswered() {
        guard !unanswered.isEmpty else { return }
        let now = MonotonicClock.nanoseconds()
        for (key, c) in unanswered where c.until <= now { answered(key) }
    }

    // MARK: from GDBus

    /// Where the stream from GDBus is: the authentication (its lines, until BEGIN), then a
    /// header being read or the rest of a message.
    private struct Outbound {
        var begun = false
        var line: [UInt8] = []
        var header: [UInt8] = []
        var need = BusHeader.fixedSize
        var skip = 0
    }

    /// Whether GDBus's stream is between two messages (where a reply of the relay's own may go).
    private var atMessageEnd: Bool {
        fromGDBus.begun && fromGDBus.skip == 0 && fromGDBus.header.isEmpty
    }

    /// Takes bytes GDBus wrote, and the descriptors that came with them.
    func fromGDBusBytes(_ bytes: ArraySlice<UInt8>, _ fds: [Int32]) {
        var rest = bytes
        var start = bytes.startIndex
        var fds = fds
        defer {
            toBus.append(Array(bytes[start...]), fds: fds)
            releaseHeldReplies()
        }
        while !rest.isEmpty {
            if !heldReplies.isEmpty && atMessageEnd && rest.startIndex > start {
                toBus.append(Array(bytes[start..<rest.startIndex]), fds: fds)
                fds = []
                start = rest.startIndex
                releaseHeldReplies()
            }
            if !fromGDBus.begun {
                let b = rest.removeFirst()
                fromGDBus.line.append(b)
                if fromGDBus.line.count > 4096 { fromGDBus.line.removeAll() }
                guard b == UInt8(ascii: "\n") else { continue }
                fromGDBus.begun = fromGDBus.line.elementsEqual("BEGIN\r\n".utf8)
                fromGDBus.line.removeAll()
            } else if fromGDBus.skip > 0 {
                let k = min(fromGDBus.skip, rest.count)
                rest = rest.dropFirst(k)
                fromGDBus.skip -= k
            } else {
                let k = min(fromGDBus.need - fromGDBus.header.count, rest.count)
                fromGDBus.header += rest.prefix(k)
                rest = rest.dropFirst(k)
                if fromGDBus.header.count == fromGDBus.need { outgoingHeaderRead() }
            }
        }
    }

    /// Queues the held replies, if GDBus's stream is between messages.
    private func releaseHeldReplies() {
        guard atMessageEnd else { return }
        for r in heldReplies { toBus.append(r, fds: [], wipe: true) }
        heldReplies = []
        heldReplyBytes = 0
    }

    /// A header of vaultd's own read (its fixed start, or all of it): a reply ends the count
    /// of the call it answers.
    private func outgoingHeaderRead() {
        let acc = fromGDBus.header
        guard let (headerLength, bodyLength) = BusHeader.lengths(acc[...]) else {
            // Not followed any further (GDBus writes only messages): nothing more is counted
            // off, and counted calls expire.
            fromGDBus.skip = Int.max
            return
        }
        if acc.count < headerLength && headerLength <= BusHeader.maximumHeader {
            fromGDBus.need = headerLength
            return
        }
        if acc.count == headerLength, let h = BusHeader(acc),
            h.type == BusHeader.MessageType.methodReturn.rawValue
                || h.type == BusHeader.MessageType.error.rawValue,
            let serial = h.uint32(.replySerial), let destination = h.string(.destination)
        {
            answered(CallKey(sender: destination, serial: serial))
            responder.withLock({ $0 })?.replied(to: destination, serial: serial)
        }
        fromGDBus.skip = headerLength - acc.count + bodyLength
        fromGDBus.header.removeAll(keepingCapacity: true)
        fromGDBus.need = BusHeader.fixedSize
    }
}

/// Bytes (with the descriptors that go with them) waiting to be written to one side.
private struct Outbox {
    /// `wipe`: the bytes may hold a secret (a reply of the relay's own), and are zeroed once
    /// written or dropped; such a chunk is never merged with another.
    private var chunks: [(bytes: [UInt8], fds: [Int32], wipe: Bool)] = []
    private var offset = 0
    private(set) var bytes = 0

    var isEmpty: Bool { chunks.isEmpty }

    /// Queues `b` (not empty when `fds` is not: a descriptor goes with a byte).
    mutating func append(_ b: [UInt8], fds: [Int32], wipe: Bool = false) {
        guard !b.isEmpty else { return }
        if wipe || !fds.isEmpty || chunks.isEmpty || !chunks[chunks.count - 1].fds.isEmpty
            || chunks[chunks.count - 1].wipe
            || chunks[chunks.count - 1].bytes.count >= BusRelay.chunk
        {
            chunks.append((b, fds, wipe))
        } else {
            chunks[chunks.count - 1].bytes += b
        }
        bytes += b.count
    }

    /// Writes what `fd` takes now; false when it failed (not merely full).
    mutating func flush(to fd: Int32) -> Bool {
        while let first = chunks.first {
            let n: Int
            do {
                n = try first.bytes.withUnsafeBytes { b in
                    try first.fds.withUnsafeBufferPointer { f in
                        try retryingOnInterrupt("sendmsg") {
                            vault_send_fds(
                                fd, b.baseAddress.map { $0 + offset }, b.count - offset,
                                f.baseAddress, Int32(f.count))
                        }
                    }
                }
            } catch let e as Errno {
                return e.code == Errno.wouldBlock
            } catch { return false }
            // The descriptors went with the first byte sent: sent once, then closed here.
            for d in first.fds { SystemCall.close(d) }
            chunks[0].fds = []
            offset += n
            bytes -= n
            if offset == first.bytes.count {
                if first.wipe { wipe(&chunks[0].bytes) }
                chunks.removeFirst()
                offset = 0
            }
        }
        return true
    }

    /// Closes the descriptors never sent, and zeroes what is to be.
    mutating func discard() {
        for i in chunks.indices {
            for d in chunks[i].fds { SystemCall.close(d) }
            if chunks[i].wipe { wipe(&chunks[i].bytes) }
        }
        chunks = []
    }
}

/// Zeroes `bytes` in place (`explicit_bzero`: not removed as a dead store).
func wipe(_ bytes: inout [UInt8]) {
    bytes.withUnsafeMutableBytes { b in
        if let p = b.baseAddress { explicit_bzero(p, b.count) }
    }
}
