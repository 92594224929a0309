/// The interfaces vaultd serves on the session bus, as the freedesktop Secret Service
/// specification (0.2) declares them. GDBus checks every incoming call's arguments against
/// these signatures before a handler sees it (a wrong signature: InvalidArgs), and answers
/// org.freedesktop.DBus.Introspectable and the Properties calls from them.
enum SecretServiceIntrospection {
    static let service = "org.freedesktop.Secret.Service"
    static let collection = "org.freedesktop.Secret.Collection"
    static let item = "org.freedesktop.Secret.Item"
    static let session = "org.freedesktop.Secret.Session"
    static let prompt = "org.freedesktop.Secret.Prompt"
    /// vaultd's own, on the service's object: a desktop's passphrase dialog registers there.
    static let prompting = "io.vaultd.Secret.Prompting"

    /// The document type GDBus starts its introspection data with.
    static let doctype = """
        <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
                              "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">

        """

    /// The interfaces GDBus adds to every object's introspection data; vaultd writes them
    /// for the objects it dispatches itself (`OwnDispatch.swift`).
    static let standardInterfaces = """
          <interface name="org.freedesktop.DBus.Properties">
            <method name="Get">
              <arg type="s" name="interface_name" direction="in"/>
              <arg type="s" name="property_name" direction="in"/>
              <arg type="v" name="value" direction="out"/>
            </method>
            <method name="GetAll">
              <arg type="s" name="interface_name" direction="in"/>
              <arg type="a{sv}" name="properties" direction="out"/>
            </method>
            <method name="Set">
              <arg type="s" name="interface_name" direction="in"/>
              <arg type="s" name="property_name" direction="in"/>
              <arg type="v" name="value" direction="in"/>
            </method>
            <signal name="PropertiesChanged">
              <arg type="s" name="interface_name"/>
              <arg type="a{sv}" name="changed_properties"/>
              <arg type="as" name="invalidated_properties"/>
            </signal>
          </interface>
          <interface name="org.freedesktop.DBus.Introspectable">
            <method name="Introspect">
              <arg type="s" name="xml_data" direction="out"/>
            </method>
          </interface>
          <interface name="org.freedesktop.DBus.Peer">
            <method name="Ping"/>
            <method name="GetMachineId">
              <arg type="s" name="machine_uuid" direction="out"/>
            </method>
          </interface>

        """

    static let xml = """
        <node>
          <interface name="org.freedesktop.Secret.Service">
            <method name="OpenSession">
              <arg name="algorithm" type="s" direction="in"/>
              <arg name="input" type="v" direction="in"/>
              <arg name="output" type="v" direction="out"/>
              <arg name="result" type="o" direction="out"/>
            </method>
            <method name="CreateCollection">
              <arg name="properties" type="a{sv}" direction="in"/>
              <arg name="alias" type="s" direction="in"/>
              <arg name="collection" type="o" direction="out"/>
              <arg name="prompt" type="o" direction="out"/>
            </method>
            <method name="SearchItems">
              <arg name="attributes" type="a{ss}" direction="in"/>
              <arg name="unlocked" type="ao" direction="out"/>
              <arg name="locked" type="ao" direction="out"/>
            </method>
            <method name="Unlock">
              <arg name="objects" type="ao" direction="in"/>
              <arg name="unlocked" type="ao" direction="out"/>
              <arg name="prompt" type="o" direction="out"/>
            </method>
            <method name="Lock">
              <arg name="objects" type="ao" direction="in"/>
              <arg name="locked" type="ao" direction="out"/>
              <arg name="Prompt" type="o" direction="out"/>
            </method>
            <method name="GetSecrets">
              <arg name="items" type="ao" direction="in"/>
              <arg name="session" type="o" direction="in"/>
              <arg name="secrets" type="a{o(oayays)}" direction="out"/>
            </method>
            <method name="ReadAlias">
              <arg name="name" type="s" direction="in"/>
              <arg name="collection" type="o" direction="out"/>
            </method>
            <method name="SetAlias">
              <arg name="name" type="s" direction="in"/>
              <arg name="collection" type="o" direction="in"/>
            </method>
            <signal name="CollectionCreated"><arg name="collection" type="o"/></signal>
            <signal name="CollectionDeleted"><arg name="collection" type="o"/></signal>
            <signal name="CollectionChanged"><arg name="collection" type="o"/></signal>
            <property name="Collections" type="ao" access="read"/>
          </interface>
          <interface name="io.vaultd.Secret.Prompting">
            <method name="RegisterPrompter">
              <arg name="prompter" type="o" direction="in"/>
            </method>
            <method name="UnregisterPrompter"/>
          </interface>
          <interface name="org.freedesktop.Secret.Collection">
            <method name="Delete">
              <arg name="prompt" type="o" direction="out"/>
            </method>
            <method name="SearchItems">
              <arg name="attributes" type="a{ss}" direction="in"/>
              <arg name="results" type="ao" direction="out"/>
            </method>
            <method name="CreateItem">
              <arg name="properties" type="a{sv}" direction="in"/>
              <arg name="secret" type="(oayays)" direction="in"/>
              <arg name="replace" type="b" direction="in"/>
              <arg name="item" type="o" direction="out"/>
              <arg name="prompt" type="o" direction="out"/>
            </method>
            <signal name="ItemCreated"><arg name="item" type="o"/></signal>
            <signal name="ItemDeleted"><arg name="item" type="o"/></signal>
            <signal name="ItemChanged"><arg name="item" type="o"/></signal>
            <property name="Items" type="ao" access="read"/>
            <property name="Label" type="s" access="readwrite"/>
            <property name="Locked" type="b" access="read"/>
            <property name="Created" type="t" access="read"/>
            <property name="Modified" type="t" access="read"/>
          </interface>
          <interface name="org.freedesktop.Secret.Item">
            <method name="Delete">
              <arg name="Prompt" type="o" direction="out"/>
            </method>
            <method name="GetSecret">
              <arg name="session" type="o" direction="in"/>
              <arg name="secret" type="(oayays)" direction="out"/>
            </method>
            <method name="SetSecret">
              <arg name="secret" type="(oayays)" direction="in"/>
            </method>
            <property name="Locked" type="b" access="read"/>
            <property name="Attributes" type="a{ss}" access="readwrite"/>
            <property name="Label" type="s" access="readwrite"/>
            <property name="Created" type="t" access="read"/>
            <property name="Modified" type="t" access="read"/>
          </interface>
          <interface name="org.freedesktop.Secret.Session">
            <method name="Close"/>
          </interface>
          <interface name="org.freedesktop.Secret.Prompt">
            <method name="Prompt">
              <arg name="window-id" type="s" direction="in"/>
            </method>
            <method name="Dismiss"/>
            <signal name="Completed">
              <arg name="dismissed" type="b"/>
              <arg name="result" type="v"/>
            </signal>
          </interface>
        </node>
        """
}
