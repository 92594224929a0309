/// JSON values checked against the declarations of the interface descriptions: a call's
/// parameters before it is dispatched (`callRefusal`), and, in debug builds and tests, every
/// reply and error reply (`replyProblem`, `errorProblem`).
///
/// As the varlink specification has it: a field of a non-optional type is present and not
/// null; an optional one (`?T`) may be absent or null; a field a struct does not declare is
/// refused; `int` is an integer JSON number (64-bit), `float` any number, an enum a string
/// naming one of its values, `object` any JSON object. Each JSON value is looked at once per
/// type that covers it, and a type nests no deeper than the JSON parser allows
/// (`JSON.maximumDepth`): the work is linear in the message, whose size the frame reader bounds.
public enum VarlinkValidation {
    /// Names of the call's secret parameters that `CallSecrets.parse` took out of the message
    /// into secure memory: present, and strings (the JSON parser took only strings out).
    public typealias SecretNames = Set<ExactString>

    /// The refusal for a call whose parameters do not match its method's input: the
    /// standard `org.varlink.service.InvalidParameter`, naming the parameter. Nil when they
    /// match, or when no served interface declares the method (MethodNotFound or
    /// InterfaceNotFound follows). A parameter the method does not declare is named first
    /// (the first in sorted order), then the first declared one, in the declaration's order,
    /// that is missing or of the wrong type.
    public static func callRefusal(_ call: VarlinkCall, secrets: SecretNames = []) -> VaultError? {
        guard let (interface, method) = VarlinkInterfaces.method(call.method) else { return nil }
        let declared = VarlinkInterfaces.inputNames[call.method] ?? []
        if call.parameters.contains(where: { !declared.contains(ExactString($0.key)) }) || secrets.contains(where: { !declared.contains($0) }) {
            let undeclared = (call.parameters.keys.map { ExactString($0) } + secrets).filter { !declared.contains($0) }.sorted()
            if let first = undeclared.first { return .invalidParameter(first.string, "not a parameter of \(call.method)") }
        }
        for field in method.input {
            if secrets.contains(ExactString(field.name)) { continue }
            if let why = fieldProblem(call.parameters[field.name], field.type, in: interface, path: "") {
                return .invalidParameter(field.name, why)
            }
        }
        return nil
    }

    /// Why `parameters` is not a reply of `method` (its output struct), or nil when it is
    /// (or no served interface declares the method).
    public static func replyProblem(method: String, parameters: JSONObject) -> String? {
        guard let (interface, m) = VarlinkInterfaces.method(method) else { return "\(method) is not declared" }
        return structProblem(parameters, m.output, in: interface, path: "")
    }

    /// Why an error reply named `name` with the declared `parameters` (what `VarlinkReply.json`
    /// sends as "parameters", the others going to its extension member) does not match the
    /// error's declaration, or nil when it does. An error no served interface declares is a problem.
    public static func errorProblem(name: String, parameters: JSONObject) -> String? {
        guard let dot = name.lastIndex(of: "."), let interface = VarlinkInterfaces.interface(String(name[..<dot])),
            let error = interface.errors[String(name[name.index(after: dot)...])]
        else { return "error \(name) is not declared in any interface vaultd serves" }
        return structProblem(parameters, error.parameters, in: interface, path: "")
    }

    /// Longest field name quoted in a message (the name is the caller's, and may be long).
    static let quotedNameLimit = 64

    static func quoted(_ name: String) -> String {
        name.utf8.count <= quotedNameLimit ? "'\(name)'" : "'\(String(decoding: name.utf8.prefix(quotedNameLimit), as: UTF8.self))…'"
    }

    static func place(_ path: String) -> String { path.isEmpty ? "" : "\(path): " }

    /// A field's value (nil: absent) against its declared type.
    static func fieldProblem(_ value: JSON?, _ type: VarlinkIDL.FieldType, in interface: VarlinkIDL.Interface, path: String) -> String? {
        if case .optional(let inner) = type {
            guard let value, !value.isNull else { return nil }
            return valueProblem(value, inner, in: interface, path: path)
        }
        guard let value, !value.isNull else { return place(path) + "missing" }
        return valueProblem(value, type, in: interface, path: path)
    }

    /// The fields of `object` against a struct's: none undeclared, each present one of its type.
    static func structProblem(_ object: JSONObject, _ fields: [VarlinkIDL.Field], in interface: VarlinkIDL.Interface, path: String) -> String? {
        if object.count > fields.count || object.contains(where: { entry in !fields.contains { $0.name.sameBytes(entry.key) } }) {
            let names = Set(fields.map { ExactString($0.name) })
            if let first = object.keys.map({ ExactString($0) }).filter({ !names.contains($0) }).sorted().first {
                return place(path) + "\(quoted(first.string)) is not a field of it"
            }
        }
        for field in fields {
            let sub = path.isEmpty ? field.name : path + "." + field.name
            if let why = fieldProblem(object[field.name], field.type, in: interface, path: sub) { return why }
        }
        return nil
    }

    static func valueProblem(_ value: JSON, _ type: VarlinkIDL.FieldType, in interface: VarlinkIDL.Interface, path: String) -> String? {
        switch type {
        case .bool:
            return value.boolValue == nil ? place(path) + "must be a boolean" : nil
        case .int:
            return value.int64Value == nil ? place(path) + "must be an integer" : nil
        case .float:
            guard case .number = value else { return place(path) + "must be a number" }
            return nil
        case .string:
            return value.stringValue == nil ? place(path) + "must be a string" : nil
        case .object:
            return value.objectValue == nil ? place(path) + "must be an object" : nil
        case .named(let name):
            // The parser refuses a description that uses a type it does not declare.
            guard let declared = interface.types[name] else { return place(path) + "of the undeclared type \(name)" }
            return valueProblem(value, declared, in: interface, path: path)
        case .structure(let fields):
            guard let o = value.objectValue else { return place(path) + "must be an object" }
            return structProblem(o, fields, in: interface, path: path)
        case .enumeration(let names):
            guard let s = value.stringValue, names.contains(where: { $0.sameBytes(s) }) else {
                return place(path) + "must be one of " + names.joined(separator: ", ")
            }
            return nil
        case .optional(let inner):
            return value.isNull ? nil : valueProblem(value, inner, in: interface, path: path)
        case .array(let element):
            guard let a = value.arrayValue else { return place(path) + "must be an array" }
            for (n, e) in a.enumerated() {
                if let why = elementProblem(e, element, in: interface, path: "\(path)[\(n)]") { return why }
            }
            return nil
        case .map(let element):
            guard let o = value.objectValue else { return place(path) + "must be an object" }
            // Keys are the caller's: not quoted in the message.
            for (_, e) in o {
                if let why = elementProblem(e, element, in: interface, path: path + "[…]") { return why }
            }
            return nil
        }
    }

    /// An array's or map's element: null only where the element type is optional.
    static func elementProblem(_ value: JSON, _ type: VarlinkIDL.FieldType, in interface: VarlinkIDL.Interface, path: String) -> String? {
        if value.isNull {
            if case .optional = type { return nil }
            return place(path) + "must not be null"
        }
        return valueProblem(value, type, in: interface, path: path)
    }
}
