#include "launcher/chat_settings.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/sampling_check.h"
#include "common/sampling_params.h"

namespace k3::launch {
namespace {

std::string Num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// Whole-text numbers only: "0.7x", "" or "1e999" are not numbers.
bool ParseReal(const std::string& t, float* out) {
  if (t.empty() || std::isspace(static_cast<unsigned char>(t[0]))) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(t.c_str(), &end);
  if (*end != '\0' || errno == ERANGE || !std::isfinite(v)) return false;
  *out = static_cast<float>(v);
  return true;
}

template <typename I>
bool ParseInt(const std::string& t, I* out) {
  const char* b = t.data();
  const char* e = b + t.size();
  if (b != e && *b == '+') ++b;  // from_chars takes no '+'
  auto [p, ec] = std::from_chars(b, e, *out);
  return !t.empty() && ec == std::errc() && p == e;
}

std::string Normalized(std::string key) {
  for (char& c : key)
    if (c == '-') c = '_';
  return key;
}

}  // namespace

std::string SetKeys() {
  std::string keys;
  for (const SamplingParam& p : kSamplingParams) keys += std::string(keys.empty() ? "" : ", ") + p.key;
  return keys + ", seed, think, effort";
}

std::string ApplySet(ChatSettings& s, const std::string& arg) {
  const size_t sp = arg.find(' ');
  const std::string key = Normalized(arg.substr(0, sp));
  std::string value = sp == std::string::npos ? "" : arg.substr(sp + 1);
  while (!value.empty() && value.front() == ' ') value.erase(0, 1);
  while (!value.empty() && value.back() == ' ') value.pop_back();
  if (value.empty() || value.find(' ') != std::string::npos)
    return "/set " + key + ": want one value (/set KEY VALUE; keys: " + SetKeys() + ")";

  if (key == "think") {
    if (value != "on" && value != "off") return "/set think " + value + ": want on or off";
    s.thinking = value == "on";
    return "";
  }
  if (key == "effort") {
    if (!IsThinkingEffort(value)) return "/set effort " + value + ": want low, high or max";
    s.effort = value;
    s.thinking = true;
    return "";
  }
  if (key == "seed") {
    uint64_t seed = 0;
    if (!ParseInt(value, &seed)) return "/set seed " + value + ": want an integer from 0 to 2^64-1";
    s.sampling.seed = seed;
    return "";
  }
  for (const SamplingParam& p : kSamplingParams) {
    if (key != p.key) continue;
    ipc::compute::Sampling next = s.sampling;
    if (p.real) {
      if (!ParseReal(value, &(next.*p.real))) return "/set " + key + " " + value + ": not a number";
    } else if (!ParseInt(value, &(next.*p.integer))) {
      return "/set " + key + " " + value + ": not an integer";
    }
    if (std::string bad = SamplingProblem(next, -1); !bad.empty()) return "/set: " + bad;
    s.sampling = next;
    return "";
  }
  return "/set: unknown key '" + key + "' (keys: " + SetKeys() + ")";
}

std::string ChatHelp(bool local) {
  std::string h = "/reset  forget the conversation\n";
  if (local)
    h += "/save PATH  save the conversation (compute's state and the history)\n"
         "/load PATH  continue a saved conversation\n";
  h += "/set  show the sampling and thinking settings; /set KEY VALUE changes one for the next turns\n"
       "      (" + SetKeys() + "; think on|off, effort low|high|max)\n"
       "/quit  end (also Ctrl-D on an empty line, or Ctrl-C at the prompt)\n"
       "Ctrl-C during a reply stops the reply. Up/Down recall earlier lines, also of earlier sessions;\n"
       "a pasted block is one message.\n";
  return h;
}

std::string SettingsText(const ChatSettings& s) {
  std::string t;
  for (const SamplingParam& p : kSamplingParams)
    t += std::string(p.key) + " " + (p.real ? Num(s.sampling.*p.real) : std::to_string(s.sampling.*p.integer)) + "  ";
  t += "seed " + std::to_string(s.sampling.seed) + "  think " + (s.thinking ? "on" : "off");
  if (s.thinking) t += "  effort " + s.effort;
  return t;
}

}  // namespace k3::launch
