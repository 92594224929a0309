/* A libsecret client as apps write them (the password API with a schema): stores, looks up
 * and clears a password, printing what it got. SecretServiceTests compiles it with
 * `cc $(pkg-config --cflags --libs libsecret-1)` and runs it against vaultd. The password
 * comes from stdin for `store`; output: `stored`, the password, `cleared`, or `error: ...`. */
#include <libsecret/secret.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const SecretSchema schema = {
    "org.example.Password", SECRET_SCHEMA_NONE,
    {{"server", SECRET_SCHEMA_ATTRIBUTE_STRING}, {"port", SECRET_SCHEMA_ATTRIBUTE_INTEGER}, {NULL, 0}},
};

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: password-client store|lookup|clear SERVER PORT\n");
        return 64;
    }
    GError *error = NULL;
    int port = atoi(argv[3]);
    if (strcmp(argv[1], "store") == 0) {
        char password[4096];
        size_t n = fread(password, 1, sizeof password - 1, stdin);
        password[n] = 0;
        gboolean ok = secret_password_store_sync(&schema, SECRET_COLLECTION_DEFAULT, "example password", password, NULL, &error,
                                                 "server", argv[2], "port", port, NULL);
        if (!ok) { printf("error: %s\n", error ? error->message : "?"); return 1; }
        printf("stored\n");
    } else if (strcmp(argv[1], "lookup") == 0) {
        gchar *password = secret_password_lookup_sync(&schema, NULL, &error, "server", argv[2], "port", port, NULL);
        if (error) { printf("error: %s\n", error->message); return 1; }
        if (!password) { printf("none\n"); return 1; }
        printf("%s\n", password);
        secret_password_free(password);
    } else {
        gboolean ok = secret_password_clear_sync(&schema, NULL, &error, "server", argv[2], "port", port, NULL);
        if (error) { printf("error: %s\n", error->message); return 1; }
        printf(ok ? "cleared\n" : "none\n");
    }
    return 0;
}
