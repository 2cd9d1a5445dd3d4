#include "services/server/response_format.h"

#include "common/json_constraint/schema.h"
#include "services/server/tool_calls.h"

namespace k3::server {
namespace {
using ordered = nlohmann::ordered_json;

const ordered* Find(const ordered& o, const char* key) {
  const auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

// Each schema is compiled once here, to refuse it with the keyword's name.
std::string Refusal(const ordered& schema, const std::string& where) {
  try {
    json_constraint::CompileSchema(schema);
  } catch (const json_constraint::SchemaError& e) {
    return "'" + where + "': " + e.what();
  }
  return "";
}

OutputFormat FromResponseFormat(const ordered& rf) {
  if (!rf.is_object()) return {std::nullopt, "'response_format' must be an object"};
  for (const auto& [key, _] : rf.items())
    if (key != "type" && key != "json_schema") return {std::nullopt, "'response_format." + key + "' is not supported"};
  const ordered* type = Find(rf, "type");
  if (!type || !type->is_string()) return {std::nullopt, "'response_format.type' must be text, json_object or json_schema"};
  const std::string t = type->get<std::string>();
  if (t == "text") return {};
  if (t == "json_object") return {std::string(R"({"type":"object"})"), ""};
  if (t != "json_schema") return {std::nullopt, "'response_format.type' must be text, json_object or json_schema"};
  const ordered* js = Find(rf, "json_schema");
  if (!js || !js->is_object()) return {std::nullopt, "'response_format.json_schema' must be an object"};
  for (const auto& [key, _] : js->items())
    if (key != "name" && key != "schema" && key != "strict" && key != "description")
      return {std::nullopt, "'response_format.json_schema." + key + "' is not supported"};
  const ordered* name = Find(*js, "name");
  if (!name || !name->is_string() || name->get<std::string>().empty() || name->get<std::string>().size() > 64)
    return {std::nullopt, "'response_format.json_schema.name' must be a string of 1 to 64 characters"};
  if (const ordered* strict = Find(*js, "strict"); strict && !strict->is_boolean())
    return {std::nullopt, "'response_format.json_schema.strict' must be true or false"};
  const ordered* schema = Find(*js, "schema");
  if (!schema || !schema->is_object()) return {std::nullopt, "'response_format.json_schema.schema' must be an object"};
  if (std::string bad = Refusal(*schema, "response_format.json_schema.schema"); !bad.empty()) return {std::nullopt, bad};
  if (const ordered* strict = Find(*js, "strict"); strict && *strict == true)
    if (std::string bad = StrictRefusal(*schema, "response_format.json_schema.schema"); !bad.empty()) return {std::nullopt, bad};
  return {schema->dump(), ""};
}

}  // namespace

OutputFormat ParseOutputFormat(const nlohmann::json& body, const std::string& body_text) {
  const bool rf = body.contains("response_format") && !body["response_format"].is_null();
  const bool guided = body.contains("guided_json") && !body["guided_json"].is_null();
  if (!rf && !guided) return {};
  // ParseRequest parsed the body strictly (a key given twice is 400 there), so it parses; read
  // again in document order for the properties' order.
  const ordered doc = ordered::parse(body_text);
  OutputFormat out;
  if (rf) out = FromResponseFormat(doc["response_format"]);
  if (!out.error.empty() || !guided) return out;
  if (out.schema) return {std::nullopt, "'guided_json' and a 'response_format' other than text exclude each other"};
  ordered schema = doc["guided_json"];
  if (schema.is_string()) {  // vLLM takes the schema as an object or as its JSON text
    try {
      schema = ordered::parse(schema.get<std::string>());
    } catch (const nlohmann::json::exception&) {
      return {std::nullopt, "'guided_json' must be a schema object or its JSON text"};
    }
  }
  if (!schema.is_object()) return {std::nullopt, "'guided_json' must be a schema object or its JSON text"};
  if (std::string bad = Refusal(schema, "guided_json"); !bad.empty()) return {std::nullopt, bad};
  return {schema.dump(), ""};
}

std::string ConstrainedRequestConflict(const nlohmann::json& body, const std::string& what) {
  auto given = [&](const char* key) { return body.contains(key) && !body[key].is_null(); };
  if (given("stop")) return "'stop' cannot be combined with " + what + " (a stop string could cut the value)";
  if (given("ignore_eos") && body["ignore_eos"] == true) return "'ignore_eos' cannot be combined with " + what;
  // The constraint applies to the answer; a chat's thinking is turned off for it (docs/server.md).
  if (given("reasoning_effort") && body["reasoning_effort"] != "none")
    return what + " turns thinking off: 'reasoning_effort' must be none or absent";
  if (given("chat_template_kwargs") && body["chat_template_kwargs"].is_object())
    for (const char* key : {"thinking", "enable_thinking"})
      if (body["chat_template_kwargs"].value(key, false) == true)
        return what + " turns thinking off: 'chat_template_kwargs." + key + "' must not be true";
  return "";
}

namespace {

bool IsObjectSchema(const ordered& s) {
  if (s.contains("properties")) return true;
  const auto t = s.find("type");
  if (t == s.end()) return false;
  if (t->is_string()) return *t == "object";
  if (t->is_array())
    for (const ordered& x : *t)
      if (x == "object") return true;
  return false;
}

std::string StrictWalk(const ordered& s, const std::string& where, const std::string& at) {
  if (!s.is_object()) return "";
  const std::string place = at.empty() ? "at the root" : "at " + at;
  if (IsObjectSchema(s)) {
    const auto ap = s.find("additionalProperties");
    if (ap == s.end() || *ap != false)
      return "'" + where + "': strict: true needs 'additionalProperties': false in every object (" + place + ")";
    const ordered* props = Find(s, "properties");
    const ordered* req = Find(s, "required");
    if (props && props->is_object())
      for (const auto& [key, _] : props->items()) {
        bool listed = false;
        if (req && req->is_array())
          for (const ordered& r : *req) listed = listed || r == key;
        if (!listed)
          return "'" + where + "': strict: true needs every property in 'required' ('" + key + "' " + place + " is not)";
      }
  }
  for (const char* map : {"properties", "$defs", "definitions"})
    if (const ordered* m = Find(s, map); m && m->is_object())
      for (const auto& [key, sub] : m->items())
        if (std::string bad = StrictWalk(sub, where, at + "/" + map + "/" + key); !bad.empty()) return bad;
  if (const ordered* items = Find(s, "items"))
    if (std::string bad = StrictWalk(*items, where, at + "/items"); !bad.empty()) return bad;
  if (const ordered* any = Find(s, "anyOf"); any && any->is_array())
    for (size_t i = 0; i < any->size(); ++i)
      if (std::string bad = StrictWalk((*any)[i], where, at + "/anyOf/" + std::to_string(i)); !bad.empty()) return bad;
  return "";
}

}  // namespace

std::string StrictRefusal(const ordered& schema, const std::string& where) {
  if (schema.contains("anyOf") || !IsObjectSchema(schema))
    return "'" + where + "': strict: true needs an object schema at the root (not anyOf)";
  return StrictWalk(schema, where, "");
}

ForcedCallFormat ParseForcedCall(const ordered& tools, const ToolRules& rules) {
  const std::vector<ForcedCall> forced = ForcedCallSchemas(tools, rules);
  // Only one function's call can be constrained: its name is in the call's tag, before the arguments.
  const bool one = forced.size() == 1;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered& f = tools[i].at("function");
    if (f.contains("strict") && f["strict"] == true && !(one && forced[0].index == i))
      return {"", "", "'tools[" + std::to_string(i) + "].function.strict': true needs this function's call forced "
                      "('tool_choice' naming it, or \"required\" with it the only tool): k3 constrains a forced call's arguments only"};
  }
  if (!one) return {};
  const ForcedCall& c = forced[0];
  const std::string where = "tools[" + std::to_string(c.index) + "].function.parameters";
  if (std::string bad = Refusal(c.parameters, where); !bad.empty()) return {"", "", bad};
  if (c.strict)
    if (std::string bad = StrictRefusal(c.parameters, where); !bad.empty()) return {"", "", bad};
  return {c.name, c.parameters.dump(), ""};
}

}  // namespace k3::server
