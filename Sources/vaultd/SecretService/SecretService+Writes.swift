import CGio
import Foundation
import VaultCore
import VaultProtocol

/// Durable writes (CreateItem, SetSecret, Item.Delete, Collection.Delete) are answered off the
/// bus thread. Each returns once its transaction is on disk (`GroupCommit`): on the bus thread
/// every client's write, and every other call, waited behind one fsync at a time, so 16
/// writing clients stored no faster than one. On threads of their own (`WritingThreads`),
/// concurrent writes share a group commit's fsync, and the bus thread goes on answering reads
/// meanwhile.
///
/// The bus relay hands CreateItem, Item.SetSecret and Item.Delete straight to these threads
/// (`answerWriteOnRelay`) when their connection has no other call pending; other writes come
/// from the bus thread (`answerWrite`). At most `maximumWritingCalls` run so at once; a write
/// past that is answered on the bus thread, as before (never refused). A connection's calls
/// are still answered in the order it sent them: those it sends while its write runs wait,
/// and the bus thread runs them once the write is answered (`waitsBehindWrite`); reads
/// answered on the bus relay's thread (`InlineReads.swift`) never overtake a call awaiting
/// its reply.
extension SecretService {
    /// The most durable writes answered off the bus thread at once (each holds a thread).
    static let maximumWritingCalls = 32

    /// Whether `member` of `interface` is a durable write of items (its operation adds,
    /// updates or deletes items): answered off the bus thread (`answerWrite`).
    static func writesDurably(_ interface: String, _ member: String) -> Bool {
        switch SecretServiceOperations.of(interface, member) {
        case .operation(.addItem), .operation(.updateItems), .operation(.deleteItems): true
        default: false
        }
    }

    /// Runs `answer` (a write of `sender`'s) on a thread of `writers`, counted in
    /// `writingCalls`; false, running nothing, when `maximumWritingCalls` run already (the
    /// caller answers on its thread). Bus thread. Until `answer` returns, `sender`'s later
    /// calls wait (`waitsBehindWrite`), then run on the bus thread in the order it sent them.
    func answerWrite(of sender: String, _ answer: @escaping @Sendable () -> Void) -> Bool {
        guard writingCalls.admit(below: Self.maximumWritingCalls) else { return false }
        behindWrites.withLock { $0[sender] = [] }
        writers.run { [self] in
            let changes = HeldChanges.holding(answer)
            writingCalls.withLock { $0 -= 1 }
            // After the reply: the signals of what the write changed, then the connection's
            // calls that waited for it.
            onBusThread(priority: 0) { [self] in
                for change in changes { send(change) }
                runCallsBehindWrite(of: sender)
            }
        }
        return true
    }

    /// Answers durable write `message` (CreateItem, Item.SetSecret, Item.Delete: call `serial`
    /// of identified `sender`, which has no other call awaiting its reply), handed over by the
    /// bus relay, on a thread of `writers`: the reply, numbered `replySerial`, goes back to the
    /// relay (`BusRelay.deliver`), and once it is queued there, the write's signals and the
    /// connection's calls that waited for it go as after `answerWrite`. Meanwhile the connection's later calls go to GDBus, and the bus
    /// thread keeps them until then (`waitsBehindWrite`). `.pass` when `maximumWritingCalls`
    /// run already (GDBus's way then answers it on the bus thread). Relay's thread.
    func answerWriteOnRelay(
        _ message: OpaquePointer, serial: UInt32, sender: String, replySerial: UInt32,
        vaultSession: VaultSession
    ) -> BusAnswer {
        guard let relay,
            let target = SecretServicePath(String(cString: g_dbus_message_get_path(message)!)),
            writingCalls.admit(below: Self.maximumWritingCalls)
        else { return .pass }
        let interface = String(cString: g_dbus_message_get_interface(message)!)
        let member = String(cString: g_dbus_message_get_member(message)!)
        guard Self.writesDurably(interface, member) else {
            writingCalls.withLock { $0 -= 1 }
            return .pass
        }
        _ = inline.withLock { $0.awaitingReply[sender, default: []].insert(serial) }
        behindWrites.withLock { $0[sender] = [] }
        let call = GObjectReference(retaining: message)
        let parameters = Handed(
            g_dbus_message_get_body(message).map { GV(borrowing: $0) } ?? GV.tuple([]))
        writers.run { [self] in
            var reply: [UInt8] = []
            let changes = HeldChanges.holding {
                let out = replyMessage(to: call.raw) {
                    try handleOffBusThread(
                        member, of: interface, on: target, parameters.value, sender: sender,
                        vaultSession: vaultSession)
                }
                reply = replyBytes(out, call.raw, serial: replySerial)
            }
            writingCalls.withLock { $0 -= 1 }
            let held = Handed(changes)
            relay.deliver(reply) { [self] in
                replied(to: sender, serial: serial)
                onBusThread(priority: 0) { [self] in
                    for change in held.value { send(change) }
                    runCallsBehindWrite(of: sender)
                }
            }
        }
        return .taken
    }

    /// Whether `sender` has a write not yet answered: `call` (its next call, which the bus
    /// thread was to answer now) is then kept, to run once that write is answered. Bus thread.
    func waitsBehindWrite(_ sender: String, _ call: @escaping @Sendable () -> Void) -> Bool {
        behindWrites.withLock { waiting -> Bool in
            guard waiting[sender] != nil else { return false }
            waiting[sender]!.append(call)
            return true
        }
    }

    /// After `sender`'s write was answered: its calls kept meanwhile, in order, until one of
    /// them is another write answered off the bus thread (the rest then wait for that one).
    /// Bus thread.
    private func runCallsBehindWrite(of sender: String) {
        var calls = behindWrites.withLock { $0.removeValue(forKey: sender) ?? [] }
        while !calls.isEmpty {
            calls.removeFirst()()
            let rest = calls
            let waitsAgain = behindWrites.withLock { waiting -> Bool in
                guard let later = waiting[sender] else { return false }
                waiting[sender] = rest + later
                return true
            }
            if waitsAgain { return }
        }
    }

    /// `handle` on a write's thread: with the session that does not wait, then, when the
    /// engine needs the user (`waitsForUser`), again on this thread with one that waits,
    /// counted among the calls waiting for the user (`admitWaitingCall`).
    func handleOffBusThread(
        _ method: String, of interface: String, on target: SecretServicePath, _ parameters: GV,
        sender: String, vaultSession: VaultSession
    ) throws -> GV? {
        do {
            return try handle(
                method, of: interface, on: target, parameters, sender: sender,
                vaultSession: vaultSession)
        } catch let e where Self.waitsForUser(e) {
            try admitWaitingCall()
            defer { waitingCalls.withLock { $0 -= 1 } }
            return try handle(
                method, of: interface, on: target, parameters, sender: sender,
                vaultSession: vaultSession.waiting(.wait))
        }
    }
}

/// The changes a write answered on its own thread made (`notify` holds them there), signalled
/// from the bus thread once its reply is sent: as on the bus thread, where a call's signals
/// are sent after its reply, a client hears of an item after the reply that made it.
///
/// `@unchecked Sendable`: `changes` is appended to only on the write's thread, and read
/// there once the write returned (`holding`).
final class HeldChanges: @unchecked Sendable {
    var changes: [SecretService.Change] = []

    /// The holder of each thread running a write, by thread.
    private static let holders = Locked([ObjectIdentifier: HeldChanges]())

    /// The holder of the current thread, while a write runs on it.
    static var current: HeldChanges? {
        let thread = ObjectIdentifier(Thread.current)
        return holders.withLock { $0[thread] }
    }

    /// Runs `write` on this thread holding the changes it makes (`notify`); returns them.
    static func holding(_ write: () -> Void) -> [SecretService.Change] {
        let thread = ObjectIdentifier(Thread.current)
        let held = HeldChanges()
        holders.withLock { $0[thread] = held }
        write()
        holders.withLock { $0[thread] = nil }
        return held.changes
    }
}
