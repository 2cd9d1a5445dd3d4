// The byte matcher against texts whose validity follows from JSON (RFC 8259) and JSON Schema
// alone, and random walks over the bytes it allows, parsed by nlohmann-json and checked
// against the schema's own rules.
#include <gtest/gtest.h>

#include <random>

#include "test_text.h"

namespace k3::json_constraint {
namespace {
using testing::Accepts;
using testing::MatcherFor;

const char* kPerson = R"({"type":"object","properties":{
  "name":{"type":"string"},"age":{"type":"integer"},"email":{"type":["string","null"]},
  "tags":{"type":"array","items":{"enum":["a","ab","b"]},"minItems":1,"maxItems":2},
  "score":{"type":"number"},"ok":{"type":"boolean"}},
  "required":["name","tags"],"additionalProperties":false})";

TEST(Matcher, AcceptsValidInstancesInOrder) {
  const Matcher m = MatcherFor(kPerson);
  EXPECT_TRUE(Accepts(m, R"({"name":"Ann","tags":["a"]})"));
  EXPECT_TRUE(Accepts(m, R"({"name":"","age":-12,"email":null,"tags":["ab","b"],"score":1.5e-3,"ok":false})"));
  EXPECT_TRUE(Accepts(m, R"({"name":"caf\u00e9 \"q\" \\ \n","tags":["b"],"score":0})"));
  EXPECT_TRUE(Accepts(m, "{\"name\":\"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\",\"tags\":[\"a\"]}"));
}

TEST(Matcher, RefusesInvalidInstances) {
  const Matcher m = MatcherFor(kPerson);
  EXPECT_FALSE(Accepts(m, R"({"tags":["a"]})"));                           // required name missing
  EXPECT_FALSE(Accepts(m, R"({"name":"A"})"));                              // required tags missing
  EXPECT_FALSE(Accepts(m, R"({"name":"A","tags":[]})"));                    // minItems 1
  EXPECT_FALSE(Accepts(m, R"({"name":"A","tags":["a","b","a"]})"));         // maxItems 2
  EXPECT_FALSE(Accepts(m, R"({"name":"A","tags":["c"]})"));                 // not in the enum
  EXPECT_FALSE(Accepts(m, R"({"name":"A","tags":["a"],"x":1})"));           // additionalProperties false
  EXPECT_FALSE(Accepts(m, R"({"name":"A","age":1.5,"tags":["a"]})"));       // integer
  EXPECT_FALSE(Accepts(m, R"({"name":"A","age":01,"tags":["a"]})"));        // leading zero
  EXPECT_FALSE(Accepts(m, R"({"name":"A","tags":["a"],"score":1.})"));      // digit after the point
  EXPECT_FALSE(Accepts(m, R"({"name":"A","tags":["a"],"ok":tru})"));
  EXPECT_FALSE(Accepts(m, R"({"name":"A\q","tags":["a"]})"));               // bad escape
  EXPECT_FALSE(Accepts(m, R"({"name":"\ud83d","tags":["a"]})"));            // surrogate escapes refused
  EXPECT_FALSE(Accepts(m, "{\"name\":\"\xc0\xaf\",\"tags\":[\"a\"]}"));     // overlong UTF-8
  EXPECT_FALSE(Accepts(m, "{\"name\":\"\xed\xa0\x80\",\"tags\":[\"a\"]}"));  // UTF-8 surrogate
  EXPECT_FALSE(Accepts(m, "{\"name\":\"a\nb\",\"tags\":[\"a\"]}"));         // raw control character
  EXPECT_FALSE(Accepts(m, R"({ "name":"A","tags":["a"]})"));                // compact output: no whitespace
  EXPECT_FALSE(Accepts(m, R"({"name":"A","tags":["a"]})" "x"));             // nothing after the value
  EXPECT_FALSE(Accepts(m, R"({"name":"A","tags":["a"])"));                  // not complete
}

TEST(Matcher, NumbersAtTheRootEndOnlyWhenComplete) {
  const Matcher m = MatcherFor(R"({"type":"number"})");
  EXPECT_TRUE(Accepts(m, "-0.25e+10"));
  EXPECT_TRUE(Accepts(m, "7"));
  EXPECT_FALSE(Accepts(m, "-"));
  EXPECT_FALSE(Accepts(m, "1e"));
  EXPECT_FALSE(Accepts(m, "12345678901234567"));  // 17 digits: numbers are bounded so a value ends
}

TEST(Matcher, EnumsWhoseTextsArePrefixesOfOthers) {
  const Matcher m = MatcherFor(R"({"type":"array","items":{"enum":[1,10,100]}})");
  EXPECT_TRUE(Accepts(m, "[1,10,100,1]"));
  EXPECT_FALSE(Accepts(m, "[1000]"));
  EXPECT_FALSE(Accepts(m, "[2]"));
}

TEST(Matcher, AnyOfAlternativesSharingAPrefix) {
  const Matcher m = MatcherFor(R"({"anyOf":[
    {"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number"}},"required":["kind","r"]},
    {"type":"object","properties":{"kind":{"const":"square"},"side":{"type":"number"}},"required":["kind","side"]}]})");
  EXPECT_TRUE(Accepts(m, R"({"kind":"circle","r":2})"));
  EXPECT_TRUE(Accepts(m, R"({"kind":"square","side":2})"));
  EXPECT_FALSE(Accepts(m, R"({"kind":"circle","side":2})"));
}

TEST(Matcher, UuidFormat) {
  const Matcher m = MatcherFor(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(Accepts(m, R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(Accepts(m, R"("123e4567e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(Accepts(m, R"("123e4567-e89b-12d3-a456-42661417400")"));
}

TEST(Matcher, RecursionIsCutAtTheDepthBound) {
  const Matcher m = MatcherFor(R"({"type":"object","properties":{"n":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["n"]})");
  EXPECT_TRUE(Accepts(m, R"({"n":{"n":{"n":null}}})"));
  std::string deep;
  for (int i = 0; i < kMaxDepth + 2; ++i) deep += "{\"n\":";
  EXPECT_FALSE(Accepts(m, deep));
}

TEST(Matcher, JsonObjectTakesAnyObject) {
  const Matcher m = MatcherFor(R"({"type":"object"})");
  EXPECT_TRUE(Accepts(m, R"({"a":[1,{"b":null},"x",true,[]],"":{}})"));
  EXPECT_TRUE(Accepts(m, "{}"));
  EXPECT_FALSE(Accepts(m, "[]"));
  EXPECT_FALSE(Accepts(m, R"({"a"})"));
}

// Walks: a random byte among those the matcher allows, from an alphabet that holds every
// structural byte, until the value is complete. Each text must parse and obey the schema.
std::string Walk(const Matcher& m, std::mt19937_64& rng, size_t limit) {
  std::string alphabet;
  for (int c = 0x20; c < 0x7f; ++c) alphabet += static_cast<char>(c);
  alphabet += "\xc3\xa9\xe4\xb8\xad";
  State s = m.Start(), next;
  std::string text;
  while (text.size() < limit) {
    if (m.Accepting(s)) return text;
    std::vector<char> ok;
    for (char c : alphabet)
      if (m.Feed(s, static_cast<uint8_t>(c), next)) ok.push_back(c);
    if (ok.empty()) return "";  // never: every state has a continuation
    const char c = ok[rng() % ok.size()];
    m.Feed(s, static_cast<uint8_t>(c), next);
    std::swap(s, next);
    text += c;
  }
  return "(too long)";
}

TEST(Matcher, RandomWalksParseAndObeyTheSchema) {
  const Matcher m = MatcherFor(kPerson);
  std::mt19937_64 rng(7);
  int complete = 0;
  for (int n = 0; n < 60; ++n) {
    const std::string text = Walk(m, rng, 4000);
    ASSERT_NE(text, "");
    if (text == "(too long)") continue;
    ++complete;
    nlohmann::json v;
    ASSERT_NO_THROW(v = nlohmann::json::parse(text)) << text;
    ASSERT_TRUE(v.is_object()) << text;
    EXPECT_TRUE(v.contains("name") && v["name"].is_string()) << text;
    ASSERT_TRUE(v.contains("tags") && v["tags"].is_array()) << text;
    EXPECT_GE(v["tags"].size(), 1u);
    EXPECT_LE(v["tags"].size(), 2u);
    for (const auto& t : v["tags"]) EXPECT_TRUE(t == "a" || t == "ab" || t == "b") << text;
    for (const auto& [k, x] : v.items()) {
      EXPECT_TRUE(k == "name" || k == "age" || k == "email" || k == "tags" || k == "score" || k == "ok") << text;
      if (k == "age") {
        EXPECT_TRUE(x.is_number_integer()) << text;
      }
      if (k == "email") {
        EXPECT_TRUE(x.is_string() || x.is_null()) << text;
      }
      if (k == "score") {
        EXPECT_TRUE(x.is_number()) << text;
      }
      if (k == "ok") {
        EXPECT_TRUE(x.is_boolean()) << text;
      }
    }
  }
  EXPECT_GT(complete, 40);
}

}  // namespace
}  // namespace k3::json_constraint
