#if canImport(Glibc)
import Glibc
#endif

/// A failed system call: its errno and the call's name. Every call of the syscall layer
/// (`SystemCall`, `FileDescriptor`) throws this, after `retryingOnInterrupt`.
public struct Errno: Error, Equatable, CustomStringConvertible, Sendable {
    public var code: Int32
    /// The call that failed, e.g. "connect".
    public var call: String
    public var description: String { "\(call): \(String(cString: strerror(code)))" }

    public init(code: Int32, call: String) {
        self.code = code
        self.call = call
    }
}

/// The errno values the tree tells apart, by name (as swift-system's `Errno`), for
/// `e.code == Errno.noSpace` and `Errno(code: Errno.timedOut, call: "send")`.
extension Errno {
    /// EINTR: a signal arrived during the call (`retryingOnInterrupt` makes it again).
    public static let interrupted = EINTR
    /// EBADF: not an open descriptor, or not open for that (trapped; see `retryingOnInterrupt`).
    public static let badFileDescriptor = EBADF
    /// EAGAIN (= EWOULDBLOCK): a non-blocking call found nothing to do, or a timeout expired.
    public static let wouldBlock = EAGAIN
    /// ENOENT.
    public static let notFound = ENOENT
    /// EEXIST.
    public static let exists = EEXIST
    /// ENOSPC.
    public static let noSpace = ENOSPC
    /// EDQUOT.
    public static let quotaExceeded = EDQUOT
    /// EFBIG: also what the layer's bounded reads throw past their limit.
    public static let tooLarge = EFBIG
    /// EACCES.
    public static let permissionDenied = EACCES
    /// EPERM.
    public static let notPermitted = EPERM
    /// EIO.
    public static let ioError = EIO
    /// ETIMEDOUT.
    public static let timedOut = ETIMEDOUT
    /// ENAMETOOLONG.
    public static let nameTooLong = ENAMETOOLONG
    /// ENOTDIR.
    public static let notDirectory = ENOTDIR
    /// EISDIR.
    public static let isDirectory = EISDIR
    /// ENOTEMPTY.
    public static let notEmpty = ENOTEMPTY
    /// ECONNREFUSED.
    public static let connectionRefused = ECONNREFUSED
    /// ESRCH.
    public static let noSuchProcess = ESRCH
    /// EMFILE.
    public static let tooManyOpenFiles = EMFILE
    /// ENFILE.
    public static let tooManyOpenFilesInSystem = ENFILE
    /// ENOBUFS.
    public static let noBufferSpace = ENOBUFS
    /// ENOMEM.
    public static let noMemory = ENOMEM
}

/// Makes the system call `body` (which returns -1 and sets errno on failure, as most do),
/// again for as long as it fails with EINTR; any other failure throws `Errno` (`call`).
/// Every call of the layer goes through here (as swift-system's `valueOrErrno`).
///
/// EBADF traps: a descriptor the program opened itself and is not open is a bug (used after
/// its close, or closed twice), never an input, and going on could read or write whatever
/// file later got its number. `inherited`: the descriptor came from outside (stdin, an
/// fd a user named with an option), where EBADF is the user's mistake to report.
@discardableResult
public func retryingOnInterrupt<T: BinaryInteger>(
    _ call: String, inherited: Bool = false, _ body: () -> T
) throws(Errno) -> T {
    while true {
        let r = body()
        if r >= 0 { return r }
        let code = errno
        if code == EINTR { continue }
        if code == EBADF && !inherited { badDescriptor(call) }
        throw Errno(code: code, call: call)
    }
}

/// The trap of `retryingOnInterrupt` and `SystemCall.close`.
func badDescriptor(_ call: String) -> Never {
    preconditionFailure("\(call): EBADF, a descriptor that is not open (a bug: used after close?)")
}
