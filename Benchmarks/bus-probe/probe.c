/* A bus service answering the same two calls through GDBus or sd-bus, to compare the two
 * libraries (docs/secret-service.md, "Why GDBus"): `probe gdbus|sdbus NAME` owns NAME on
 * the session bus and answers, at /, interface io.vaultd.Probe:
 *   Ping()              -> ()   one round trip, nothing to decode;
 *   Search(a{ss} query) -> (u)  the number of entries, each read in turn (what SearchItems
 *                               does with its attributes).
 * It prints "ready" once it owns NAME. Built by bus-probe.py:
 *   cc -O2 probe.c $(pkg-config --cflags --libs gio-2.0 libsystemd) */
#include <gio/gio.h>
#include <stdio.h>
#include <string.h>
#include <systemd/sd-bus.h>

static const char *xml =
    "<node><interface name='io.vaultd.Probe'>"
    "<method name='Ping'/>"
    "<method name='Search'><arg type='a{ss}' direction='in'/><arg type='u' direction='out'/></method>"
    "</interface></node>";

static void g_call(GDBusConnection *c, const gchar *sender, const gchar *path, const gchar *iface,
                   const gchar *method, GVariant *args, GDBusMethodInvocation *inv, gpointer data) {
    if (strcmp(method, "Search") == 0) {
        GVariant *query = g_variant_get_child_value(args, 0);
        guint32 n = 0;
        GVariantIter it;
        const gchar *k, *v;
        g_variant_iter_init(&it, query);
        while (g_variant_iter_next(&it, "{&s&s}", &k, &v)) n++;
        g_variant_unref(query);
        g_dbus_method_invocation_return_value(inv, g_variant_new("(u)", n));
    } else {
        g_dbus_method_invocation_return_value(inv, NULL);
    }
}

static int run_gdbus(const char *name) {
    GError *err = NULL;
    GDBusConnection *c = g_bus_get_sync(G_BUS_TYPE_SESSION, NULL, &err);
    if (!c) { fprintf(stderr, "%s\n", err->message); return 1; }
    GDBusNodeInfo *info = g_dbus_node_info_new_for_xml(xml, NULL);
    static const GDBusInterfaceVTable vt = {g_call, NULL, NULL, {0}};
    g_dbus_connection_register_object(c, "/", info->interfaces[0], &vt, NULL, NULL, NULL);
    GVariant *r = g_dbus_connection_call_sync(
        c, "org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "RequestName",
        g_variant_new("(su)", name, 4), G_VARIANT_TYPE("(u)"), 0, -1, NULL, &err);
    if (!r) { fprintf(stderr, "%s\n", err->message); return 1; }
    g_variant_unref(r);
    printf("ready\n");
    fflush(stdout);
    g_main_loop_run(g_main_loop_new(NULL, FALSE));
    return 0;
}

static int s_ping(sd_bus_message *m, void *data, sd_bus_error *e) {
    return sd_bus_reply_method_return(m, "");
}

static int s_search(sd_bus_message *m, void *data, sd_bus_error *e) {
    uint32_t n = 0;
    const char *k, *v;
    int r = sd_bus_message_enter_container(m, 'a', "{ss}");
    if (r < 0) return r;
    while ((r = sd_bus_message_read(m, "{ss}", &k, &v)) > 0) n++;
    if (r < 0) return r;
    sd_bus_message_exit_container(m);
    return sd_bus_reply_method_return(m, "u", n);
}

static const sd_bus_vtable vtable[] = {
    SD_BUS_VTABLE_START(0),
    SD_BUS_METHOD("Ping", "", "", s_ping, 0),
    SD_BUS_METHOD("Search", "a{ss}", "u", s_search, 0),
    SD_BUS_VTABLE_END,
};

static int run_sdbus(const char *name) {
    sd_bus *bus = NULL;
    int r = sd_bus_open_user(&bus);
    if (r < 0) { fprintf(stderr, "sd_bus_open_user: %s\n", strerror(-r)); return 1; }
    sd_bus_add_object_vtable(bus, NULL, "/", "io.vaultd.Probe", vtable, NULL);
    r = sd_bus_request_name(bus, name, 0);
    if (r < 0) { fprintf(stderr, "sd_bus_request_name: %s\n", strerror(-r)); return 1; }
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        r = sd_bus_process(bus, NULL);
        if (r < 0) { fprintf(stderr, "sd_bus_process: %s\n", strerror(-r)); return 1; }
        if (r == 0) sd_bus_wait(bus, UINT64_MAX);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: probe gdbus|sdbus NAME\n"); return 2; }
    return strcmp(argv[1], "sdbus") == 0 ? run_sdbus(argv[2]) : run_gdbus(argv[2]);
}
