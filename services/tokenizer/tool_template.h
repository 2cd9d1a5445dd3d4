// K3's rendering of tools: the one table of it (docs/chat.md "Tool calls" cites where each
// piece comes from and says which pieces no public source shows). The chat template
// (chat_template.cpp) places these pieces; this file says what they are.
//
//   declaration  <|open|>message role="system" type="tool-declare"<|sep|> TEXT <|close|>message<|sep|><|end_of_msg|>
//                first of all messages (before the thinking-effort preamble)
//   calls        after the assistant's response channel:
//                <|open|>tools<|sep|> (<|open|>call tool="NAME" index="I"<|sep|> ARGS <|close|>call<|sep|>)*
//                <|close|>tools<|sep|>, I counting from 1; ARGS one
//                <|open|>argument key="K" type="T"<|sep|> VALUE <|close|>argument<|sep|> per argument, or
//                <|open|>json type="object"<|sep|> RAW <|close|>json<|sep|> for arguments that are not JSON
//   result       <|open|>message role="tool" tool="NAME" index="I"<|sep|> content <|close|>message<|sep|><|end_of_msg|>
//   tool choice  after the conversation, before the generation prompt: a role="system" type="tool-choice"
//                message for `required` (and a named function) and `none`; nothing for `auto`
//
// Tags are segmented as the released encoder segments them: the special tokens alone, the tag
// name, and each attribute as the texts ` KEY`, `="`, the escaped value and `"`, every text
// encoded on its own (so a value's bytes never merge with the quotes around it).
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat_types.h"

namespace k3::tok {

// A piece of a rendering: a control segment (special tokens allowed) or text (not).
struct Segment {
  bool control;
  std::string text;
  bool operator==(const Segment&) const = default;
};
using Segments = std::vector<Segment>;
using Attrs = std::vector<std::pair<std::string, std::string>>;

// `&` -> `&amp;`, then `"` -> `&quot;` (nothing else: `<` is not markup in XTML).
std::string EscapeAttr(std::string_view v);
void OpenTag(std::string_view tag, const Attrs& attrs, Segments* out);
void CloseTag(std::string_view tag, Segments* out);
// A whole message: open tag, the body as one text segment, close tag, <|end_of_msg|>.
void Message(const Attrs& attrs, const std::string& body, Segments* out);

// The tool-declare message for the request's `tools` (a JSON array): keys sorted at every depth,
// compact. Throws kExitBadInput when `tools_json` is not a JSON array.
Segments ToolDeclaration(const std::string& tools_json);
// The assistant's tools channel. Arguments that parse as a JSON object become argument
// elements in their own key order; text that does not parse becomes the json block; blank
// is no arguments. Throws kExitBadInput for arguments that parse to something else. A value
// that is not a string is written as Python's json.dumps writes it (", " and ": ", keys in
// their order, non-ASCII as is), the encoder's way.
Segments ToolsChannel(const std::vector<ToolCall>& calls);
// A forced call's opening, the tools channel up to its arguments: <|open|>tools<|sep|>
// <|open|>call tool="NAME" index="1"<|sep|><|open|>json type="object"<|sep|>. The json segment
// (not argument elements) because the constrained value is one JSON object; what closes it is
// <|close|>json<|sep|><|close|>call<|sep|><|close|>tools<|sep|>.
Segments ForcedCallOpening(const std::string& name);
// The tool-choice message (empty for kAuto).
Segments ToolChoiceMessage(ToolChoice choice);

}  // namespace k3::tok
