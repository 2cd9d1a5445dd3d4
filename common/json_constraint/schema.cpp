#include "schema.h"

#include <algorithm>
#include <map>
#include <set>

namespace k3::json_constraint {
namespace {
using json = nlohmann::ordered_json;

const std::set<std::string>& Annotations() {
  static const std::set<std::string> a = {"title", "description", "$schema", "$id", "$comment", "default", "examples"};
  return a;
}

// Which type each type-specific keyword belongs to.
const std::map<std::string, std::string>& KeywordTypes() {
  static const std::map<std::string, std::string> k = {
      {"properties", "object"}, {"required", "object"}, {"additionalProperties", "object"},
      {"items", "array"},       {"minItems", "array"},  {"maxItems", "array"},
      {"format", "string"}};
  return k;
}

const std::set<std::string>& TypeNames() {
  static const std::set<std::string> t = {"object", "array", "string", "number", "integer", "boolean", "null"};
  return t;
}

bool OfType(const json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "integer")
    return v.is_number_integer() || v.is_number_unsigned() || (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())));
  if (type == "boolean") return v.is_boolean();
  return v.is_null();
}

std::string At(const std::string& path) { return " (at " + (path.empty() ? std::string("/") : path) + ")"; }

class Compiler {
 public:
  explicit Compiler(const json& root) : root_(root) {}

  Grammar Run() {
    Node any_string;
    any_string.kind = Kind::kString;
    g_.key_string = Add(any_string);
    g_.any = BuildAny();
    g_.root = Ref("");
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if (g_.nodes[i].kind == Kind::kAnyOf) {
        std::vector<int32_t> leaves;
        std::set<int32_t> seen;
        Flatten(static_cast<int32_t>(i), seen, leaves);
        if (leaves.empty()) throw SchemaError("'anyOf' has no alternative");
        g_.nodes[i].leaves = std::move(leaves);
      }
    return std::move(g_);
  }

 private:
  int32_t Add(Node n) {
    g_.nodes.push_back(std::move(n));
    return static_cast<int32_t>(g_.nodes.size() - 1);
  }

  static Node Literals(std::vector<std::string> texts) {
    Node n;
    n.kind = Kind::kLiterals;
    std::sort(texts.begin(), texts.end());
    texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
    n.literals = std::move(texts);
    return n;
  }

  // Any JSON value: an anyOf whose leaves start with distinct bytes, so only one survives a byte.
  int32_t BuildAny() {
    const int32_t any = Add(Node{});
    Node obj;
    obj.kind = Kind::kObject;
    obj.free_keys = true;
    Node arr;
    arr.kind = Kind::kArray;
    arr.items = any;
    Node str;
    str.kind = Kind::kString;
    Node num;
    num.kind = Kind::kNumber;
    Node alts;
    alts.kind = Kind::kAnyOf;
    alts.alts = {Add(obj), Add(arr), Add(str), Add(num), Add(Literals({"true", "false", "null"}))};
    g_.nodes[static_cast<size_t>(any)] = alts;
    return any;
  }

  void Flatten(int32_t node, std::set<int32_t>& seen, std::vector<int32_t>& out) {
    const Node& n = g_.nodes[static_cast<size_t>(node)];
    if (n.kind != Kind::kAnyOf) {
      if (std::find(out.begin(), out.end(), node) == out.end()) out.push_back(node);
      return;
    }
    if (!seen.insert(node).second) throw SchemaError("'anyOf' refers to itself without a value in between");
    const std::vector<int32_t> alts = n.alts;  // g_.nodes is not resized here, but keep it safe
    for (int32_t a : alts) Flatten(a, seen, out);
    seen.erase(node);
  }

  // The node of the schema at JSON pointer `pointer` ("" = the root), compiled once.
  int32_t Ref(const std::string& pointer) {
    if (const auto it = refs_.find(pointer); it != refs_.end()) return it->second;
    const json* target = nullptr;
    try {
      target = &root_.at(json::json_pointer(pointer));
    } catch (const json::exception&) {
      throw SchemaError("'$ref' \"#" + pointer + "\" points to nothing");
    }
    const int32_t slot = Add(Node{});  // reserved first: a recursive $ref finds it
    refs_[pointer] = slot;
    const int32_t built = Compile(*target, pointer);
    g_.nodes[static_cast<size_t>(slot)] = g_.nodes[static_cast<size_t>(built)];
    return slot;
  }

  int32_t Compile(const json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return g_.any;
      throw SchemaError("the schema false admits no value" + At(path));
    }
    if (!s.is_object()) throw SchemaError("a schema must be an object" + At(path));
    std::set<std::string> seen;
    for (const auto& [key, value] : s.items()) {
      if (Annotations().count(key)) continue;
      static const std::set<std::string> known = {"type", "enum", "const", "anyOf", "$ref", "$defs", "definitions",
                                                  "properties", "required", "additionalProperties", "items",
                                                  "minItems", "maxItems", "format"};
      if (!known.count(key)) throw SchemaError("'" + key + "' is not supported" + At(path));
      seen.insert(key);
    }
    for (const char* defs : {"$defs", "definitions"})
      if (seen.count(defs) && !s[defs].is_object()) throw SchemaError(std::string("'") + defs + "' must be an object" + At(path));
    seen.erase("$defs");
    seen.erase("definitions");

    if (seen.count("$ref")) {
      if (seen.size() > 1) throw SchemaError("'$ref' next to other keywords is not supported" + At(path));
      const json& r = s["$ref"];
      if (!r.is_string() || r.get<std::string>().rfind('#', 0) != 0)
        throw SchemaError("'$ref' must be \"#\" or \"#/...\" inside the schema" + At(path));
      return Ref(r.get<std::string>().substr(1));
    }
    if (seen.count("anyOf")) {
      if (seen.size() > 1) throw SchemaError("'anyOf' next to other keywords is not supported" + At(path));
      const json& a = s["anyOf"];
      if (!a.is_array() || a.empty()) throw SchemaError("'anyOf' must be a non-empty array" + At(path));
      Node n;
      n.kind = Kind::kAnyOf;
      for (size_t i = 0; i < a.size(); ++i) n.alts.push_back(Compile(a[i], path + "/anyOf/" + std::to_string(i)));
      return Add(std::move(n));
    }

    std::vector<std::string> types;
    if (const auto t = s.find("type"); t != s.end()) {
      if (t->is_string()) types.push_back(t->get<std::string>());
      else if (t->is_array() && !t->empty())
        for (const json& one : *t) {
          if (!one.is_string()) throw SchemaError("'type' must be a name or a list of names" + At(path));
          types.push_back(one.get<std::string>());
        }
      else throw SchemaError("'type' must be a name or a non-empty list of names" + At(path));
      for (const std::string& name : types)
        if (!TypeNames().count(name)) throw SchemaError("'type' \"" + name + "\" is not a JSON Schema type" + At(path));
    }
    for (const auto& [key, type] : KeywordTypes())
      if (seen.count(key) && !types.empty() && std::find(types.begin(), types.end(), type) == types.end())
        throw SchemaError("'" + key + "' needs type " + type + At(path));

    if (seen.count("enum") || seen.count("const")) {
      std::vector<json> values;
      if (seen.count("const")) values.push_back(s["const"]);
      if (seen.count("enum")) {
        const json& e = s["enum"];
        if (!e.is_array() || e.empty()) throw SchemaError("'enum' must be a non-empty array" + At(path));
        for (const json& v : e)
          if (!seen.count("const") || v == s["const"]) values.push_back(v);
        if (seen.count("const") && values.size() == 1) throw SchemaError("'const' is not among 'enum'" + At(path));
        if (seen.count("const")) values.erase(values.begin());
      }
      std::vector<std::string> texts;
      for (const json& v : values) {
        if (!types.empty() && std::none_of(types.begin(), types.end(), [&](const std::string& t) { return OfType(v, t); }))
          throw SchemaError("'enum' value " + v.dump() + " is not of the schema's type" + At(path));
        texts.push_back(v.dump());
      }
      return Add(Literals(std::move(texts)));
    }

    if (types.empty()) {  // inferred from the keywords, else any value
      for (const auto& [key, type] : KeywordTypes())
        if (seen.count(key) && std::find(types.begin(), types.end(), type) == types.end()) types.push_back(type);
      if (types.size() > 1) throw SchemaError("keywords of several types without 'type'" + At(path));
      if (types.empty()) return g_.any;
    }
    Node alts;
    alts.kind = Kind::kAnyOf;
    for (const std::string& type : types) alts.alts.push_back(Typed(s, type, path));
    if (alts.alts.size() == 1) return alts.alts[0];
    return Add(std::move(alts));
  }

  int32_t Typed(const json& s, const std::string& type, const std::string& path) {
    Node n;
    if (type == "object") return Object(s, path);
    if (type == "array") return Array(s, path);
    if (type == "boolean") return Add(Literals({"true", "false"}));
    if (type == "null") return Add(Literals({"null"}));
    if (type == "number" || type == "integer") {
      n.kind = type == "number" ? Kind::kNumber : Kind::kInteger;
      return Add(std::move(n));
    }
    n.kind = Kind::kString;
    if (const auto f = s.find("format"); f != s.end()) {
      if (!f->is_string()) throw SchemaError("'format' must be a string" + At(path));
      if (f->get<std::string>() != "uuid") throw SchemaError("'format' \"" + f->get<std::string>() + "\" is not supported (uuid is)" + At(path));
      n.format = Format::kUuid;
    }
    return Add(std::move(n));
  }

  int32_t Object(const json& s, const std::string& path) {
    Node n;
    n.kind = Kind::kObject;
    if (const auto ap = s.find("additionalProperties"); ap != s.end() && !(ap->is_boolean() && !ap->get<bool>()))
      throw SchemaError("'additionalProperties' other than false is not supported" + At(path));
    const auto props = s.find("properties");
    std::set<std::string> required;
    if (const auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) throw SchemaError("'required' must be an array of names" + At(path));
      for (const json& name : *r) {
        if (!name.is_string()) throw SchemaError("'required' must be an array of names" + At(path));
        if (props == s.end() || !props->contains(name.get<std::string>()))
          throw SchemaError("'required' names \"" + name.get<std::string>() + "\", which is not in 'properties'" + At(path));
        required.insert(name.get<std::string>());
      }
    }
    if (props == s.end()) {
      n.free_keys = !s.contains("additionalProperties");  // additionalProperties false: only {}
      n.next_required = {0};
      return Add(std::move(n));
    }
    if (!props->is_object()) throw SchemaError("'properties' must be an object" + At(path));
    // In the document's order (ordered_json), as OpenAI's structured outputs produce them.
    for (const auto& [name, sub] : props->items()) {
      Property p;
      p.key = json(name).dump() + ":";
      p.required = required.count(name) > 0;
      p.node = Compile(sub, path + "/properties/" + name);
      n.props.push_back(std::move(p));
    }
    n.next_required.assign(n.props.size() + 1, static_cast<int32_t>(n.props.size()));
    for (size_t k = n.props.size(); k-- > 0;)
      n.next_required[k] = n.props[k].required ? static_cast<int32_t>(k) : n.next_required[k + 1];
    return Add(std::move(n));
  }

  int32_t Array(const json& s, const std::string& path) {
    Node n;
    n.kind = Kind::kArray;
    n.items = s.contains("items") ? Compile(s["items"], path + "/items") : g_.any;
    for (const char* key : {"minItems", "maxItems"})
      if (s.contains(key)) {
        const json& v = s[key];
        if (!v.is_number_integer() && !v.is_number_unsigned()) throw SchemaError(std::string("'") + key + "' must be an integer" + At(path));
        const int64_t x = v.get<int64_t>();
        if (x < 0 || x > (1 << 20)) throw SchemaError(std::string("'") + key + "' must be 0 to 1048576" + At(path));
        (std::string(key) == "minItems" ? n.min_items : n.max_items) = x;
      }
    if (n.max_items >= 0 && n.max_items < n.min_items) throw SchemaError("'maxItems' is below 'minItems'" + At(path));
    return Add(std::move(n));
  }

  const json& root_;
  Grammar g_;
  std::map<std::string, int32_t> refs_;
};

}  // namespace

Grammar CompileSchema(const nlohmann::ordered_json& schema) { return Compiler(schema).Run(); }

const std::vector<int32_t>& Leaves(const Grammar& g, int32_t node, std::vector<int32_t>& scratch) {
  const Node& n = g.nodes[static_cast<size_t>(node)];
  if (n.kind == Kind::kAnyOf) return n.leaves;
  scratch.assign(1, node);
  return scratch;
}

}  // namespace k3::json_constraint
