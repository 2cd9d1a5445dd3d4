#include "launcher/chat_input.h"

#include <histedit.h>
#include <unistd.h>

#include <cerrno>
#include <clocale>
#include <climits>
#include <cstring>
#include <cwchar>
#include <filesystem>
#include <sys/stat.h>

#include "common/error.h"
#include "common/user_file.h"
#include "launcher/input_history.h"

namespace k3::launch {

// Terminal modes (xterm's, which tmux and every common terminal follow): bracketed paste wraps
// a paste in ESC[200~ ... ESC[201~ while it is on.
namespace {
constexpr const char* kPasteOn = "\x1b[?2004h";
constexpr const char* kPasteOff = "\x1b[?2004l";
constexpr const char* kPasteStart = "\x1b[200~";
constexpr const wchar_t* kPasteEnd = L"\x1b[201~";

void WriteOut(const char* s) {
  std::fflush(stdout);
  for (size_t n = std::strlen(s); n > 0;) {
    const ssize_t w = ::write(STDOUT_FILENO, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}
}  // namespace

struct ChatInput::Editor {
  ChatInput* owner = nullptr;
  std::string path;  // the history file; "" when none (or not ours)
  std::function<void(const std::string&)> note;
  EditLine* el = nullptr;
  History* hist = nullptr;
  HistEvent ev{};
  std::string bytes;   // read from the terminal, not yet handed to libedit
  std::mbstate_t mb{};
  bool eof = false, interrupted = false, stopped = false;

  ~Editor() {
    if (el) el_end(el);
    if (hist) history_end(hist);
  }

  static Editor* Of(EditLine* el) {
    void* p = nullptr;
    el_get(el, EL_CLIENTDATA, &p);
    return static_cast<Editor*>(p);
  }
  static char* Prompt(EditLine*) { return const_cast<char*>("> "); }

  // libedit's read function: one character from the terminal, waiting through the caller's
  // loop. -1 ends el_gets (Ctrl-C seen by the loop, or the session stopping).
  static int ReadChar(EditLine* el, wchar_t* out) {
    Editor* e = Of(el);
    for (;;) {
      if (!e->bytes.empty()) {
        const size_t n = std::mbrtowc(out, e->bytes.data(), e->bytes.size(), &e->mb);
        if (n == static_cast<size_t>(-2) && !e->eof) {
          e->bytes.clear();  // mbrtowc kept the partial character in mb
        } else {
          if (n == static_cast<size_t>(-1) || n == static_cast<size_t>(-2)) {  // not UTF-8: the byte as is
            *out = static_cast<unsigned char>(e->bytes[0]);
            e->mb = {};
            e->bytes.erase(0, 1);
          } else {
            e->bytes.erase(0, n == 0 ? 1 : n);
          }
          return 1;
        }
        continue;
      }
      if (e->eof) return 0;
      const Wake w = e->owner->wait_();
      if (w == Wake::kInterrupt || w == Wake::kStop) {
        (w == Wake::kInterrupt ? e->interrupted : e->stopped) = true;
        errno = EINTR;
        return -1;
      }
      if (w != Wake::kReady) continue;
      char buf[512];
      const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n > 0) e->bytes.append(buf, static_cast<size_t>(n));
      else if (n == 0 || (errno != EINTR && errno != EAGAIN)) e->eof = true;
    }
  }

  // Bound to ESC[200~: the paste up to ESC[201~ goes into the line as it is, newlines included.
  static unsigned char Paste(EditLine* el, int) {
    std::wstring text;
    const size_t end_len = std::wcslen(kPasteEnd);
    for (wchar_t c; el_wgetc(el, &c) == 1;) {
      text.push_back(c);
      if (text.size() >= end_len && text.compare(text.size() - end_len, end_len, kPasteEnd) == 0) {
        text.resize(text.size() - end_len);
        break;
      }
    }
    std::string mb;  // back to the locale's bytes (UTF-8) for the line-end rule and libedit
    std::mbstate_t st{};
    for (wchar_t c : text) {
      char b[MB_LEN_MAX];
      const size_t n = std::wcrtomb(b, c, &st);
      if (n != static_cast<size_t>(-1)) mb.append(b, n);
    }
    const std::string pasted = PastedText(mb);
    if (!pasted.empty()) el_insertstr(el, pasted.c_str());
    return CC_REFRESH;
  }

  // Ctrl-C as a key (a terminal without ISIG): what the SIGINT would have done.
  static unsigned char Interrupt(EditLine* el, int) {
    Of(el)->interrupted = true;
    return CC_EOF;
  }

  void Load() {
    if (path.empty()) return;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return;
    try {
      const InputHistory h = ParseInputHistory(ReadUserFile(path, kMaxHistoryFileBytes, "input history", kExitBadInput));
      if (h.bad_line) {
        note("[chat] input history " + path + ": line " + std::to_string(*h.bad_line) +
             " is not a JSON string; not used or written this session");
        path.clear();
        return;
      }
      for (const std::string& s : h.entries) history(hist, &ev, H_ENTER, s.c_str());
    } catch (const Error& err) {
      note(std::string("[chat] ") + err.what() + "; no input history this session");
      path.clear();
    }
  }

  // Appends `line` to the file as it is now (another session may have added to it), newest
  // kept, written atomically.
  void Save(const std::string& line) {
    if (path.empty()) return;
    try {
      std::vector<std::string> entries;
      std::error_code ec;
      if (std::filesystem::exists(path, ec)) {
        InputHistory h = ParseInputHistory(ReadUserFile(path, kMaxHistoryFileBytes, "input history", kExitBadInput));
        if (h.bad_line) throw Error(kExitBadInput, "input history " + path + ": changed into something else");
        entries = std::move(h.entries);
      } else {
        const auto dir = std::filesystem::path(path).parent_path();
        // ~/.local/state/k3 on a first run: the lines typed are the user's alone (0700).
        if (!dir.empty() && std::filesystem::create_directories(dir, ec))
          std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
      }
      if (entries.empty() || entries.back() != line) entries.push_back(line);
      WriteFileAtomically(path, InputHistoryText(entries), "input history", kExitOutput);
    } catch (const std::exception& err) {
      note(std::string("[chat] ") + err.what() + "; the input history is not written this session");
      path.clear();
    }
  }
};

ChatInput::ChatInput(bool terminal, std::string history_path, WaitForInput wait,
                     std::function<void(const std::string&)> note)
    : wait_(std::move(wait)) {
  if (!terminal) return;
  // libedit reads and shows characters by the locale's encoding: UTF-8 wanted (LC_CTYPE only;
  // numbers keep the C locale).
  const char* loc = std::setlocale(LC_CTYPE, "");
  if (!loc || !std::strstr(loc, "UTF-8")) std::setlocale(LC_CTYPE, "C.UTF-8");
  editor_ = std::make_unique<Editor>();
  Editor& e = *editor_;
  e.owner = this;
  e.path = std::move(history_path);
  e.note = std::move(note);
  e.hist = history_init();
  history(e.hist, &e.ev, H_SETSIZE, static_cast<int>(kInputHistoryMax));
  history(e.hist, &e.ev, H_SETUNIQUE, 1);
  e.el = el_init("k3-launch", stdin, stdout, stderr);
  if (!e.el) throw RuntimeFailure("--chat: libedit could not start on this terminal");
  el_set(e.el, EL_CLIENTDATA, &e);
  el_set(e.el, EL_EDITOR, "emacs");
  el_set(e.el, EL_SIGNAL, 0);  // the launcher's handlers stay: Ctrl-C reaches the caller's loop
  el_set(e.el, EL_PROMPT, &Editor::Prompt);
  el_set(e.el, EL_HIST, history, e.hist);
  el_set(e.el, EL_GETCFN, &Editor::ReadChar);
  el_set(e.el, EL_ADDFN, "k3-paste", "bracketed paste", &Editor::Paste);
  el_set(e.el, EL_ADDFN, "k3-interrupt", "Ctrl-C", &Editor::Interrupt);
  el_set(e.el, EL_BIND, kPasteStart, "k3-paste", nullptr);
  el_set(e.el, EL_BIND, "^C", "k3-interrupt", nullptr);
  // The keys terminals send in either cursor mode (libedit binds only the terminfo entry's).
  const char* binds[][2] = {
      {"\x1b[A", "ed-prev-history"}, {"\x1bOA", "ed-prev-history"}, {"\x1b[B", "ed-next-history"},
      {"\x1bOB", "ed-next-history"}, {"\x1b[C", "ed-next-char"},    {"\x1bOC", "ed-next-char"},
      {"\x1b[D", "ed-prev-char"},    {"\x1bOD", "ed-prev-char"},    {"\x1b[H", "ed-move-to-beg"},
      {"\x1bOH", "ed-move-to-beg"},  {"\x1b[1~", "ed-move-to-beg"}, {"\x1b[7~", "ed-move-to-beg"},
      {"\x1b[F", "ed-move-to-end"},  {"\x1bOF", "ed-move-to-end"},  {"\x1b[4~", "ed-move-to-end"},
      {"\x1b[8~", "ed-move-to-end"}, {"\x1b[3~", "ed-delete-next-char"}, {"\x1b[1;5D", "ed-prev-word"},
      {"\x1b[1;5C", "em-next-word"},
  };
  for (const auto& b : binds) el_set(e.el, EL_BIND, b[0], b[1], nullptr);
  e.Load();
}

ChatInput::~ChatInput() = default;

Input ChatInput::Read(std::string* line) {
  if (!editor_) return ReadPiped(line);
  Editor& e = *editor_;
  e.interrupted = e.stopped = false;
  el_resize(e.el);  // libedit's SIGWINCH handler is off (EL_SIGNAL 0): a resize is seen at the next prompt
  WriteOut(kPasteOn);
  int count = 0;
  const char* got = el_gets(e.el, &count);
  WriteOut(kPasteOff);
  if (e.stopped) return Input::kStop;
  if (e.interrupted) {
    WriteOut("\n");
    return Input::kInterrupt;
  }
  if (!got || count <= 0) {
    WriteOut("\n");  // Ctrl-D: the shell's prompt on a line of its own
    return Input::kEof;
  }
  *line = got;
  if (!line->empty() && line->back() == '\n') line->pop_back();
  if (!line->empty()) {
    history(e.hist, &e.ev, H_ENTER, line->c_str());
    e.Save(*line);
  }
  return Input::kLine;
}

Input ChatInput::ReadPiped(std::string* line) {
  for (;;) {
    const size_t nl = inbuf_.find('\n');
    if (nl != std::string::npos) {
      *line = inbuf_.substr(0, nl);
      inbuf_.erase(0, nl + 1);
      if (!line->empty() && line->back() == '\r') line->pop_back();
      return Input::kLine;
    }
    if (eof_) {
      if (inbuf_.empty()) return Input::kEof;
      *line = std::move(inbuf_);  // a last line without its newline
      inbuf_.clear();
      return Input::kLine;
    }
    const Wake w = wait_();
    if (w == Wake::kStop) return Input::kStop;
    if (w == Wake::kInterrupt) return Input::kInterrupt;
    if (w != Wake::kReady) continue;
    char buf[4096];
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n > 0) inbuf_.append(buf, static_cast<size_t>(n));
    else if (n == 0 || (errno != EINTR && errno != EAGAIN)) eof_ = true;
  }
}

}  // namespace k3::launch
