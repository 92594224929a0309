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

#include <fcntl.h>
#include <unistd.h>

/// Connects to the D-Bus server at `address` as GDBus would (g_dbus_address_get_stream_sync:
/// every transport GDBus knows, nothing authenticated yet) and returns the connected socket,
/// duplicated (FD_CLOEXEC; the caller owns it), or -1 with `*error` set.
static inline int cg_dbus_address_connect_fd(const char *address, GError **error) {
    GIOStream *stream = g_dbus_address_get_stream_sync(address, NULL, NULL, error);
    if (!stream) return -1;
    int fd = -1;
    if (G_IS_SOCKET_CONNECTION(stream)) {
        GSocket *socket = g_socket_connection_get_socket(G_SOCKET_CONNECTION(stream));
        fd = fcntl(g_socket_get_fd(socket), F_DUPFD_CLOEXEC, 3);
        if (fd < 0) g_set_error(error, G_IO_ERROR, g_io_error_from_errno(errno), "cannot duplicate the bus socket");
    } else {
        g_set_error(error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED, "the bus address gives no socket");
    }
    g_object_unref(stream);
    return fd;
}

/// A GDBusConnection over the connected socket `fd` (which it takes over, and closes in the
/// end), authenticated and set up with `flags` as g_dbus_connection_new_for_address_sync does;
/// NULL with `*error` set (`fd` is closed then too).
static inline GDBusConnection *cg_dbus_connection_new_for_fd(int fd, GDBusConnectionFlags flags, GError **error) {
    GSocket *socket = g_socket_new_from_fd(fd, error);
    if (!socket) {
        close(fd);
        return NULL;
    }
    GSocketConnection *stream = g_socket_connection_factory_create_connection(socket);
    g_object_unref(socket);
    GDBusConnection *connection = g_dbus_connection_new_sync(G_IO_STREAM(stream), NULL, flags, NULL, NULL, error);
    g_object_unref(stream);
    return connection;
}
