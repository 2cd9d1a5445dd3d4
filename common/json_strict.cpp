#include "common/json_strict.h"

#include <vector>

namespace k3 {
namespace {

using json = nlohmann::json;

// SAX handler that builds the DOM itself so a repeated key is caught where it is inserted
// (one map lookup, no side table). nlohmann's own DOM builder would silently overwrite it.
class StrictDomBuilder {
 public:
  StrictDomBuilder(json& root, const JsonLimits& limits) : root_(root), limits_(limits) {}

  bool null() { return Put(nullptr) != nullptr; }
  bool boolean(bool v) { return Put(v) != nullptr; }
  bool number_integer(json::number_integer_t v) { return Put(v) != nullptr; }
  bool number_unsigned(json::number_unsigned_t v) { return Put(v) != nullptr; }
  bool number_float(json::number_float_t v, const json::string_t&) { return Put(v) != nullptr; }
  bool string(json::string_t& v) { return Put(std::move(v)) != nullptr; }
  bool binary(json::binary_t& v) { return Put(json::binary(std::move(v))) != nullptr; }
  bool start_object(std::size_t) {
    json* o = Put(json::object());
    if (o == nullptr || !Deeper()) return false;
    stack_.push_back(o);
    return true;
  }
  bool key(json::string_t& k) {
    if (!Charge(JsonKeyCost(k.size()))) return false;
    auto& obj = stack_.back()->get_ref<json::object_t&>();
    auto [it, inserted] = obj.emplace(k, nullptr);
    if (!inserted) {
      duplicate_ = k;
      return false;  // stops the parse
    }
    slot_ = &it->second;  // std::map nodes are stable
    return true;
  }
  bool end_object() {
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    json* a = Put(json::array());
    if (a == nullptr || !Deeper()) return false;
    stack_.push_back(a);
    return true;
  }
  bool end_array() {
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    error_ = ex.what();
    return false;
  }

  const std::string& error() const { return error_; }
  const std::string& duplicate() const { return duplicate_; }
  const std::string& over_limit() const { return over_limit_; }

 private:
  bool Deeper() {
    if (limits_.max_depth == 0 || stack_.size() < limits_.max_depth) return true;
    over_limit_ = "nested deeper than " + std::to_string(limits_.max_depth) + " arrays and objects";
    return false;
  }
  bool Charge(size_t cost) {
    parsed_bytes_ += cost;
    if (limits_.max_parsed_bytes == 0 || parsed_bytes_ <= limits_.max_parsed_bytes) return true;
    over_limit_ = "more than " + std::to_string(limits_.max_parsed_bytes) + " bytes once parsed";
    return false;
  }

  // Places a value in the open container (or as the root) and returns where it lives.
  // An array element's address is only kept while it is the last element, so later
  // push_backs into that array (which may reallocate) never happen while it is on the stack.
  json* Put(json v) {
    if (!Charge(JsonValueCost(v))) return nullptr;
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json* top = stack_.back();
    if (top->is_array()) {
      auto& arr = top->get_ref<json::array_t&>();
      arr.push_back(std::move(v));
      return &arr.back();
    }
    *slot_ = std::move(v);
    return slot_;
  }

  json& root_;
  const JsonLimits limits_;
  size_t parsed_bytes_ = 0;
  std::string over_limit_;
  std::vector<json*> stack_;
  json* slot_ = nullptr;
  std::string error_;
  std::string duplicate_;
};

}  // namespace

std::string Printable(std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  constexpr size_t kMax = 200;
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMax; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMax) out += "...";
  return out;
}

size_t JsonValueCost(const nlohmann::json& v) {
  size_t cost = sizeof(json);
  if (v.is_array()) cost += sizeof(json::array_t) + 16;    // the vector and its allocation header
  if (v.is_object()) cost += sizeof(json::object_t) + 16;  // the map
  if (v.is_string()) cost += sizeof(json::string_t) + 16 + v.get_ref<const json::string_t&>().size();
  return cost;
}

size_t JsonKeyCost(size_t key_size) { return 64 + sizeof(json::string_t) + key_size; }  // a map node

nlohmann::json ParseJsonStrict(std::string_view text, const std::string& what_for, ExitCode code) {
  return ParseJsonStrict(text, what_for, code, JsonLimits{});
}

nlohmann::json ParseJsonStrict(std::string_view text, const std::string& what_for, ExitCode code,
                               const JsonLimits& limits) {
  json root;
  StrictDomBuilder sax(root, limits);
  const char* begin = text.data();
  const bool ok = json::sax_parse(begin, begin + text.size(), &sax, json::input_format_t::json,
                                  /*strict=*/true, /*ignore_comments=*/false);
  if (!ok) {
    if (!sax.over_limit().empty()) throw Error(code, what_for + ": " + sax.over_limit());
    if (!sax.error().empty())
      // nlohmann messages are single-line; they carry the byte position and the reason
      // (including "ill-formed UTF-8 byte").
      throw Error(code, what_for + ": invalid JSON: " + Printable(sax.error()));
    throw Error(code, what_for + ": duplicate key \"" + Printable(sax.duplicate()) + "\"");
  }
  return root;
}

}  // namespace k3
