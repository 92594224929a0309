internal import CSodium
internal import CTSS2
import Foundation
import VaultProtocol

/// Seals and unseals the device key with a TPM 2.0 through tpm2-tss's ESAPI (as
/// systemd-cryptenroll --tpm2-device and systemd-creds do).
///
/// The parent is a primary key under the owner hierarchy made from the TCG's Storage Root Key
/// template (`ctss2_primary_template`) on every call: the same template under the same owner
/// seed gives the same key, so nothing of it is stored, and it is flushed after use. The key is
/// sealed in a keyed-hash object (`ctss2_seal_template`): its public and private parts, the
/// private one encrypted by the primary key inside the TPM, are all that is stored (`Blob`).
/// Only the TPM whose owner seed made the primary key can load it; a TPM cleared since (its
/// owner seed changed) cannot either.
///
/// The key travels between vaultd and the TPM encrypted (a salted HMAC session with parameter
/// encryption, AES-128-CFB), so the bus and the TCTI never carry it in clear.
enum TPMSeal {
    /// The sealed object as stored: a magic line, then the marshalled TPM2B_PUBLIC and
    /// TPM2B_PRIVATE (TPM 2.0 Part 2 marshalling: big-endian sizes before each).
    struct Blob: Equatable {
        static let magic = Array("vaultd tpm2 seal v1\n".utf8)
        /// A TPM2B_PUBLIC and TPM2B_PRIVATE together are below 1 KiB; a larger file is not one.
        static let maximumSize = 4096
        var bytes: [UInt8]
    }

    /// A TPM error: `message` names what failed and the decoded response code
    /// (`Tss2_RC_Decode`), never key material.
    struct Failure: Error, CustomStringConvertible {
        let message: String
        var description: String { message }
    }

    /// Seals `key` (at most 128 bytes, TPM2B_SENSITIVE_DATA) with the TPM `tcti` names.
    static func seal(_ key: SecureBytes, tcti: String) throws -> Blob {
        precondition(key.count <= 128)
        return try withSession(tcti: tcti) { ctx, primary, session in
            var sensitive = TPM2B_SENSITIVE_CREATE()
            defer { sodium_memzero(&sensitive, MemoryLayout<TPM2B_SENSITIVE_CREATE>.size) }
            sensitive.sensitive.data.size = UInt16(key.count)
            withUnsafeMutableBytes(of: &sensitive.sensitive.data.buffer) { dst in
                key.withUnsafeBytes { dst.copyMemory(from: $0) }
            }
            var template = ctss2_seal_template()
            var outside = TPM2B_DATA()
            var pcrs = TPML_PCR_SELECTION()
            var priv: UnsafeMutablePointer<TPM2B_PRIVATE>?
            var pub: UnsafeMutablePointer<TPM2B_PUBLIC>?
            try check(
                Esys_Create(
                    ctx, primary, session, ctss2_tr_none, ctss2_tr_none, &sensitive, &template,
                    &outside, &pcrs, &priv, &pub, nil, nil, nil), "create the sealed object")
            defer {
                Esys_Free(priv)
                Esys_Free(pub)
            }
            guard let priv, let pub else { throw Failure(message: "the TPM returned no object") }
            return try marshal(pub, priv)
        }
    }

    /// Unseals the key in `blob` with the TPM `tcti` names. Throws `Failure` when that TPM is
    /// not there, or cannot load the object (another TPM, or this one cleared since).
    static func unseal(_ blob: Blob, tcti: String) throws -> SecureBytes {
        var (pub, priv) = try unmarshal(blob)
        return try withSession(tcti: tcti) { ctx, primary, session in
            var object = ctss2_tr_none
            try check(
                Esys_Load(
                    ctx, primary, session, ctss2_tr_none, ctss2_tr_none, &priv, &pub, &object),
                "load the sealed device key (is this the TPM that sealed it?)")
            defer { Esys_FlushContext(ctx, object) }
            var out: UnsafeMutablePointer<TPM2B_SENSITIVE_DATA>?
            try check(
                Esys_Unseal(ctx, object, session, ctss2_tr_none, ctss2_tr_none, &out),
                "unseal the device key")
            guard let out else { throw Failure(message: "the TPM returned no data") }
            defer {
                sodium_memzero(out, MemoryLayout<TPM2B_SENSITIVE_DATA>.size)
                Esys_Free(out)
            }
            let n = Int(out.pointee.size)
            // The size is the TPM's word: never past the buffer it came in.
            guard n <= MemoryLayout.size(ofValue: out.pointee.buffer) else {
                throw Failure(message: "the TPM returned a malformed unsealed value")
            }
            let key = SecureBytes(count: n)
            withUnsafeBytes(of: &out.pointee.buffer) { src in
                key.withUnsafeMutableBytes {
                    $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: src[0..<n]))
                }
            }
            return key
        }
    }

    /// Opens the TPM `tcti` names, makes the primary key and a salted, parameter-encrypting
    /// HMAC session bound to nothing, runs `body` with them, and flushes and closes all.
    private static func withSession<T>(
        tcti: String,
        _ body: (OpaquePointer, ESYS_TR, ESYS_TR) throws -> T
    ) throws -> T {
        var tctiContext: OpaquePointer?
        try check(Tss2_TctiLdr_Initialize(tcti, &tctiContext), "open the TPM (\(tcti))")
        defer { Tss2_TctiLdr_Finalize(&tctiContext) }
        var ctxOut: OpaquePointer?
        try check(Esys_Initialize(&ctxOut, tctiContext, nil), "talk to the TPM (\(tcti))")
        guard let ctx = ctxOut else { throw Failure(message: "the TPM (\(tcti)) gave no context") }
        defer { Esys_Finalize(&ctxOut) }
        var template = ctss2_primary_template()
        var sensitive = TPM2B_SENSITIVE_CREATE()
        var outside = TPM2B_DATA()
        var pcrs = TPML_PCR_SELECTION()
        var primary = ctss2_tr_none
        try check(
            Esys_CreatePrimary(
                ctx, ctss2_rh_owner, ctss2_tr_password, ctss2_tr_none, ctss2_tr_none, &sensitive,
                &template, &outside, &pcrs, &primary, nil, nil, nil, nil),
            "make the storage primary key under the owner hierarchy")
        defer { Esys_FlushContext(ctx, primary) }
        var symmetric = ctss2_session_symmetric()
        var session = ctss2_tr_none
        try check(
            Esys_StartAuthSession(
                ctx, primary, ctss2_tr_none, ctss2_tr_none, ctss2_tr_none, ctss2_tr_none, nil,
                ctss2_se_hmac, &symmetric, ctss2_sha256, &session),
            "start an encrypted session")
        defer { Esys_FlushContext(ctx, session) }
        try check(
            Esys_TRSess_SetAttributes(ctx, session, ctss2_session_attributes, 0xff),
            "set the session's attributes")
        return try body(ctx, primary, session)
    }

    private static func check(_ rc: TSS2_RC, _ what: String) throws {
        guard rc != 0 else { return }
        let decoded = Tss2_RC_Decode(rc).map { String(cString: $0) } ?? "0x\(String(rc, radix: 16))"
        throw Failure(message: "the TPM could not \(what): \(decoded)")
    }

    private static func marshal(
        _ pub: UnsafeMutablePointer<TPM2B_PUBLIC>, _ priv: UnsafeMutablePointer<TPM2B_PRIVATE>
    ) throws -> Blob {
        var buffer = [UInt8](repeating: 0, count: Blob.maximumSize)
        var offset = 0
        try buffer.withUnsafeMutableBufferPointer { b in
            let n = b.count
            try check(Tss2_MU_TPM2B_PUBLIC_Marshal(pub, b.baseAddress, n, &offset), "marshal")
            try check(Tss2_MU_TPM2B_PRIVATE_Marshal(priv, b.baseAddress, n, &offset), "marshal")
        }
        return Blob(bytes: Blob.magic + buffer[0..<offset])
    }

    /// Reads the parts of `blob`, which must be exactly the magic, one TPM2B_PUBLIC and one
    /// TPM2B_PRIVATE (anything else is damaged).
    private static func unmarshal(_ blob: Blob) throws -> (TPM2B_PUBLIC, TPM2B_PRIVATE) {
        let damaged = Failure(message: "the sealed device key is damaged")
        guard blob.bytes.count <= Blob.maximumSize, blob.bytes.starts(with: Blob.magic) else {
            throw damaged
        }
        let body = Array(blob.bytes[Blob.magic.count...])
        var pub = TPM2B_PUBLIC()
        var priv = TPM2B_PRIVATE()
        var offset = 0
        let ok = body.withUnsafeBufferPointer { b in
            Tss2_MU_TPM2B_PUBLIC_Unmarshal(b.baseAddress, b.count, &offset, &pub) == 0
                && Tss2_MU_TPM2B_PRIVATE_Unmarshal(b.baseAddress, b.count, &offset, &priv) == 0
                && offset == b.count
        }
        guard ok else { throw damaged }
        return (pub, priv)
    }
}
