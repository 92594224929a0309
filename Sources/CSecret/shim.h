#include <libsecret/secret.h>

// Helpers for what Swift cannot call directly: GLib macros, string-keyed hash tables,
// static schemas and GList iteration. Every function here is tiny and owns nothing.

/// A new attribute table (string keys and values, both owned by the table).
static inline GHashTable *vk_attributes_new(void) {
    return g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
}

/// Inserts copies of `key` and `value`.
static inline void vk_attributes_insert(GHashTable *table, const char *key, const char *value) {
    g_hash_table_insert(table, g_strdup(key), g_strdup(value));
}

/// Calls `body(key, value, context)` for each entry of a string table.
static inline void vk_attributes_each(GHashTable *table, void (*body)(const char *, const char *, void *), void *context) {
    GHashTableIter it;
    gpointer k, v;
    g_hash_table_iter_init(&it, table);
    while (g_hash_table_iter_next(&it, &k, &v)) body((const char *)k, (const char *)v, context);
}

/// The element count of a list, and its n-th element's data.
static inline guint vk_list_length(GList *list) { return g_list_length(list); }
static inline gpointer vk_list_nth(GList *list, guint n) { return g_list_nth_data(list, n); }

/// Frees a list and unrefs every GObject in it.
static inline void vk_list_free_objects(GList *list) { g_list_free_full(list, g_object_unref); }

/// Frees a list without touching its elements.
static inline void vk_list_free(GList *list) { g_list_free(list); }

/// A one-element list (for secret_service_unlock_sync); free with vk_list_free.
static inline GList *vk_list_single(gpointer object) { return g_list_append(NULL, object); }

static inline void vk_object_unref(gpointer object) { if (object) g_object_unref(object); }

/// The D-Bus object path of a collection or item.
static inline const char *vk_object_path(gpointer proxy) { return g_dbus_proxy_get_object_path(G_DBUS_PROXY(proxy)); }

/// vaultd's remembered unlock secret: one per data directory.
static inline const SecretSchema *vk_unlock_schema(void) {
    static const SecretSchema schema = {
        "io.vaultd.Unlock", SECRET_SCHEMA_NONE,
        {
            {"vault", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {NULL, 0},
        },
    };
    return &schema;
}

/// Vault items exported to the keyring: the item's class and primary key.
static inline const SecretSchema *vk_item_schema(void) {
    static const SecretSchema schema = {
        "io.vaultd.Item", SECRET_SCHEMA_NONE,
        {
            {"class", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"access-group", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"synchronizable", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"service", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"account", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"server", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"protocol", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"port", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"path", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"authentication-type", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {"security-domain", SECRET_SCHEMA_ATTRIBUTE_STRING},
            {NULL, 0},
        },
    };
    return &schema;
}

static inline const char *vk_error_message(GError *error) { return error && error->message ? error->message : "unknown error"; }
static inline int vk_error_is_cancelled(GError *error) {
    return error && g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED);
}
