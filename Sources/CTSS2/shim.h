// tpm2-tss (Debian's libtss2-dev): the ESAPI, the TCTI loader (device:, swtpm:, ...), the
// response-code decoder and the marshalling of TPM2B structures.
#include <tss2/tss2_esys.h>
#include <tss2/tss2_tctildr.h>
#include <tss2/tss2_rc.h>
#include <tss2/tss2_mu.h>

// The templates vaultd uses, built here in C because they are nested unions (TPM 2.0 Part 2,
// "Structures"). Both are fixed: the same template under the same owner seed gives the same
// primary key on every start, so only the sealed object is stored.

// The primary key: the TCG's "Storage Root Key" template (TCG TPM v2.0 Provisioning Guidance,
// section 7.5.1, ECC P-256), as systemd-cryptenroll and tpm2-tools' default primary use: a
// restricted decryption key under the owner hierarchy, its private part never leaving the TPM
// (fixedTPM, fixedParent), usable without a password (userWithAuth, empty auth) and exempt
// from dictionary-attack lockout (noDA), with AES-128-CFB for its children's protection.
static inline TPM2B_PUBLIC ctss2_primary_template(void) {
    TPM2B_PUBLIC p = {0};
    p.publicArea.type = TPM2_ALG_ECC;
    p.publicArea.nameAlg = TPM2_ALG_SHA256;
    p.publicArea.objectAttributes = TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT |
        TPMA_OBJECT_SENSITIVEDATAORIGIN | TPMA_OBJECT_USERWITHAUTH | TPMA_OBJECT_NODA |
        TPMA_OBJECT_RESTRICTED | TPMA_OBJECT_DECRYPT;
    p.publicArea.parameters.eccDetail.symmetric.algorithm = TPM2_ALG_AES;
    p.publicArea.parameters.eccDetail.symmetric.keyBits.aes = 128;
    p.publicArea.parameters.eccDetail.symmetric.mode.aes = TPM2_ALG_CFB;
    p.publicArea.parameters.eccDetail.scheme.scheme = TPM2_ALG_NULL;
    p.publicArea.parameters.eccDetail.curveID = TPM2_ECC_NIST_P256;
    p.publicArea.parameters.eccDetail.kdf.scheme = TPM2_ALG_NULL;
    return p;
}

// The sealed object: a keyed-hash object with no scheme holding caller-supplied data (TPM 2.0
// Part 1, "Sealed Data Object"), bound to this TPM and this parent (fixedTPM, fixedParent), no
// password (userWithAuth, empty auth; the file permissions and the TPM itself are the guard)
// and noDA, so a failed attempt never locks the TPM out for other users of it.
static inline TPM2B_PUBLIC ctss2_seal_template(void) {
    TPM2B_PUBLIC p = {0};
    p.publicArea.type = TPM2_ALG_KEYEDHASH;
    p.publicArea.nameAlg = TPM2_ALG_SHA256;
    p.publicArea.objectAttributes = TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT |
        TPMA_OBJECT_USERWITHAUTH | TPMA_OBJECT_NODA;
    p.publicArea.parameters.keyedHashDetail.scheme.scheme = TPM2_ALG_NULL;
    return p;
}

// The symmetric algorithm of the salted HMAC session that encrypts the sealed data between
// vaultd and the TPM (parameter encryption: AES-128-CFB), so a bus or TCTI eavesdropper never
// sees it.
static inline TPMT_SYM_DEF ctss2_session_symmetric(void) {
    TPMT_SYM_DEF s = {0};
    s.algorithm = TPM2_ALG_AES;
    s.keyBits.aes = 128;
    s.mode.aes = TPM2_ALG_CFB;
    return s;
}

// The session's attributes: the first command parameter encrypted (decrypt), the first
// response parameter encrypted (encrypt), the session kept for the next command.
static const TPMA_SESSION ctss2_session_attributes =
    TPMA_SESSION_DECRYPT | TPMA_SESSION_ENCRYPT | TPMA_SESSION_CONTINUESESSION;

static const ESYS_TR ctss2_rh_owner = ESYS_TR_RH_OWNER;
static const ESYS_TR ctss2_tr_none = ESYS_TR_NONE;
static const ESYS_TR ctss2_tr_password = ESYS_TR_PASSWORD;
static const TPM2_SE ctss2_se_hmac = TPM2_SE_HMAC;
static const TPMI_ALG_HASH ctss2_sha256 = TPM2_ALG_SHA256;
