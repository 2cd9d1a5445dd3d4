#include "services/server/tool_calls.h"

#include <algorithm>
#include <cctype>
#include <map>

namespace k3::server {
namespace {
using ojson = nlohmann::ordered_json;
using Kind = XtmlPiece::Kind;
using ipc::tokenizer::ToolChoice;

struct Bad {
  std::string what;
};

// `tag key="value" ...` (values unescaped: &quot; and &amp;) -> tag and attributes in order.
struct Header {
  std::string tag;
  std::vector<std::pair<std::string, std::string>> attrs;
};

std::string Unescape(const std::string& v) {
  std::string out;
  for (size_t i = 0; i < v.size();) {
    if (v.compare(i, 6, "&quot;") == 0) out += '"', i += 6;
    else if (v.compare(i, 5, "&amp;") == 0) out += '&', i += 5;
    else out += v[i++];
  }
  return out;
}

bool NameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; }

Header ParseHeader(const std::string& s) {
  Header h;
  size_t i = 0;
  while (i < s.size() && NameChar(s[i])) ++i;
  h.tag = s.substr(0, i);
  if (h.tag.empty()) throw Bad{"a tag without a name"};
  while (i < s.size()) {
    if (s[i] != ' ') throw Bad{"malformed attributes in <" + h.tag + ">"};
    const size_t k = ++i;
    while (i < s.size() && NameChar(s[i])) ++i;
    const std::string key = s.substr(k, i - k);
    if (key.empty() || s.compare(i, 2, "=\"") != 0) throw Bad{"malformed attributes in <" + h.tag + ">"};
    const size_t v = i + 2, q = s.find('"', v);
    if (q == std::string::npos) throw Bad{"an unterminated attribute in <" + h.tag + ">"};
    for (const auto& [seen, _] : h.attrs)
      if (seen == key) throw Bad{"attribute " + key + " twice in <" + h.tag + ">"};
    h.attrs.emplace_back(key, Unescape(s.substr(v, q - v)));
    i = q + 1;
  }
  return h;
}

// The attributes as a map, exactly `want` (in any order).
std::map<std::string, std::string> Attrs(const Header& h, std::vector<std::string> want) {
  std::map<std::string, std::string> m(h.attrs.begin(), h.attrs.end());
  std::vector<std::string> have;
  for (const auto& [k, _] : m) have.push_back(k);
  std::sort(want.begin(), want.end());
  if (have != want) {
    std::string w;
    for (const std::string& k : want) w += (w.empty() ? "" : " and ") + k;
    throw Bad{"<" + h.tag + "> must have the attributes " + w};
  }
  return m;
}

// The JSON text of `v`, compact; ill-formed UTF-8 (bytes the model emitted) is refused.
std::string Dump(const ojson& v) {
  try {
    return v.dump();
  } catch (const ojson::exception&) {
    throw Bad{"text that is not valid UTF-8"};
  }
}

ojson Json(const std::string& text, const std::string& what) {
  try {
    return ojson::parse(text);
  } catch (const ojson::exception&) {
    throw Bad{what + " is not JSON"};
  }
}

bool TypeMatches(const std::string& type, const ojson& v) {
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  return false;
}

bool IsText(const std::vector<XtmlPiece>& p, size_t i, const char* s) {
  return i < p.size() && p[i].kind == Kind::kText && p[i].text == s;
}

// One child element from p[i]: <|open|>HEADER<|sep|> [TEXT] <|close|>NAME<|sep|>; returns the
// index after it.
size_t Child(const std::vector<XtmlPiece>& p, size_t i, Header* h, std::string* value) {
  if (p[i].kind != Kind::kOpen) throw Bad{"text or a closing tag where an argument should start"};
  if (i + 2 >= p.size() || p[i + 1].kind != Kind::kText || p[i + 2].kind != Kind::kSep)
    throw Bad{"a malformed argument tag"};
  *h = ParseHeader(p[i + 1].text);
  i += 3;
  value->clear();
  if (i < p.size() && p[i].kind == Kind::kText) *value = p[i++].text;
  if (i + 2 >= p.size() || p[i].kind != Kind::kClose || !IsText(p, i + 1, h->tag.c_str()) || p[i + 2].kind != Kind::kSep)
    throw Bad{"<" + h->tag + "> is not closed by <|close|>" + h->tag + "<|sep|>"};
  return i + 3;
}

// A whole call element p[from, to) (its closing <|close|>call<|sep|> included).
ParsedCall ParseCall(const std::vector<XtmlPiece>& p, size_t from, size_t to) {
  if (from + 2 >= to || p[from + 1].kind != Kind::kText || p[from + 2].kind != Kind::kSep)
    throw Bad{"a malformed call tag"};
  const Header h = ParseHeader(p[from + 1].text);
  if (h.tag != "call") throw Bad{"<" + h.tag + "> where a call should be"};
  const auto a = Attrs(h, {"tool", "index"});
  ParsedCall call;
  call.name = a.at("tool");
  if (call.name.empty()) throw Bad{"a call with an empty tool name"};
  const std::string& index = a.at("index");
  if (index.empty() || index.size() > 9 || !std::all_of(index.begin(), index.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) || std::stoi(index) < 1)
    throw Bad{"a call index that is not a positive number: \"" + index + "\""};
  std::vector<std::string> keys;
  bool json_block = false;
  for (size_t i = from + 3; i < to - 3;) {
    Header ch;
    std::string value;
    i = Child(p, i, &ch, &value);
    if (i > to - 3) throw Bad{"an argument runs past the end of its call"};
    if (json_block) throw Bad{"more than the one json block"};
    if (ch.tag == "json") {
      if (!keys.empty()) throw Bad{"a json block after arguments"};
      if (Attrs(ch, {"type"}).at("type") != "object") throw Bad{"a json block whose type is not object"};
      const ojson v = Json(value, "the json block");
      if (!v.is_object()) throw Bad{"the json block is not an object"};
      call.fragments = {Dump(v)};
      json_block = true;
      continue;
    }
    if (ch.tag != "argument") throw Bad{"<" + ch.tag + "> inside a call"};
    const auto aa = Attrs(ch, {"key", "type"});
    const std::string& key = aa.at("key");
    const std::string& type = aa.at("type");
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) throw Bad{"argument \"" + key + "\" twice"};
    std::string v;
    if (type == "string") {
      v = Dump(ojson(value));
    } else {
      const ojson j = Json(value, "argument \"" + key + "\"");
      if (!TypeMatches(type, j)) throw Bad{"argument \"" + key + "\" is declared " + type + " but is " + j.type_name()};
      v = Dump(j);
    }
    std::string fragment(keys.empty() ? "{" : ",");
    fragment += Dump(ojson(key));
    fragment += ':';
    fragment += v;
    call.fragments.push_back(std::move(fragment));
    keys.push_back(key);
  }
  if (!json_block) call.fragments.push_back(keys.empty() ? "{}" : "}");
  return call;
}

// Why the rules refuse a well-formed call ("" when they do not).
std::string Refusal(const ParsedCall& c, const ToolRules& r, size_t accepted) {
  if (r.choice == ToolChoice::kNone) return "tool_choice is \"none\"";
  if (std::find(r.declared.begin(), r.declared.end(), c.name) == r.declared.end())
    return "the tool \"" + c.name + "\" was not declared";
  if (r.choice == ToolChoice::kNamed && c.name != r.named) return "tool_choice names the function \"" + r.named + "\"";
  if (!r.parallel && accepted > 0) return "parallel_tool_calls is false: one call per reply";
  return "";
}

// The end of the element opened at p[i]: the index after its <|close|>call<|sep|>, or npos.
size_t CallEnd(const std::vector<XtmlPiece>& p, size_t i) {
  for (size_t j = i + 1; j + 2 < p.size(); ++j)
    if (p[j].kind == Kind::kClose && IsText(p, j + 1, "call") && p[j + 2].kind == Kind::kSep) return j + 3;
  return std::string::npos;
}

}  // namespace

std::string ParsedCall::Arguments() const {
  std::string s;
  for (const std::string& f : fragments) s += f;
  return s;
}

std::vector<XtmlPiece> XtmlPieces(const std::vector<int32_t>& ids, const ChatControlIds& c,
                                  const std::function<const std::string&(int32_t)>& bytes) {
  std::vector<XtmlPiece> out;
  for (int32_t id : ids) {
    const Kind k = id == c.open ? Kind::kOpen : id == c.close ? Kind::kClose : id == c.sep ? Kind::kSep : Kind::kText;
    if (k != Kind::kText) out.push_back({k, ""});
    else if (!out.empty() && out.back().kind == Kind::kText) out.back().text += bytes(id);
    else out.push_back({Kind::kText, bytes(id)});
  }
  return out;
}

std::string XtmlText(const std::vector<XtmlPiece>& p, size_t from, size_t to) {
  std::string s;
  for (size_t i = from; i < to && i < p.size(); ++i)
    s += p[i].kind == Kind::kOpen ? "<|open|>" : p[i].kind == Kind::kClose ? "<|close|>" : p[i].kind == Kind::kSep ? "<|sep|>" : p[i].text;
  return s;
}

ToolCallsParse ParseToolCalls(const std::vector<XtmlPiece>& p, const ToolRules& rules, bool final) {
  ToolCallsParse r;
  size_t i = 0;
  while (i < p.size()) {
    if (p[i].kind == Kind::kClose && IsText(p, i + 1, "tools") && i + 2 < p.size() && p[i + 2].kind == Kind::kSep) {
      r.closed = true;
      if (i + 3 < p.size()) r.problems.push_back({"pieces after the end of the tools channel", XtmlText(p, i + 3, p.size())});
      return r;
    }
    if (p[i].kind != Kind::kOpen) {
      // The channel's end may still be arriving: <|close|> alone, or with a part of "tools".
      if (!final && p[i].kind == Kind::kClose && i + 2 >= p.size()) return r;
      const size_t next = [&] {
        for (size_t j = i + 1; j < p.size(); ++j)
          if (p[j].kind == Kind::kOpen || p[j].kind == Kind::kClose) return j;
        return p.size();
      }();
      const size_t end = std::max(next, i + 1);
      if (!final && end == p.size()) return r;
      r.problems.push_back({"text or a tag outside a call", XtmlText(p, i, end)});
      i = end;
      continue;
    }
    const size_t end = CallEnd(p, i);
    if (end == std::string::npos) {
      if (final) r.problems.push_back({"a call the reply did not finish", XtmlText(p, i, p.size())});
      return r;
    }
    try {
      ParsedCall c = ParseCall(p, i, end);
      if (const std::string why = Refusal(c, rules, r.calls.size()); !why.empty()) throw Bad{why};
      r.calls.push_back(std::move(c));
    } catch (const Bad& b) {
      r.problems.push_back({b.what, XtmlText(p, i, end)});
    }
    i = end;
  }
  if (final) r.problems.push_back({"the tools channel is not closed", ""});
  return r;
}

std::vector<ForcedCall> ForcedCallSchemas(const nlohmann::ordered_json& tools, const ToolRules& rules) {
  std::vector<ForcedCall> out;
  if (rules.choice != ToolChoice::kRequired && rules.choice != ToolChoice::kNamed) return out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const nlohmann::ordered_json& f = tools[i].at("function");
    const std::string name = f.at("name").get<std::string>();
    if (rules.choice == ToolChoice::kNamed && name != rules.named) continue;
    const bool strict = f.contains("strict") && f["strict"] == true;
    out.push_back({name,
                   f.contains("parameters") && !f["parameters"].is_null()
                       ? f["parameters"]
                       : nlohmann::ordered_json{{"type", "object"}, {"properties", nlohmann::ordered_json::object()}},
                   i, strict});
  }
  return out;
}

}  // namespace k3::server
