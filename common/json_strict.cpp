#include "common/json_strict.h"

#include <vector>

namespace k3 {
namespace {

using json = nlohmann::json;

// SAX handler that builds the DOM itself so a repeated key is caught where it is inserted
// (one map lookup, no side table). nlohmann's own DOM builder would silently overwrite it.
class StrictDomBuilder {
 public:
  explicit StrictDomBuilder(json& root) : root_(root) {}

  bool null() { return Put(nullptr) != nullptr; }
  bool boolean(bool v) { return Put(v) != nullptr; }
  bool number_integer(json::number_integer_t v) { return Put(v) != nullptr; }
  bool number_unsigned(json::number_unsigned_t v) { return Put(v) != nullptr; }
  bool number_float(json::number_float_t v, const json::string_t&) { return Put(v) != nullptr; }
  bool string(json::string_t& v) { return Put(std::move(v)) != nullptr; }
  bool binary(json::binary_t& v) { return Put(json::binary(std::move(v))) != nullptr; }
  bool start_object(std::size_t) {
    stack_.push_back(Put(json::object()));
    return true;
  }
  bool key(json::string_t& k) {
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
    stack_.push_back(Put(json::array()));
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

 private:
  // Places a value in the open container (or as the root) and returns where it lives.
  // An array element's address is only kept while it is the last element, so later
  // push_backs into that array (which may reallocate) never happen while it is on the stack.
  json* Put(json v) {
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

nlohmann::json ParseJsonStrict(std::string_view text, const std::string& what_for, ExitCode code) {
  json root;
  StrictDomBuilder sax(root);
  const char* begin = text.data();
  const bool ok = json::sax_parse(begin, begin + text.size(), &sax, json::input_format_t::json,
                                  /*strict=*/true, /*ignore_comments=*/false);
  if (!ok) {
    if (!sax.error().empty())
      // nlohmann messages are single-line; they carry the byte position and the reason
      // (including "ill-formed UTF-8 byte").
      throw Error(code, what_for + ": invalid JSON: " + Printable(sax.error()));
    throw Error(code, what_for + ": duplicate key \"" + Printable(sax.duplicate()) + "\"");
  }
  return root;
}

}  // namespace k3
