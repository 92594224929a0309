#include <gcrypt.h>

// What Swift cannot call directly: gcry_control is variadic.

/// Initialises libgcrypt once for this process (a version check, then "initialization
/// finished"), unless something else in the process (libsecret) did. Returns 1 when usable.
static inline int cg_gcrypt_init(void) {
    if (gcry_control(GCRYCTL_INITIALIZATION_FINISHED_P)) return 1;
    if (!gcry_check_version(GCRYPT_VERSION)) return 0;
    gcry_control(GCRYCTL_DISABLE_SECMEM, 0);
    gcry_control(GCRYCTL_INITIALIZATION_FINISHED, 0);
    return 1;
}
