#include "services/server/tool_request.h"

#include <algorithm>

namespace k3::server {
namespace {
using nlohmann::json;
using ipc::tokenizer::ToolChoice;

[[noreturn]] void Fail(const std::string& m) { throw ToolFieldError{m}; }

const json* Field(const json& o, const char* name) {
  const auto it = o.find(name);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

void OnlyKeys(const json& o, const std::string& where, std::initializer_list<const char*> keys) {
  for (const auto& [k, _] : o.items())
    if (std::none_of(keys.begin(), keys.end(), [&](const char* x) { return k == x; }))
      Fail(where + ": unknown field '" + k + "'");
}

// OpenAI's rule for function names: 1-64 of a-z, A-Z, 0-9, _ and -.
bool GoodName(const std::string& n) {
  return !n.empty() && n.size() <= 64 &&
         std::all_of(n.begin(), n.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; });
}

std::string String(const json& j, const std::string& where) {
  if (!j.is_string()) Fail("'" + where + "' must be a string");
  return j.get<std::string>();
}

}  // namespace

void ParseToolFields(const json& body, RequestSpec& spec) {
  if (const json* t = Field(body, "tools")) {
    if (!t->is_array()) Fail("'tools' must be an array");
    for (size_t i = 0; i < t->size(); ++i) {
      const std::string at = "tools[" + std::to_string(i) + "]";
      const json& tool = (*t)[i];
      if (!tool.is_object()) Fail(at + " must be an object");
      OnlyKeys(tool, at, {"type", "function"});
      if (tool.value("type", "") != "function") Fail(at + ".type must be \"function\"");
      const json* f = Field(tool, "function");
      if (!f || !f->is_object()) Fail(at + ".function must be an object");
      OnlyKeys(*f, at + ".function", {"name", "description", "parameters", "strict"});
      const json* name = Field(*f, "name");
      if (!name || !name->is_string() || !GoodName(name->get<std::string>()))
        Fail(at + ".function.name must be 1-64 letters, digits, '_' or '-'");
      if (const json* d = Field(*f, "description"); d && !d->is_string()) Fail(at + ".function.description must be a string");
      if (const json* p = Field(*f, "parameters"); p && !p->is_object()) Fail(at + ".function.parameters must be a JSON schema object");
      // strict: true is kept only for a forced call (response_format.h ParseForcedCall).
      if (const json* s = Field(*f, "strict"); s && !s->is_boolean()) Fail(at + ".function.strict must be true or false");
      const std::string n = name->get<std::string>();
      if (std::find(spec.tools.declared.begin(), spec.tools.declared.end(), n) != spec.tools.declared.end())
        Fail("'tools' declares the function '" + n + "' twice");
      spec.tools.declared.push_back(n);
    }
    if (!t->empty()) spec.tools_json = t->dump(-1, ' ', false, json::error_handler_t::strict);
  }
  const bool have_tools = !spec.tools.declared.empty();
  if (const json* c = Field(body, "tool_choice")) {
    if (c->is_string()) {
      const std::string v = c->get<std::string>();
      if (v == "auto") spec.tools.choice = ToolChoice::kAuto;
      else if (v == "none") spec.tools.choice = ToolChoice::kNone;
      else if (v == "required") spec.tools.choice = ToolChoice::kRequired;
      else Fail("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else if (c->is_object()) {
      OnlyKeys(*c, "tool_choice", {"type", "function"});
      const json* f = Field(*c, "function");
      if (c->value("type", "") != "function" || !f || !f->is_object() || !Field(*f, "name"))
        Fail("'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
      OnlyKeys(*f, "tool_choice.function", {"name"});
      spec.tools.named = String((*f)["name"], "tool_choice.function.name");
      spec.tools.choice = ToolChoice::kNamed;
      if (have_tools && std::find(spec.tools.declared.begin(), spec.tools.declared.end(), spec.tools.named) == spec.tools.declared.end())
        Fail("'tool_choice' names the function '" + spec.tools.named + "', which 'tools' does not declare");
    } else {
      Fail("'tool_choice' must be a string or an object");
    }
    if (!have_tools && (spec.tools.choice == ToolChoice::kRequired || spec.tools.choice == ToolChoice::kNamed))
      Fail("'tool_choice' requires a call but 'tools' declares none");
    if (!have_tools) spec.tools.choice = ToolChoice::kAuto;  // nothing to offer or to forbid: no message
  }
  if (const json* p = Field(body, "parallel_tool_calls")) {
    if (!p->is_boolean()) Fail("'parallel_tool_calls' must be true or false");
    spec.tools.parallel = p->get<bool>();
  }
}

void ParseMessageToolFields(const json& m, size_t i, const std::string& role, ChatMessage& out) {
  const std::string at = "messages[" + std::to_string(i) + "]";
  if (const json* calls = Field(m, "tool_calls")) {
    if (role != "assistant") Fail(at + ".tool_calls: only assistant messages carry tool calls");
    if (!calls->is_array()) Fail(at + ".tool_calls must be an array");
    for (size_t k = 0; k < calls->size(); ++k) {
      const std::string ct = at + ".tool_calls[" + std::to_string(k) + "]";
      const json& c = (*calls)[k];
      if (!c.is_object()) Fail(ct + " must be an object");
      OnlyKeys(c, ct, {"id", "type", "function"});
      if (c.value("type", "function") != "function") Fail(ct + ".type must be \"function\"");
      const json* id = Field(c, "id");
      const json* f = Field(c, "function");
      if (!id || !id->is_string() || id->get<std::string>().empty()) Fail(ct + ".id must be a non-empty string");
      if (!f || !f->is_object()) Fail(ct + ".function must be an object");
      OnlyKeys(*f, ct + ".function", {"name", "arguments"});
      const json* name = Field(*f, "name");
      if (!name || !name->is_string() || name->get<std::string>().empty()) Fail(ct + ".function.name must be a non-empty string");
      const json* args = Field(*f, "arguments");
      if (args && !args->is_string()) Fail(ct + ".function.arguments must be a string (JSON text)");
      out.tool_calls.push_back({id->get<std::string>(), name->get<std::string>(), args ? args->get<std::string>() : ""});
    }
  }
  const json* id = Field(m, "tool_call_id");
  if (role == "tool") {
    if (!id) Fail(at + ".tool_call_id is required for a tool message");
    out.tool_call_id = String(*id, at + ".tool_call_id");
    if (const json* n = Field(m, "name")) String(*n, at + ".name");
  } else if (id) {
    Fail(at + ".tool_call_id: only tool messages answer a call");
  }
}

void CheckToolMessageNames(const json& messages, const std::vector<ChatMessage>& parsed) {
  const ChatMessage* assistant = nullptr;
  for (size_t i = 0; i < parsed.size(); ++i) {
    if (parsed[i].role == "assistant") assistant = &parsed[i];
    const json* n = Field(messages[i], "name");
    if (parsed[i].role != "tool" || !n || !assistant) continue;
    for (const ChatToolCall& c : assistant->tool_calls)
      if (c.id == *parsed[i].tool_call_id && c.name != n->get<std::string>())
        Fail("messages[" + std::to_string(i) + "].name '" + n->get<std::string>() + "' but the call '" + c.id +
             "' it answers is of '" + c.name + "'");
  }
}

}  // namespace k3::server
