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
        if conforms(call.parameters, method.input, in: interface, taken: secrets) { return nil }
        let declared = VarlinkInterfaces.inputNames[call.method] ?? []
        if call.parameters.contains(where: { !declared.contains(ExactString($0.key)) })
            || secrets.contains(where: { !declared.contains($0) })
        {
            let undeclared = (call.parameters.keys.map { ExactString($0) } + secrets).filter {
                !declared.contains($0)
            }.sorted()
            if let first = undeclared.first {
                return .invalidParameter(first.string, "not a parameter of \(call.method)")
            }
        }
        for field in method.input {
            if !secrets.isEmpty && secrets.contains(ExactString(field.name)) { continue }
            if let problem = fieldProblem(call.parameters[field.name], field.type, in: interface) {
                return .invalidParameter(field.name, problem.text)
            }
        }
        return nil
    }

    /// Why `parameters` is not a reply of `method` (its output struct), or nil when it is
    /// (or no served interface declares the method).
    public static func replyProblem(method: String, parameters: JSONObject) -> String? {
        guard let (interface, m) = VarlinkInterfaces.method(method) else {
            return "\(method) is not declared"
        }
        return structProblem(parameters, m.output, in: interface)?.text
    }

    /// Why an error reply named `name` with the declared `parameters` (what `VarlinkReply.json`
    /// sends as "parameters", the others going to its extension member) does not match the
    /// error's declaration, or nil when it does. An error no served interface declares is a problem.
    public static func errorProblem(name: String, parameters: JSONObject) -> String? {
        guard let dot = name.lastIndex(of: "."),
            let interface = VarlinkInterfaces.interface(String(name[..<dot])),
            let error = interface.errors[String(name[name.index(after: dot)...])]
        else { return "error \(name) is not declared in any interface vaultd serves" }
        return structProblem(parameters, error.parameters, in: interface)?.text
    }

    /// Longest field name quoted in a message (the name is the caller's, and may be long).
    static let quotedNameLimit = 64

    static func quoted(_ name: String) -> String {
        name.utf8.count <= quotedNameLimit
            ? "'\(name)'"
            : "'\(String(decoding: name.utf8.prefix(quotedNameLimit), as: UTF8.self))…'"
    }

    /// What is wrong with a value, and where inside the checked parameter: built only when a
    /// check fails, so a valid call allocates nothing for it. The place is collected from the
    /// inside out as the checks return (`inside`), and written as `query.service`,
    /// `items[2].label`, `values[…]` before the reason.
    struct Problem {
        enum Step {
            case field(String)
            case index(Int)
            /// A map's element: its key is the caller's, and is not quoted.
            case anyKey
        }
        /// The steps from the problem outwards (the innermost first).
        var steps: [Step] = []
        let reason: String

        init(_ reason: String) { self.reason = reason }

        func inside(_ step: Step) -> Problem {
            var p = self
            p.steps.append(step)
            return p
        }

        /// "place: reason", or the reason alone at the top of the checked value.
        var text: String {
            var path = ""
            for step in steps.reversed() {
                switch step {
                case .field(let name): path = path.isEmpty ? name : path + "." + name
                case .index(let n): path += "[\(n)]"
                case .anyKey: path += "[…]"
                }
            }
            return path.isEmpty ? reason : path + ": " + reason
        }
    }

    /// A field's value (nil: absent) against its declared type.
    static func fieldProblem(
        _ value: JSON?, _ type: VarlinkIDL.FieldType, in interface: VarlinkIDL.Interface
    ) -> Problem? {
        if case .optional(let inner) = type {
            guard let value, !value.isNull else { return nil }
            return valueProblem(value, inner, in: interface)
        }
        guard let value, !value.isNull else { return Problem("missing") }
        return valueProblem(value, type, in: interface)
    }

    /// The fields of `object` against a struct's: none undeclared, each present one of its type.
    /// The problem reported is the first undeclared member in byte order, else the first
    /// declared field, in the declaration's order, that is missing or of the wrong type.
    static func structProblem(
        _ object: JSONObject, _ fields: [VarlinkIDL.Field], in interface: VarlinkIDL.Interface
    ) -> Problem? {
        if conforms(object, fields, in: interface) { return nil }
        let names = Set(fields.map { ExactString($0.name) })
        if let first = object.keys.map({ ExactString($0) }).filter({ !names.contains($0) }).sorted()
            .first
        {
            return Problem("\(quoted(first.string)) is not a field of it")
        }
        for field in fields {
            if let problem = fieldProblem(object[field.name], field.type, in: interface) {
                return problem.inside(.field(field.name))
            }
        }
        return nil
    }

    /// Whether `object` is a valid value of the struct: one pass over its members (a call
    /// names a few of a struct's many optional fields), each found among the fields by its
    /// bytes, and a count of the required fields present. Nothing is hashed or allocated.
    private static func conforms(
        _ object: JSONObject, _ fields: [VarlinkIDL.Field], in interface: VarlinkIDL.Interface,
        taken: SecretNames = []
    ) -> Bool {
        guard object.count + taken.count <= fields.count else { return false }
        var requiredPresent = 0
        for (key, value) in object {
            guard let field = fields.first(where: { key.sameBytes($0.name) }) else {
                return false
            }
            if fieldProblem(value, field.type, in: interface) != nil { return false }
            if !field.type.isOptional { requiredPresent += 1 }
        }
        // Members the secret parser took out of the message: strings, declared, not twice.
        for name in taken {
            guard object[name.string] == nil,
                let field = fields.first(where: { name.string.sameBytes($0.name) })
            else { return false }
            if !field.type.isOptional { requiredPresent += 1 }
        }
        var required = 0
        for field in fields where !field.type.isOptional { required += 1 }
        return requiredPresent == required
    }

    static func valueProblem(
        _ value: JSON, _ type: VarlinkIDL.FieldType, in interface: VarlinkIDL.Interface
    ) -> Problem? {
        switch type {
        case .bool:
            return value.boolValue == nil ? Problem("must be a boolean") : nil
        case .int:
            return value.int64Value == nil ? Problem("must be an integer") : nil
        case .float:
            guard case .number = value else { return Problem("must be a number") }
            return nil
        case .string:
            return value.stringValue == nil ? Problem("must be a string") : nil
        case .object:
            return value.objectValue == nil ? Problem("must be an object") : nil
        case .named(let name):
            // The parser refuses a description that uses a type it does not declare.
            guard let declared = interface.types[name] else {
                return Problem("of the undeclared type \(name)")
            }
            return valueProblem(value, declared, in: interface)
        case .structure(let fields):
            guard case .object(let o) = value else { return Problem("must be an object") }
            return structProblem(o, fields, in: interface)
        case .enumeration(let names):
            guard let s = value.stringValue, names.contains(where: { $0.sameBytes(s) }) else {
                return Problem("must be one of " + names.joined(separator: ", "))
            }
            return nil
        case .optional(let inner):
            return value.isNull ? nil : valueProblem(value, inner, in: interface)
        case .array(let element):
            guard case .array(let a) = value else { return Problem("must be an array") }
            for (n, e) in a.enumerated() {
                if let problem = elementProblem(e, element, in: interface) {
                    return problem.inside(.index(n))
                }
            }
            return nil
        case .map(let element):
            guard case .object(let o) = value else { return Problem("must be an object") }
            for (_, e) in o {
                if let problem = elementProblem(e, element, in: interface) {
                    return problem.inside(.anyKey)
                }
            }
            return nil
        }
    }

    /// An array's or map's element: null only where the element type is optional.
    static func elementProblem(
        _ value: JSON, _ type: VarlinkIDL.FieldType, in interface: VarlinkIDL.Interface
    ) -> Problem? {
        if value.isNull {
            if case .optional = type { return nil }
            return Problem("must not be null")
        }
        return valueProblem(value, type, in: interface)
    }
}

extension VarlinkIDL.FieldType {
    /// `?T`: the field may be absent or null.
    var isOptional: Bool {
        if case .optional = self { return true }
        return false
    }
}
