import Foundation
import VaultCore
import VaultProtocol

#if canImport(Glibc)
import Glibc
#endif

/// What polkit's `unix-process` subject needs besides the pid: the process's start time.
enum ProcessStartTime {
    /// Field 22 of `/proc/PID/stat` (`starttime`: clock ticks after boot, proc(5)), nil when
    /// the file cannot be read or parsed (the process exited). The second field, the command
    /// name, is in parentheses and may hold spaces and parentheses itself: the fields after
    /// it are counted from its last `)`. At most 4 KiB is read (the file is about 300 bytes).
    static func of(pid: pid_t) -> UInt64? {
        guard let bytes = try? Array(FileDescriptor.readFile("/proc/\(pid)/stat", limit: 4096)),
            let close = bytes.lastIndex(of: UInt8(ascii: ")"))
        else { return nil }
        // After ") ": field 3 (state) onwards; starttime is field 22, the 20th of these.
        let rest = bytes[bytes.index(after: close)...].split(separator: UInt8(ascii: " "))
        guard rest.count >= 20 else { return nil }
        return UInt64(String(decoding: rest[19], as: UTF8.self))
    }

    /// The process `peer` names, for the presence check (`VaultSession.requested(by:)`); nil
    /// when its start time cannot be read. `mayWait`: whether the thread that serves it may
    /// wait for the user (a varlink connection's own thread) or not (the bus's threads).
    static func requestingProcess(_ peer: PeerCredentials, mayWait: Bool) -> RequestingProcess? {
        guard let start = of(pid: peer.pid) else { return nil }
        return RequestingProcess(
            pid: peer.pid, startTime: start, uid: peer.uid, mayWait: mayWait)
    }
}
