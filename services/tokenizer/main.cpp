// k3-tokenizer: the tokenizer as a command-line tool.
//   encode --vocab DIR [--file PATH]        ids of the file's bytes (stdin without --file)
//   decode --vocab DIR --ids 1,2,3          the bytes of the ids
//          (or --ids-file PATH holding the same comma-separated list, for long streams)
//   chat   --vocab DIR --history PATH [--no-think | --thinking-effort E]
//                                           ids of the rendered transcript + generation prompt
//   serve  --vocab DIR --control EP --bind EP  the pipeline service (service_process.h, docs/pipeline.md)
// Errors print "k3-tokenizer: <message>" and exit with the k3::ExitCode of the error.
#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/cli_parse.h"
#include "common/error.h"
#include "common/id_list.h"
#include "common/run_main.h"
#include "common/stdout_writer.h"
#include "common/user_file.h"
#include "common/process_init.h"
#include "chat_template.h"
#include "history.h"
#include "service_process.h"
#include "tokenizer.h"

namespace {

std::string ReadAll(const std::string& path) {
  std::ostringstream ss;
  if (path.empty()) {
    ss << std::cin.rdbuf();
    if (std::cin.bad()) throw k3::RuntimeFailure("stdin: read error");
    return ss.str();
  }
  return k3::ReadUserFile(path, k3::kMaxTextFileBytes, "", k3::kExitBadInput, k3::FileKinds::kRegularOrPipe);
}

// `source` names where the list came from; a bad list in a file is bad input, on the
// command line a usage error.
std::vector<uint32_t> ParseIds(const std::string& text, const std::string& source, bool from_file) {
  std::vector<uint32_t> ids;
  for (int64_t id : k3::ParseIdList(text, source, int64_t{1} << 32, from_file ? k3::kExitBadInput : k3::kExitUsage))
    ids.push_back(static_cast<uint32_t>(id));
  return ids;
}

// Ids as "1,2,3\n", written once. Formats digits into one preallocated buffer: per-id
// std::to_string and appends were a visible part of `encode` on megabyte inputs.
void PrintIds(const std::vector<uint32_t>& ids) {
  std::string out(ids.size() * 11 + 1, '\0');  // 10 digits + comma per id
  char* p = out.data();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) *p++ = ',';
    p = std::to_chars(p, out.data() + out.size(), ids[i]).ptr;
  }
  *p++ = '\n';
  k3::WriteStdoutOrStop({out.data(), static_cast<size_t>(p - out.data())});
}

}  // namespace

int main(int argc, char** argv) {
  k3::InitProcess();  // whole stderr lines, harmless signals (common/process_init.h)
  CLI::App app{"k3-tokenizer: K3 text <-> token ids and the XTML chat format"};
  app.require_subcommand(1);
  std::string vocab, file, ids_text, history, effort = "max";
  bool no_think = false;

  auto* enc = app.add_subcommand("encode", "print the ids of a file's bytes (stdin if no --file)");
  enc->add_option("--vocab", vocab, "directory with tiktoken.model and tokenizer_config.json")->required();
  enc->add_option("--file", file, "input file");
  auto* dec = app.add_subcommand("decode", "print the text of comma-separated ids");
  dec->add_option("--vocab", vocab, "tokenizer directory")->required();
  std::string ids_file;
  auto* ids_opt = dec->add_option("--ids", ids_text, "comma-separated ids");
  auto* ids_file_opt = dec->add_option("--ids-file", ids_file, "file with comma-separated ids");
  ids_opt->excludes(ids_file_opt);
  auto* chat = app.add_subcommand("chat", "print the ids of a rendered JSONL history");
  chat->add_option("--vocab", vocab, "tokenizer directory")->required();
  chat->add_option("--history", history, "JSONL history ending with a user message")->required();
  auto* nt = chat->add_flag("--no-think", no_think, "thinking off: no preamble, response channel only");
  chat->add_option("--thinking-effort", effort, "low, high or max (default max)")->excludes(nt);
  k3::tok::ServeOptions serve_opt;
  auto* serve = app.add_subcommand("serve", "run as the pipeline's tokenizer service");
  serve->add_option("--vocab", serve_opt.vocab, "tokenizer directory")->required();
  serve->add_option("--control", serve_opt.control, "launcher control endpoint")->required();
  serve->add_option("--bind", serve_opt.bind, "endpoint this service binds (ROUTER)")->required();

  return k3::RunMain("k3-tokenizer", [&]() -> int {
    if (!k3::ParseCommandLine(app, argc, argv, "k3-tokenizer")) return k3::kExitOk;
    if (serve->parsed()) return k3::tok::Serve(serve_opt);  // the pipeline service (service_shell.h)
    // The command-line modes: a closed stdout (| head) or a stop signal is exit 5 (quiet).
    k3::IgnoreSigpipe();
    k3::ExitOnStopSignals();
    if (chat->parsed() && !no_think && !k3::tok::IsValidThinkingEffort(effort))
      throw k3::UsageError("--thinking-effort must be low, high or max");
    const auto tok = k3::tok::Tokenizer::Load(vocab);
    if (enc->parsed()) {
      PrintIds(tok.Encode(ReadAll(file), /*allow_special=*/false));
    } else if (dec->parsed()) {
      if (ids_opt->count() == 0 && ids_file_opt->count() == 0)
        throw k3::UsageError("decode needs --ids or --ids-file");
      if (ids_file_opt->count() > 0) {
        ids_text = ReadAll(ids_file);
        while (!ids_text.empty() && (ids_text.back() == '\n' || ids_text.back() == '\r')) ids_text.pop_back();
      }
      const bool from_file = ids_file_opt->count() > 0;
      const std::string text = tok.Decode(ParseIds(ids_text, from_file ? ids_file : "--ids", from_file));
      k3::WriteStdoutOrStop(text);
    } else {
      const auto msgs = k3::tok::ReadHistory(history);
      const k3::tok::ChatTemplate tmpl(tok);
      k3::tok::ChatOptions opt;
      opt.thinking = !no_think;
      opt.thinking_effort = effort;
      PrintIds(tmpl.Render(msgs, opt, /*add_generation_prompt=*/true));
    }
    return k3::kExitOk;
  });
}
