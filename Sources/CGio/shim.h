#include <gio/gio.h>

// Helpers for what Swift cannot call directly: GLib's type macros and the arrays GDBus's
// subtree callbacks hand over to their caller. Every function here is tiny and owns nothing.

/// A GVariant type from its type string, as G_VARIANT_TYPE does.
static inline const GVariantType *cg_type(const char *type_string) { return G_VARIANT_TYPE(type_string); }

/// A NULL-terminated string vector of `n` empty slots (filled with g_strdup; the caller of
/// a subtree's enumerate function frees it with g_strfreev).
static inline gchar **cg_strv_new(guint n) { return g_new0(gchar *, n + 1); }

/// A NULL-terminated array of `n` referenced interface infos, as a subtree's introspect
/// function returns them (its caller unrefs each and frees the array).
static inline GDBusInterfaceInfo **cg_interfaces_new(GDBusInterfaceInfo **infos, guint n) {
    GDBusInterfaceInfo **out = g_new0(GDBusInterfaceInfo *, n + 1);
    for (guint i = 0; i < n; i++) out[i] = g_dbus_interface_info_ref(infos[i]);
    return out;
}

static inline const char *cg_error_message(GError *error) { return error && error->message ? error->message : "unknown error"; }

/// The D-Bus error name a GError stands for (a remote error's own name), or NULL; free with g_free.
static inline gchar *cg_error_dbus_name(GError *error) { return error ? g_dbus_error_get_remote_error(error) : NULL; }
