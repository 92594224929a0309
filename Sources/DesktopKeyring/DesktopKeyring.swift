import CSecret
import Foundation
import VaultProtocol

/// A failure talking to the desktop keyring (Secret Service through libsecret). The message
/// is libsecret's or ours; it never contains a secret.
public struct KeyringError: Error, CustomStringConvertible, Sendable {
    public enum Kind: Sendable {
        /// No session bus, or no Secret Service on it.
        case unavailable
        /// The collection (or item) is locked and was not, or could not be, unlocked.
        case locked
        /// No such collection.
        case notFound
        /// The call ran past its deadline and was cancelled.
        case timedOut
        case failed
    }
    public var kind: Kind
    public var message: String
    public var description: String { message }

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }
}

/// One item read from the keyring.
public struct KeyringItem: Sendable {
    /// The D-Bus object path (stable for the item's life).
    public var path: String
    public var label: String
    /// The `xdg:schema` attribute, when the writer set one.
    public var schema: String?
    /// Every attribute, `xdg:schema` included. Keyed by bytes, as the keyring keys them: two
    /// names differing only in Unicode normalisation are two attributes.
    public var attributes: ExactDictionary<String>
    /// The secret bytes; nil when the item stayed locked.
    public var secret: [UInt8]?
    public var contentType: String?
    public var isLocked: Bool
    /// Seconds since 1970.
    public var modified: UInt64

    /// An item read elsewhere than through the Secret Service (vaultctl's import of a keyring
    /// file, a KeePassXC database, a password store), in the same shape.
    public init(
        path: String, label: String, schema: String?, attributes: ExactDictionary<String>,
        secret: [UInt8]?, contentType: String?, isLocked: Bool, modified: UInt64
    ) {
        self.path = path
        self.label = label
        self.schema = schema
        self.attributes = attributes
        self.secret = secret
        self.contentType = contentType
        self.isLocked = isLocked
        self.modified = modified
    }
}

/// A collection of the keyring ("Login", alias "default").
public struct KeyringCollection: Sendable {
    public var path: String
    public var label: String
    public var isLocked: Bool

    /// Whether `item` is one of this collection's: an item's object path is its collection's
    /// path and one more element (Secret Service API, "Object Paths").
    public func holds(_ item: KeyringItem) -> Bool { item.path.hasPrefix(path + "/") }
}

/// The schemas vaultd writes, declared in CSecret's shim.
public enum KeyringSchema: Sendable {
    /// `io.vaultd.Unlock`: the vault passphrase, attribute `vault` = the data directory.
    case unlock
    /// `io.vaultd.Item`: an exported vault item, attributes = its class and primary key.
    case item

    public var name: String { self == .unlock ? "io.vaultd.Unlock" : "io.vaultd.Item" }

    var pointer: UnsafePointer<SecretSchema> {
        self == .unlock ? vk_unlock_schema() : vk_item_schema()
    }
}

/// The desktop keyring through libsecret's synchronous calls. Each call may be bounded by a
/// deadline (a GCancellable cancelled by a timer), so no caller waits for ever on D-Bus or on
/// an unlock prompt. Not tied to a thread; every C handle is released before a call returns.
/// `@unchecked Sendable` without a lock: its only state is `service`, libsecret's
/// `SecretService` proxy, which never changes and is a thread-safe GObject (a pointer is not
/// `Sendable`).
public final class DesktopKeyring: @unchecked Sendable {
    /// How long one call may take before it is cancelled (nil: no limit).
    public let timeout: Double?
    private let service: UnsafeMutablePointer<SecretService>

    /// Whether a session bus can be reached at all without autolaunching one: a
    /// `DBUS_SESSION_BUS_ADDRESS`, or the systemd user bus at `$XDG_RUNTIME_DIR/bus`.
    public static func sessionBusConfigured(
        _ env: [String: String] = ProcessInfo.processInfo.environment
    ) -> Bool {
        if let a = env["DBUS_SESSION_BUS_ADDRESS"], !a.isEmpty { return true }
        if let run = env["XDG_RUNTIME_DIR"], !run.isEmpty {
            let type =
                (try? FileManager.default.attributesOfItem(atPath: run + "/bus"))?[.type]
                as? FileAttributeType
            return type == .typeSocket
        }
        return false
    }

    /// Connects to the Secret Service on the session bus. Throws `.unavailable` when there is
    /// no bus (libsecret is never allowed to autolaunch one) or no service on it.
    public init(timeout: Double? = 10) throws {
        guard Self.sessionBusConfigured() else {
            let run = ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"].flatMap {
                $0.isEmpty ? nil : $0
            }
            let user = run.map { "\($0)/bus does not exist" } ?? "XDG_RUNTIME_DIR is not set either"
            throw KeyringError(
                .unavailable, "no session bus (DBUS_SESSION_BUS_ADDRESS is not set and \(user))")
        }
        self.timeout = timeout
        let s: UnsafeMutablePointer<SecretService>? = try Self.call(
            timeout: timeout, kind: .unavailable, what: "cannot reach the Secret Service"
        ) { c, e in
            secret_service_get_sync(SECRET_SERVICE_OPEN_SESSION, c, e)
        }
        guard let s else { throw KeyringError(.unavailable, "cannot reach the Secret Service") }
        service = s
    }

    deinit { vk_object_unref(service) }

    // MARK: calls with a deadline

    /// Runs `body` with a cancellable that a timer cancels after `timeout`; turns its GError
    /// into a `KeyringError` (freeing it). The body's result is returned as is.
    static func call<T>(
        timeout: Double?, kind: KeyringError.Kind = .failed, what: String,
        _ body: (
            UnsafeMutablePointer<GCancellable>?, UnsafeMutablePointer<UnsafeMutablePointer<GError>?>
        ) -> T
    ) throws -> T {
        let cancellable = g_cancellable_new()
        defer { vk_object_unref(cancellable) }
        var timer: DispatchSourceTimer?
        if let timeout, let cancellable {
            let box = CancellableBox(cancellable)
            let t = DispatchSource.makeTimerSource(queue: DispatchQueue.global())
            t.schedule(deadline: .now() + timeout)
            t.setEventHandler { box.cancel() }
            t.resume()
            timer = t
        }
        var error: UnsafeMutablePointer<GError>?
        let result = body(cancellable, &error)
        timer?.cancel()
        if let error {
            defer { g_error_free(error) }
            if vk_error_is_cancelled(error) != 0 {
                throw KeyringError(.timedOut, "\(what): no answer within \(Int(timeout ?? 0)) s")
            }
            throw KeyringError(kind, "\(what): \(String(cString: vk_error_message(error)))")
        }
        return result
    }

    /// Holds a reference on the cancellable until the timer is done with it.
    /// `@unchecked Sendable`: `pointer` never changes, and GLib's GCancellable may be cancelled
    /// from any thread.
    private final class CancellableBox: @unchecked Sendable {
        let pointer: UnsafeMutablePointer<GCancellable>
        init(_ p: UnsafeMutablePointer<GCancellable>) {
            pointer = p
            g_object_ref(p)
        }
        func cancel() { g_cancellable_cancel(pointer) }
        deinit { vk_object_unref(pointer) }
    }

    // MARK: collections

    /// The collections, loaded.
    public func collections() throws -> [KeyringCollection] {
        _ = try Self.call(timeout: timeout, what: "cannot list the keyring's collections") { c, e in
            secret_service_load_collections_sync(service, c, e)
        }
        let list = secret_service_get_collections(service)
        defer { vk_list_free_objects(list) }
        return (0..<vk_list_length(list)).compactMap { i in
            guard let p = vk_list_nth(list, i) else { return nil }
            return Self.describe(p.assumingMemoryBound(to: SecretCollection.self))
        }
    }

    private static func describe(_ c: UnsafeMutablePointer<SecretCollection>) -> KeyringCollection {
        KeyringCollection(
            path: String(cString: vk_object_path(c)),
            label: Self.takeString(secret_collection_get_label(c)) ?? "",
            isLocked: secret_collection_get_locked(c) != 0)
    }

    /// Finds a collection by alias ("default", "login", "session"), label or object path;
    /// nil `name` is the default collection. Throws `.notFound`.
    public func collection(named name: String?) throws -> KeyringCollection {
        let owned = try openCollection(name)
        defer { vk_object_unref(owned) }
        return Self.describe(owned)
    }

    /// The collection as an owned GObject reference (the caller unrefs it).
    private func openCollection(_ name: String?) throws -> UnsafeMutablePointer<SecretCollection> {
        let alias = name ?? "default"
        if !alias.hasPrefix("/") {
            let byAlias: UnsafeMutablePointer<SecretCollection>? = try Self.call(
                timeout: timeout, what: "cannot look up collection '\(alias)'"
            ) { c, e in
                secret_collection_for_alias_sync(service, alias, SECRET_COLLECTION_LOAD_ITEMS, c, e)
            }
            if let byAlias { return byAlias }
        }
        _ = try Self.call(timeout: timeout, what: "cannot list the keyring's collections") { c, e in
            secret_service_load_collections_sync(service, c, e)
        }
        let list = secret_service_get_collections(service)
        defer { vk_list_free_objects(list) }
        for i in 0..<vk_list_length(list) {
            guard let p = vk_list_nth(list, i) else { continue }
            let c = p.assumingMemoryBound(to: SecretCollection.self)
            let path = String(cString: vk_object_path(c))
            let label = Self.takeString(secret_collection_get_label(c)) ?? ""
            // Byte for byte, as the keyring's names are: a label differing from the one asked
            // for only in Unicode normalisation is another collection.
            if path.sameBytes(alias) || label.sameBytes(alias) {
                _ = try Self.call(timeout: timeout, what: "cannot load collection '\(alias)'") {
                    cc, e in
                    secret_collection_load_items_sync(c, cc, e)
                }
                g_object_ref(c)  // ours now; the list's reference goes with the list
                return c
            }
        }
        throw KeyringError(
            .notFound,
            name == nil
                ? "the keyring has no default collection"
                : "no collection '\(alias)' in the keyring (give an alias, a label or an object path)"
        )
    }

    // MARK: reading items

    /// Every item of a collection, with its secret. A locked collection is unlocked first
    /// when `unlock` is true (libsecret may show a prompt; without a prompter it fails);
    /// a collection that stays locked throws `.locked` — items are never silently skipped.
    public func items(inCollection name: String?, unlock: Bool) throws -> (
        KeyringCollection, [KeyringItem]
    ) {
        let collection = try openCollection(name)
        defer { vk_object_unref(collection) }
        var info = Self.describe(collection)
        if info.isLocked {
            guard unlock else {
                throw KeyringError(.locked, "collection '\(info.label)' is locked")
            }
            try unlockObject(collection, what: "collection '\(info.label)'")
            info = Self.describe(collection)
            if info.isLocked {
                throw KeyringError(
                    .locked, "collection '\(info.label)' is locked and was not unlocked")
            }
            _ = try Self.call(timeout: timeout, what: "cannot load collection '\(info.label)'") {
                c, e in
                secret_collection_load_items_sync(collection, c, e)
            }
        }
        let list = secret_collection_get_items(collection)
        defer { vk_list_free_objects(list) }
        var out: [KeyringItem] = []
        for i in 0..<vk_list_length(list) {
            guard let p = vk_list_nth(list, i) else { continue }
            let item = p.assumingMemoryBound(to: SecretItem.self)
            if secret_item_get_locked(item) != 0 {
                guard unlock else {
                    throw KeyringError(.locked, "an item of collection '\(info.label)' is locked")
                }
                try unlockObject(item, what: "an item of collection '\(info.label)'")
                if secret_item_get_locked(item) != 0 {
                    throw KeyringError(
                        .locked,
                        "an item of collection '\(info.label)' is locked and was not unlocked")
                }
            }
            _ = try Self.call(
                timeout: timeout, what: "cannot read a secret of collection '\(info.label)'"
            ) { c, e in
                secret_item_load_secret_sync(item, c, e)
            }
            out.append(Self.read(item))
        }
        return (info, out)
    }

    private func unlockObject(_ object: UnsafeMutableRawPointer, what: String) throws {
        let list = vk_list_single(object)
        defer { vk_list_free(list) }
        var unlocked: UnsafeMutablePointer<GList>?
        let n = try Self.call(timeout: timeout, kind: .locked, what: "cannot unlock \(what)") {
            c, e in
            secret_service_unlock_sync(service, list, c, &unlocked, e)
        }
        vk_list_free_objects(unlocked)
        if n <= 0 {
            throw KeyringError(
                .locked, "\(what) is locked and unlocking it was refused or dismissed")
        }
    }

    private static func read(_ item: UnsafeMutablePointer<SecretItem>) -> KeyringItem {
        var secret: [UInt8]?
        var contentType: String?
        if let value = secret_item_get_secret(item) {
            defer { secret_value_unref(UnsafeMutableRawPointer(value)) }
            secret = bytes(of: value)
            if let t = secret_value_get_content_type(value) { contentType = String(cString: t) }
        }
        var attributes: ExactDictionary<String> = [:]
        if let table = secret_item_get_attributes(item) {
            attributes = dictionary(table)
            g_hash_table_unref(table)
        }
        return KeyringItem(
            path: String(cString: vk_object_path(item)),
            label: takeString(secret_item_get_label(item)) ?? "",
            schema: attributes["xdg:schema"] ?? takeString(secret_item_get_schema_name(item)),
            attributes: attributes, secret: secret,
            contentType: contentType, isLocked: secret_item_get_locked(item) != 0,
            modified: UInt64(secret_item_get_modified(item)))
    }

    /// Searches every collection for items of `schema` with `attributes`, loading secrets of
    /// unlocked items when `loadSecrets` (else every `secret` is nil: a search that only asks
    /// what is there keeps secrets out of this process). It never unlocks (so it never
    /// prompts): locked matches come back with `secret` nil and `isLocked` true.
    public func search(
        _ schema: KeyringSchema, _ attributes: [String: String], loadSecrets: Bool = true
    ) throws -> [KeyringItem] {
        try search(schema.pointer, attributes, loadSecrets: loadSecrets)
    }

    /// Searches every collection for items with exactly these attributes (no schema: the
    /// attributes, `xdg:schema` among them when given, are matched as they are), as `search`
    /// loads and never unlocks.
    public func search(attributes: [String: String], loadSecrets: Bool = true) throws
        -> [KeyringItem]
    {
        try search(nil, attributes, loadSecrets: loadSecrets)
    }

    /// `search`, with `schema` (nil: none).
    private func search(
        _ schema: UnsafePointer<SecretSchema>?, _ attributes: [String: String], loadSecrets: Bool
    ) throws -> [KeyringItem] {
        let table = Self.table(attributes)
        defer { g_hash_table_unref(table) }
        let flags = SecretSearchFlags(
            rawValue: SECRET_SEARCH_ALL.rawValue
                | (loadSecrets ? SECRET_SEARCH_LOAD_SECRETS.rawValue : 0))
        let list: UnsafeMutablePointer<GList>? = try Self.call(
            timeout: timeout, what: "cannot search the keyring"
        ) { c, e in
            secret_service_search_sync(service, schema, table, flags, c, e)
        }
        defer { vk_list_free_objects(list) }
        return (0..<vk_list_length(list)).compactMap { i in
            vk_list_nth(list, i).map { Self.read($0.assumingMemoryBound(to: SecretItem.self)) }
        }
    }

    /// Stores (or replaces the item with exactly these attributes in `collection`) a secret
    /// under attributes given as they are, `xdg:schema` included: how an item another program
    /// wrote (secret-tool, python keyring, git's libsecret helper) is written back so that
    /// program finds it. A NUL byte in a name or value is refused: libsecret would cut the
    /// string there and merge distinct items into one.
    public func store(
        attributes: [String: String], label: String, secret: [UInt8], collection: String? = nil
    ) throws {
        if let bad = attributes.first(where: {
            $0.key.utf8.contains(0) || $0.value.utf8.contains(0)
        }) {
            throw KeyringError(
                .failed,
                "attribute '\(bad.key.replacingOccurrences(of: "\u{0}", with: "\\0"))' holds a NUL byte, which the Secret Service cannot carry"
            )
        }
        let table = Self.table(attributes)
        defer { g_hash_table_unref(table) }
        let value = (secret + [0]).withUnsafeBufferPointer { b in
            b.withMemoryRebound(to: CChar.self) { c in
                secret_value_new(c.baseAddress!, gssize(secret.count), Self.contentType(of: secret))
            }
        }
        defer { secret_value_unref(UnsafeMutableRawPointer(value)) }
        let ok = try Self.call(timeout: timeout, kind: .failed, what: "cannot store in the keyring")
        { c, e in
            secret_service_store_sync(service, nil, table, collection, label, value, c, e)
        }
        if ok == 0 { throw KeyringError(.failed, "cannot store in the keyring") }
    }

    // MARK: passwords by schema

    /// The content type a secret is stored with: `text/plain` when it is text as libsecret
    /// tells text from binary (`g_utf8_validate` over its length: valid UTF-8 without NUL
    /// bytes; a text/plain secret is what `secret_password_lookup` hands out as a C string),
    /// else `application/octet-stream`.
    public static func contentType(of secret: [UInt8]) -> String {
        let text =
            secret.isEmpty
            || secret.withUnsafeBufferPointer { b in
                b.withMemoryRebound(to: CChar.self) { c in
                    g_utf8_validate(c.baseAddress, gssize(c.count), nil) != 0
                }
            }
        return text ? "text/plain" : "application/octet-stream"
    }

    /// Stores (or replaces) the secret with exactly these attributes, as `contentType` (nil:
    /// `contentType(of:)`). `collection` is an alias ("default", "login") or an object path
    /// (`KeyringCollection.path`); nil is the default collection.
    public func store(
        _ schema: KeyringSchema, _ attributes: [String: String], label: String, secret: [UInt8],
        contentType: String? = nil, collection: String? = nil
    ) throws {
        let path = collection
        let table = Self.table(attributes)
        defer { g_hash_table_unref(table) }
        let type = contentType ?? Self.contentType(of: secret)
        let value = (secret + [0]).withUnsafeBufferPointer { b in
            b.withMemoryRebound(to: CChar.self) { c in
                secret_value_new(c.baseAddress!, gssize(secret.count), type)
            }
        }
        defer { secret_value_unref(UnsafeMutableRawPointer(value)) }
        let ok = try Self.call(timeout: timeout, kind: .failed, what: "cannot store in the keyring")
        { c, e in
            secret_password_storev_binary_sync(schema.pointer, table, path, label, value, c, e)
        }
        if ok == 0 { throw KeyringError(.failed, "cannot store in the keyring") }
    }

    /// The secret stored with these attributes (unlocking as libsecret does), or nil.
    public func lookup(_ schema: KeyringSchema, _ attributes: [String: String]) throws -> [UInt8]? {
        let table = Self.table(attributes)
        defer { g_hash_table_unref(table) }
        let value = try Self.call(
            timeout: timeout, kind: .failed, what: "cannot look up in the keyring"
        ) { c, e in
            secret_password_lookupv_binary_sync(schema.pointer, table, c, e)
        }
        guard let value else { return nil }
        defer { secret_value_unref(UnsafeMutableRawPointer(value)) }
        return Self.bytes(of: value)
    }

    /// Removes every item with these attributes; returns whether any was removed.
    @discardableResult
    public func clear(_ schema: KeyringSchema, _ attributes: [String: String]) throws -> Bool {
        let table = Self.table(attributes)
        defer { g_hash_table_unref(table) }
        return try Self.call(
            timeout: timeout, kind: .failed, what: "cannot remove from the keyring"
        ) { c, e in
            secret_password_clearv_sync(schema.pointer, table, c, e)
        } != 0
    }

    // MARK: C values

    static func table(_ attributes: [String: String]) -> OpaquePointer {
        let t = vk_attributes_new()!
        for (k, v) in attributes { vk_attributes_insert(t, k, v) }
        return t
    }

    private final class DictionaryBox {
        var values: ExactDictionary<String> = [:]
    }

    static func dictionary(_ table: OpaquePointer) -> ExactDictionary<String> {
        let box = DictionaryBox()
        withExtendedLifetime(box) {
            vk_attributes_each(
                table,
                { k, v, ctx in
                    guard let k, let v, let ctx else { return }
                    Unmanaged<DictionaryBox>.fromOpaque(ctx).takeUnretainedValue().values[
                        String(cString: k)] = String(cString: v)
                }, Unmanaged.passUnretained(box).toOpaque())
        }
        return box.values
    }

    static func bytes(of value: OpaquePointer) -> [UInt8] {
        var length: gsize = 0
        guard let p = secret_value_get(value, &length) else { return [] }
        return p.withMemoryRebound(to: UInt8.self, capacity: Int(length)) {
            Array(UnsafeBufferPointer(start: $0, count: Int(length)))
        }
    }

    /// Takes ownership of a g_malloc'd string.
    static func takeString(_ p: UnsafeMutablePointer<gchar>?) -> String? {
        guard let p else { return nil }
        defer { g_free(p) }
        return String(cString: p)
    }
}
