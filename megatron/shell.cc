// The interpreter works in three steps, as bash does: the lexer cuts the text into words
// (kept as written, quotes and all) and operators, the parser builds commands from them, and
// the interpreter runs the commands, expanding each word only when its command runs (so
// `A=1; B=$A` sees A). Sections: limits, scanning, lexing, parsing, values and fields,
// arithmetic, patterns, expansion, conditions, running.
#include "megatron/shell.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <memory>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/text.h"

namespace ptdp {
namespace {

// ---- Limits: hostile input must neither hang nor exhaust memory ------------------------------

constexpr size_t kMaxWords = 1'000'000;                  // words in all listed commands
constexpr size_t kMaxValueBytes = size_t{16} << 20;      // one variable's value
constexpr size_t kMaxExpandedBytes = size_t{256} << 20;  // all text expansions produce
constexpr size_t kFieldOverheadBytes = 32;               // charged per field: bounds their count
constexpr int64_t kMaxCommands = 100'000;                // commands run, functions' included
constexpr int64_t kMaxWork = 200'000'000;            // arithmetic tokens and pattern-matching steps
constexpr int kMaxLoopIterations = 1000;             // `for` iterations in all loops together
constexpr int kMaxCallDepth = 16;                    // nested function calls
constexpr int kMaxSourceDepth = 8;                   // nested `source` and `eval`
constexpr size_t kMaxParsedBytes = size_t{1} << 20;  // the script, sourced files, eval, in all
static_assert(kMaxParsedBytes == kMaxShellTextBytes);
constexpr int kMaxNesting = 100;  // nested constructs in the text and expressions

// ---- Scanning: where a quoted string or an expansion ends -------------------------------------
// The lexer and the expander share these so that both cut the text at the same places. Each
// takes the index of the opening character and returns the index just past the construct, or
// npos when the text ends first.

constexpr size_t npos = std::string_view::npos;

// Thrown by the scanners when constructs nest deeper than kMaxNesting; the lexer names the line.
struct TooDeep {};

bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsBlank(char c) { return c == ' ' || c == '\t'; }

size_t SkipDollar(std::string_view s, size_t i, int depth, bool in_double_quotes);

size_t SkipSingleQuoted(std::string_view s, size_t i) {
  const size_t end = s.find('\'', i + 1);
  return end == npos ? npos : end + 1;
}

// $'...': a backslash escapes the next character, quote included.
size_t SkipAnsiC(std::string_view s, size_t i) {
  for (size_t j = i + 2; j < s.size(); ++j) {
    if (s[j] == '\\') {
      ++j;
    } else if (s[j] == '\'') {
      return j + 1;
    }
  }
  return npos;
}

size_t SkipBackquoted(std::string_view s, size_t i) {
  for (size_t j = i + 1; j < s.size(); ++j) {
    if (s[j] == '\\') {
      ++j;
    } else if (s[j] == '`') {
      return j + 1;
    }
  }
  return npos;
}

size_t SkipDoubleQuoted(std::string_view s, size_t i, int depth) {
  for (size_t j = i + 1; j < s.size();) {
    const char c = s[j];
    if (c == '\\') {
      j += 2;
    } else if (c == '"') {
      return j + 1;
    } else if (c == '$' || c == '`') {
      j = c == '$' ? SkipDollar(s, j, depth + 1, true) : SkipBackquoted(s, j);
      if (j == npos) return npos;
    } else {
      ++j;
    }
  }
  return npos;
}

// Quotes and nested expansions inside a construct: the index past them, or npos; `i` itself
// when s[i] starts none.
size_t SkipQuotedOrExpansion(std::string_view s, size_t i, int depth, bool in_double_quotes) {
  switch (s[i]) {
    case '\\':
      return std::min(i + 2, s.size());
    case '\'':
      return in_double_quotes ? i + 1 : SkipSingleQuoted(s, i);
    case '"':
      return SkipDoubleQuoted(s, i, depth + 1);
    case '`':
      return SkipBackquoted(s, i);
    case '$':
      return SkipDollar(s, i, depth + 1, in_double_quotes);
    default:
      return i;
  }
}

// $( ... ) and $(( ... )): s[i] is the first '('. A new quoting context starts inside.
size_t SkipParens(std::string_view s, size_t i, int depth) {
  int level = 0;
  for (size_t j = i; j < s.size();) {
    const size_t skipped = SkipQuotedOrExpansion(s, j, depth, false);
    if (skipped == npos) return npos;
    if (skipped != j) {
      j = skipped;
      continue;
    }
    if (s[j] == '(') ++level;
    if (s[j] == ')' && --level == 0) return j + 1;
    ++j;
  }
  return npos;
}

// ${ ... }: s[i] is the '{'. The first '}' outside quotes and nested expansions ends it (bash
// does not count bare braces). Single quotes quote here even inside double quotes, as in bash's
// scan ("${X:-it's}" is unterminated there too).
size_t SkipBraces(std::string_view s, size_t i, int depth, bool in_double_quotes) {
  for (size_t j = i + 1; j < s.size();) {
    const size_t skipped = s[j] == '\'' ? SkipSingleQuoted(s, j)
                                        : SkipQuotedOrExpansion(s, j, depth, in_double_quotes);
    if (skipped == npos) return npos;
    if (skipped != j) {
      j = skipped;
      continue;
    }
    if (s[j] == '}') return j + 1;
    ++j;
  }
  return npos;
}

// s[i] is '$'. Returns i + 1 when the '$' starts no bracketed construct: `$NAME` is scanned as
// ordinary word characters.
size_t SkipDollar(std::string_view s, size_t i, int depth, bool in_double_quotes) {
  if (depth > kMaxNesting) throw TooDeep{};
  if (i + 1 >= s.size()) return i + 1;
  switch (s[i + 1]) {
    case '(':
      return SkipParens(s, i + 1, depth);
    case '{':
      return SkipBraces(s, i + 1, depth, in_double_quotes);
    case '\'':
      return in_double_quotes ? i + 1 : SkipAnsiC(s, i);
    case '"':
      return in_double_quotes ? i + 1 : SkipDoubleQuoted(s, i + 1, depth);
    default:
      return i + 1;
  }
}

// `$(( ... ))` rather than `$( (...) )`: the inner '(' closes just before the outer ')'.
bool IsArithmeticExpansion(std::string_view s, size_t dollar, size_t end) {
  return dollar + 2 < s.size() && s[dollar + 2] == '(' && end >= dollar + 5 &&
         SkipParens(s, dollar + 2, 0) == end - 1;
}

int CountNewlines(std::string_view s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

// NAME=, NAME+=, NAME[subscript]= : the text before an assignment's value.
bool IsAssignmentPrefix(std::string_view s) {
  if (s.empty() || !IsNameStart(s[0]) || s.back() != '=') return false;
  size_t i = 1;
  while (i < s.size() && IsNameChar(s[i])) ++i;
  if (i < s.size() && s[i] == '[') {
    const size_t close = s.find(']', i);
    if (close == npos) return false;
    i = close + 1;
  }
  if (i < s.size() && s[i] == '+') ++i;
  return i + 1 == s.size();
}

// Where the '=' of an assignment word is, or npos when the word is not an assignment.
size_t AssignmentEquals(std::string_view raw) {
  size_t i = 0;
  if (raw.empty() || !IsNameStart(raw[0])) return npos;
  while (i < raw.size() && IsNameChar(raw[i])) ++i;
  if (i < raw.size() && raw[i] == '[') {
    const size_t close = raw.find(']', i);
    if (close == npos) return npos;
    i = close + 1;
  }
  if (i < raw.size() && raw[i] == '+') ++i;
  return i < raw.size() && raw[i] == '=' ? i : npos;
}

// ---- Lexing: text -> words (as written) and operators --------------------------------------

// A word as written: quotes, backslashes and expansions are kept for the expander. `\` + newline
// inside a word stays too (the expander drops it), so a character's line is `line` plus the
// newlines before it.
struct Word {
  std::string text;
  int line = 0;
  bool is_array = false;       // NAME=( ... ): text is "NAME=" and the elements follow
  std::vector<Word> elements;  // with their own lines
};

enum class TokenKind { kWord, kNewline, kOperator, kRedirect, kArith, kEnd };

struct Token {
  TokenKind kind = TokenKind::kEnd;
  Word word;  // the word; for the others, text is the operator or the (( )) expression
  // A here-document's body as written (word.line: its first line), for a << redirection.
  Word body;
  bool body_quoted = false;  // <<'EOF': the body is not expanded
};

constexpr std::string_view kCommentFix =
    "move the comment above the command, or end the line before it without \\";

class Lexer {
 public:
  Lexer(std::string_view text, std::string source, int first_line, std::vector<ShellNote>& notes)
      : s_(text), source_(std::move(source)), line_(first_line), notes_(notes) {}

  std::vector<Token> Run() {
    try {
      while (true) {
        SkipBlanks();
        if (i_ >= s_.size()) break;
        ReadToken();
      }
    } catch (const TooDeep&) {
      Fail(line_, fmt::format("expansions nest more than {} deep", kMaxNesting));
    }
    Emit(TokenKind::kEnd, "");
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void Fail(int line, const std::string& message, const std::string& hint = "") {
    throw InputError({source_, line, ""}, message, hint);
  }

  bool NewlineAt(size_t i) const {
    return i < s_.size() &&
           (s_[i] == '\n' || (s_[i] == '\r' && i + 1 < s_.size() && s_[i + 1] == '\n'));
  }
  size_t NewlineLength(size_t i) const { return s_[i] == '\r' ? 2 : 1; }
  bool ContinuationAt(size_t i) const { return i < s_.size() && s_[i] == '\\' && NewlineAt(i + 1); }

  void SkipBlanks() {
    while (i_ < s_.size()) {
      if (IsBlank(s_[i_]) || (s_[i_] == '\r' && NewlineAt(i_))) {
        ++i_;
      } else if (ContinuationAt(i_)) {
        i_ += 1 + NewlineLength(i_ + 1);
        ++line_;
        SkipCommentLinesInContinuation();
      } else {
        break;
      }
    }
  }

  // In bash a comment line after `\` ends the command and the lines after it run as commands of
  // their own; people write it meaning to comment out one flag. The command reads on, as its
  // author meant, with one warning per run of such lines.
  void SkipCommentLinesInContinuation() {
    while (true) {
      size_t j = i_;
      while (j < s_.size() && IsBlank(s_[j])) ++j;
      if (j >= s_.size() || s_[j] != '#') return;
      WarnCommentLine();
      const size_t nl = s_.find('\n', j);
      i_ = nl == npos ? s_.size() : nl + 1;
      if (nl != npos) ++line_;
    }
  }

  void WarnCommentLine() {
    if (!notes_.empty() && notes_.back().fix == kCommentFix && notes_.back().source == source_ &&
        last_comment_line_ == line_ - 1) {
      notes_.back().message = fmt::format(
          "comment lines {}-{} inside a command continued with \\ end the command in a real "
          "shell: the flags after them never reach Megatron",
          notes_.back().line, line_);
    } else {
      notes_.push_back({true, line_,
                        fmt::format("comment line {} inside a command continued with \\ ends the "
                                    "command in a real shell: the flags after it never reach "
                                    "Megatron",
                                    line_),
                        std::string(kCommentFix), source_});
    }
    last_comment_line_ = line_;
  }

  void ReadToken() {
    const char c = s_[i_];
    if (c == '#') {
      while (i_ < s_.size() && s_[i_] != '\n') ++i_;
    } else if (NewlineAt(i_)) {
      Emit(TokenKind::kNewline, "\n");
      i_ += NewlineLength(i_);
      ++line_;
      ReadHeredocBodies();
    } else if (!ReadOperator()) {
      Word word = ReadWord(false);
      if (heredoc_word_expected_) {
        Token& redirect = tokens_.back();
        redirect.body_quoted = word.text.find_first_of("'\"\\") != npos;
        heredocs_.push_back({HeredocDelimiter(word.text), tokens_.size() - 1});
        heredoc_word_expected_ = false;
      }
      Token token;
      token.kind = TokenKind::kWord;
      token.word = std::move(word);
      tokens_.push_back(std::move(token));
    }
  }

  void Emit(TokenKind kind, std::string text) {
    Token token;
    token.kind = kind;
    token.word.text = std::move(text);
    token.word.line = line_;
    tokens_.push_back(std::move(token));
  }

  bool ReadOperator() {
    static constexpr std::string_view kOperators[] = {";;&", ";;", ";&", ";", "&&",
                                                      "||",  "|&", "|",  "&", ")"};
    if (s_.substr(i_, 2) == "((" && ReadArithmeticCommand()) return true;
    if (s_[i_] == '(') {
      Emit(TokenKind::kOperator, "(");
      ++i_;
      return true;
    }
    if (ReadRedirection()) return true;
    for (std::string_view op : kOperators) {
      if (s_.substr(i_, op.size()) == op) {
        Emit(TokenKind::kOperator, std::string(op));
        i_ += op.size();
        return true;
      }
    }
    return false;
  }

  // (( expression )) as a command or in `for ((...))`. Each try scans ahead for the closing
  // parentheses; the scans are counted so that a text of many unclosed (( stays linear-ish.
  bool ReadArithmeticCommand() {
    const size_t end = SkipParens(s_, i_, 0);
    arith_scanned_ += (end == npos ? s_.size() : end) - i_;
    if (arith_scanned_ > kMaxArithScan) {
      Fail(line_, "too many unclosed (( in the text", "close each (( with ))");
    }
    if (end == npos || SkipParens(s_, i_ + 1, 0) != end - 1) return false;
    const std::string_view expr = s_.substr(i_ + 2, end - 2 - (i_ + 2));
    Emit(TokenKind::kArith, std::string(expr));
    line_ += CountNewlines(expr);
    i_ = end;
    return true;
  }

  // [n]> [n]>> [n]< [n]<> [n]>& [n]<& >| &> &>> << <<- <<< ; not <( or >( (words).
  bool ReadRedirection() {
    size_t j = i_;
    while (j < s_.size() && IsDigit(s_[j])) ++j;
    if (s_.substr(i_, 2) == "&>") {
      j = i_;
    } else if (j >= s_.size() || (s_[j] != '<' && s_[j] != '>') ||
               (j + 1 < s_.size() && s_[j + 1] == '(')) {
      return false;
    }
    static constexpr std::string_view kRedirections[] = {"&>>", "&>", "<<<", "<<-", "<<", "<>",
                                                         "<&",  "<",  ">>",  ">&",  ">|", ">"};
    for (std::string_view op : kRedirections) {
      if (s_.substr(j, op.size()) != op) continue;
      Emit(TokenKind::kRedirect, std::string(s_.substr(i_, j + op.size() - i_)));
      i_ = j + op.size();
      if (op == "<<" || op == "<<-") {
        heredoc_word_expected_ = true;
      }
      return true;
    }
    return false;
  }

  static bool IsMetacharacter(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == ';' || c == '&' || c == '|' || c == '<' ||
           c == '>' || c == '(' || c == ')';
  }

  Word ReadWord(bool in_array) {
    Word word;
    word.line = line_;
    const size_t start = i_;
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '\r' && NewlineAt(i_)) break;
      if ((c == '<' || c == '>') && i_ + 1 < s_.size() && s_[i_ + 1] == '(') {
        SkipConstruct(SkipParens(s_, i_ + 1, 0), "unclosed process substitution");
        continue;
      }
      if (c == '(' && !in_array && IsAssignmentPrefix(s_.substr(start, i_ - start))) {
        word.text = std::string(s_.substr(start, i_ - start));
        ReadArray(word);
        return word;
      }
      if (IsMetacharacter(c)) break;
      if (!ReadWordCharacter(c)) break;
    }
    word.text = std::string(s_.substr(start, i_ - start));
    return word;
  }

  // Consumes one character or quoted/expanded construct of a word; false when the word ends.
  bool ReadWordCharacter(char c) {
    switch (c) {
      case '\\':
        if (ContinuationAt(i_)) {
          // `word\` at the end of a line followed by blanks: the word ends here.
          const size_t next = i_ + 1 + NewlineLength(i_ + 1);
          if (next >= s_.size() || IsBlank(s_[next]) || NewlineAt(next)) return false;
          ++line_;
        }
        i_ = std::min(i_ + 2, s_.size());
        return true;
      case '\'':
        SkipConstruct(SkipSingleQuoted(s_, i_), "unclosed ' quote");
        return true;
      case '"':
        SkipConstruct(SkipDoubleQuoted(s_, i_, 0), "unclosed \" quote");
        return true;
      case '`':
        SkipConstruct(SkipBackquoted(s_, i_), "unclosed ` (command substitution)");
        return true;
      case '$':
        SkipConstruct(SkipDollar(s_, i_, 0, false), DollarError());
        return true;
      default:
        ++i_;
        return true;
    }
  }

  std::string DollarError() const {
    const char next = i_ + 1 < s_.size() ? s_[i_ + 1] : ' ';
    if (next == '(') return "unclosed $( (command substitution or arithmetic)";
    if (next == '{') return "unclosed ${";
    return next == '"' ? "unclosed \" quote" : "unclosed $' quote";
  }

  void SkipConstruct(size_t end, const std::string& error) {
    if (end == npos) {
      Fail(line_, error,
           "close it; as written it runs to the end of the text (quotes and $( may span lines)");
    }
    line_ += CountNewlines(s_.substr(i_, end - i_));
    i_ = end;
  }

  // NAME=( elements ): over any number of lines, with comments.
  void ReadArray(Word& word) {
    const int open_line = line_;
    word.is_array = true;
    ++i_;
    while (true) {
      SkipArraySpace();
      if (i_ >= s_.size()) {
        Fail(open_line, fmt::format("unclosed ( array {}", word.text),
             "end the array with ); everything after the ( was read as elements");
      }
      if (s_[i_] == ')') {
        ++i_;
        return;
      }
      if (IsMetacharacter(s_[i_])) {
        Fail(line_, fmt::format("unexpected {} inside the ( array {}", s_[i_], word.text),
             "quote it, or close the array with ) first");
      }
      word.elements.push_back(ReadWord(true));
    }
  }

  void SkipArraySpace() {
    while (i_ < s_.size()) {
      if (IsBlank(s_[i_]) || s_[i_] == '\r') {
        ++i_;
      } else if (s_[i_] == '\n') {
        ++i_;
        ++line_;
      } else if (ContinuationAt(i_)) {
        i_ += 1 + NewlineLength(i_ + 1);
        ++line_;
      } else if (s_[i_] == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else {
        return;
      }
    }
  }

  static std::string HeredocDelimiter(std::string_view raw) {
    std::string out;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '\\' && i + 1 < raw.size()) {
        out += raw[++i];
      } else if (raw[i] != '\'' && raw[i] != '"') {
        out += raw[i];
      }
    }
    return out;
  }

  // The body of each here-document begun on the line just ended: kept on its redirection
  // (<<- strips leading tabs), never read as commands.
  void ReadHeredocBodies() {
    for (const Heredoc& doc : heredocs_) {
      Token& redirect = tokens_[doc.token];
      const bool strip_tabs = redirect.word.text.ends_with("<<-");
      redirect.body.line = line_;
      while (i_ < s_.size()) {
        const size_t nl = s_.find('\n', i_);
        std::string_view line = s_.substr(i_, (nl == npos ? s_.size() : nl) - i_);
        i_ = nl == npos ? s_.size() : nl + 1;
        ++line_;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (strip_tabs) line.remove_prefix(std::min(line.find_first_not_of('\t'), line.size()));
        if (line == doc.delimiter) break;
        redirect.body.text.append(line).append("\n");
      }
    }
    heredocs_.clear();
  }

  struct Heredoc {
    std::string delimiter;
    size_t token = 0;  // its << redirection
  };

  std::string_view s_;
  std::string source_;
  size_t i_ = 0;
  int line_;
  std::vector<ShellNote>& notes_;
  std::vector<Token> tokens_;
  std::vector<Heredoc> heredocs_;
  bool heredoc_word_expected_ = false;
  int last_comment_line_ = -1;
  size_t arith_scanned_ = 0;
  static constexpr size_t kMaxArithScan = size_t{64} << 20;
};

// ---- Parsing: tokens -> commands ------------------------------------------------------------

struct Command;
using CommandPtr = std::unique_ptr<Command>;

struct Item {
  CommandPtr command;
  bool background = false;  // ended by `&`
};
using Sequence = std::vector<Item>;

struct CaseItem {
  std::vector<Word> patterns;
  Sequence body;
  std::string terminator;  // ";;", ";&" (fall through) or ";;&" (test the next patterns too)
};

struct Command {
  enum class Kind {
    kSimple,    // assignments, words
    kPipeline,  // parts (each in a subshell when there are several), negated
    kAnd,       // parts[0] && parts[1]
    kOr,        // parts[0] || parts[1]
    kIf,        // lists: condition, body, [condition, body]..., [else body]
    kFor,       // name, words (has_in false: "$@"), lists[0] body
    kArithFor,  // text "init; test; step", lists[0] body
    kLoop,      // while/until/select: not run; text names it
    kCase,      // words[0] the subject, items
    kGroup,     // { lists[0]; }
    kSubshell,  // ( lists[0] )
    kFunction,  // name, parts[0] the body
    kArith,     // (( text ))
    kCond,      // [[ words ]]: operators are unquoted words
  };
  Kind kind = Kind::kSimple;
  int line = 0;
  std::vector<Word> assignments;
  std::vector<Word> words;
  std::optional<Word> input;      // kSimple: a here-document's body or a here-string's word
  bool input_literal = false;     // <<'EOF'
  bool input_herestring = false;  // <<< word
  std::string name;
  std::string text;
  bool negated = false;
  bool has_in = true;
  std::vector<CommandPtr> parts;
  std::vector<Sequence> lists;
  std::vector<CaseItem> items;
};

// Words that bash reserves at the start of a command, when written without quotes.
bool IsReserved(std::string_view w) {
  static constexpr std::string_view kReserved[] = {
      "if",   "then", "elif",   "else",     "fi", "for", "in", "do", "done", "while", "until",
      "case", "esac", "select", "function", "{",  "}",   "!",  "[[", "]]",   "time"};
  return std::find(std::begin(kReserved), std::end(kReserved), w) != std::end(kReserved);
}

// Recursive descent over bash's grammar. Syntax errors name the construct left open.
class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string source)
      : tokens_(std::move(tokens)), source_(std::move(source)) {}

  Sequence ParseProgram() {
    Sequence program = ParseList(0);
    if (Peek().kind != TokenKind::kEnd) Unexpected();
    return program;
  }

 private:
  const Token& Peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& Next() { return pos_ < tokens_.size() - 1 ? tokens_[pos_++] : tokens_.back(); }
  bool AtOperator(std::string_view op) const {
    return Peek().kind == TokenKind::kOperator && Peek().word.text == op;
  }
  // The reserved word `w` at the start of a command.
  bool AtReserved(std::string_view w) const {
    return Peek().kind == TokenKind::kWord && Peek().word.text == w && !Peek().word.is_array;
  }
  void SkipNewlines() {
    while (Peek().kind == TokenKind::kNewline) Next();
  }

  [[noreturn]] void Fail(int line, const std::string& message, const std::string& hint = "") {
    throw InputError({source_, line, ""}, message, hint);
  }

  [[noreturn]] void Unexpected() {
    const Token& t = Peek();
    if (t.kind == TokenKind::kEnd) Fail(t.word.line, "syntax error: unexpected end of the text");
    static constexpr std::pair<std::string_view, std::string_view> kOpeners[] = {
        {"then", "if"},         {"elif", "if"},           {"else", "if"},   {"fi", "if"},
        {"do", "for or while"}, {"done", "for or while"}, {"esac", "case"}, {"}", "{"}};
    for (const auto& [closer, opener] : kOpeners) {
      if (t.kind == TokenKind::kWord && t.word.text == closer) {
        Fail(t.word.line, fmt::format("`{}` without a matching `{}`", closer, opener),
             "remove it, or add what it closes");
      }
    }
    const std::string text = t.kind == TokenKind::kNewline ? "newline" : t.word.text;
    Fail(t.word.line, fmt::format("syntax error near unexpected token `{}`", text));
  }

  void Expect(std::string_view closer, std::string_view opener, int open_line) {
    if (AtReserved(closer)) {
      Next();
      return;
    }
    if (Peek().kind == TokenKind::kEnd) {
      Fail(open_line, fmt::format("`{}` on line {} has no `{}`", opener, open_line, closer),
           fmt::format("add `{}`", closer));
    }
    Unexpected();
  }

  bool AtListEnd() const {
    static constexpr std::string_view kEnders[] = {"then", "elif", "else", "fi",
                                                   "do",   "done", "esac", "}"};
    const Token& t = Peek();
    if (t.kind == TokenKind::kEnd) return true;
    if (t.kind == TokenKind::kOperator) {
      return t.word.text == ")" || t.word.text == ";;" || t.word.text == ";&" ||
             t.word.text == ";;&";
    }
    return t.kind == TokenKind::kWord && !t.word.is_array &&
           std::find(std::begin(kEnders), std::end(kEnders), t.word.text) != std::end(kEnders);
  }

  // Commands separated by newlines, `;` and `&`, up to a word or operator that closes the
  // construct around them.
  Sequence ParseList(int depth) {
    if (depth > kMaxNesting) {
      Fail(Peek().word.line, fmt::format("commands nest more than {} deep", kMaxNesting));
    }
    Sequence list;
    while (true) {
      SkipNewlines();
      if (AtListEnd()) return list;
      Item item{ParseAndOr(depth)};
      if (AtOperator(";") || AtOperator("&")) {
        item.background = Next().word.text == "&";
      } else if (Peek().kind != TokenKind::kNewline && !AtListEnd()) {
        Unexpected();
      }
      list.push_back(std::move(item));
    }
  }

  CommandPtr ParseAndOr(int depth) {
    CommandPtr left = ParsePipeline(depth);
    while (AtOperator("&&") || AtOperator("||")) {
      auto node = std::make_unique<Command>();
      node->kind = Next().word.text == "&&" ? Command::Kind::kAnd : Command::Kind::kOr;
      node->line = left->line;
      SkipNewlines();
      node->parts.push_back(std::move(left));
      node->parts.push_back(ParsePipeline(depth));
      left = std::move(node);
    }
    return left;
  }

  CommandPtr ParsePipeline(int depth) {
    auto pipeline = std::make_unique<Command>();
    pipeline->kind = Command::Kind::kPipeline;
    pipeline->line = Peek().word.line;
    while (AtReserved("time") || AtReserved("!")) {
      if (Next().word.text == "!") pipeline->negated = !pipeline->negated;
      if (AtReserved("-p")) Next();
    }
    pipeline->parts.push_back(ParseCommand(depth));
    while (AtOperator("|") || AtOperator("|&")) {
      Next();
      SkipNewlines();
      pipeline->parts.push_back(ParseCommand(depth));
    }
    if (pipeline->parts.size() == 1 && !pipeline->negated) return std::move(pipeline->parts[0]);
    return pipeline;
  }

  CommandPtr ParseCommand(int depth) {
    const Token& t = Peek();
    CommandPtr command;
    if (t.kind == TokenKind::kArith) {
      command = std::make_unique<Command>();
      command->kind = Command::Kind::kArith;
      command->line = t.word.line;
      command->text = Next().word.text;
    } else if (AtOperator("(")) {
      command = ParseGroup(depth, Command::Kind::kSubshell);
    } else if (t.kind == TokenKind::kWord && !t.word.is_array && IsReserved(t.word.text)) {
      command = ParseCompound(depth);
    } else if (t.kind == TokenKind::kWord && Peek(1).kind == TokenKind::kOperator &&
               Peek(1).word.text == "(") {
      return ParseFunction(depth, false);
    } else if (t.kind == TokenKind::kWord || t.kind == TokenKind::kRedirect) {
      return ParseSimple();
    } else {
      Unexpected();
    }
    SkipRedirections();
    return command;
  }

  CommandPtr ParseCompound(int depth) {
    const std::string& w = Peek().word.text;
    if (w == "if") return ParseIf(depth);
    if (w == "for" || w == "select") return ParseFor(depth);
    if (w == "while" || w == "until") return ParseLoop(depth);
    if (w == "case") return ParseCase(depth);
    if (w == "{") return ParseGroup(depth, Command::Kind::kGroup);
    if (w == "[[") return ParseCond();
    if (w == "function") return ParseFunction(depth, true);
    Unexpected();
  }

  // Redirections are dropped; a simple command keeps what a here-document or here-string
  // feeds it.
  void SkipRedirections(Command* command = nullptr) {
    while (Peek().kind == TokenKind::kRedirect) {
      const Token& redirect = Next();
      if (Peek().kind != TokenKind::kWord) Unexpected();
      const Word& target = Next().word;
      if (command == nullptr) continue;
      const std::string& op = redirect.word.text;
      if (op.ends_with("<<<")) {
        command->input = target;
        command->input_herestring = true;
        command->input_literal = false;
      } else if (op.ends_with("<<") || op.ends_with("<<-")) {
        command->input = redirect.body;
        command->input_herestring = false;
        command->input_literal = redirect.body_quoted;
      }
    }
  }

  CommandPtr ParseSimple() {
    auto command = std::make_unique<Command>();
    command->line = Peek().word.line;
    while (true) {
      if (Peek().kind == TokenKind::kRedirect) {
        SkipRedirections(command.get());
      } else if (Peek().kind == TokenKind::kWord) {
        Word word = Next().word;
        if (command->words.empty() && (word.is_array || AssignmentEquals(word.text) != npos)) {
          command->assignments.push_back(std::move(word));
        } else {
          command->words.push_back(std::move(word));
        }
      } else {
        return command;
      }
    }
  }

  CommandPtr ParseIf(int depth) {
    auto command = std::make_unique<Command>();
    command->kind = Command::Kind::kIf;
    const int line = command->line = Next().word.line;
    while (true) {
      command->lists.push_back(ParseList(depth + 1));
      Expect("then", "if", line);
      command->lists.push_back(ParseList(depth + 1));
      if (AtReserved("elif")) {
        Next();
        continue;
      }
      if (AtReserved("else")) {
        Next();
        command->lists.push_back(ParseList(depth + 1));
      }
      Expect("fi", "if", line);
      return command;
    }
  }

  CommandPtr ParseFor(int depth) {
    auto command = std::make_unique<Command>();
    const Token& keyword = Next();
    command->line = keyword.word.line;
    command->kind = keyword.word.text == "for" ? Command::Kind::kFor : Command::Kind::kLoop;
    command->text = keyword.word.text;
    if (Peek().kind == TokenKind::kArith && keyword.word.text == "for") {
      command->kind = Command::Kind::kArithFor;
      command->text = Next().word.text;
    } else {
      if (Peek().kind != TokenKind::kWord) Unexpected();
      command->name = Next().word.text;
      SkipNewlines();
      command->has_in = AtReserved("in");
      if (command->has_in) {
        Next();
        while (Peek().kind == TokenKind::kWord) command->words.push_back(Next().word);
      }
    }
    if (AtOperator(";")) Next();
    SkipNewlines();
    ParseDoDone(*command, depth, command->text);
    return command;
  }

  void ParseDoDone(Command& command, int depth, std::string_view opener) {
    Expect("do", opener, command.line);
    command.lists.push_back(ParseList(depth + 1));
    Expect("done", opener, command.line);
  }

  CommandPtr ParseLoop(int depth) {
    auto command = std::make_unique<Command>();
    command->kind = Command::Kind::kLoop;
    command->line = Peek().word.line;
    command->text = Next().word.text;
    command->lists.push_back(ParseList(depth + 1));
    ParseDoDone(*command, depth, command->text);
    return command;
  }

  CommandPtr ParseCase(int depth) {
    auto command = std::make_unique<Command>();
    command->kind = Command::Kind::kCase;
    command->line = Next().word.line;
    if (Peek().kind != TokenKind::kWord) Unexpected();
    command->words.push_back(Next().word);
    SkipNewlines();
    Expect("in", "case", command->line);
    while (true) {
      SkipNewlines();
      if (AtReserved("esac")) break;
      if (Peek().kind == TokenKind::kEnd) Expect("esac", "case", command->line);
      command->items.push_back(ParseCaseItem(depth));
    }
    Next();
    return command;
  }

  CaseItem ParseCaseItem(int depth) {
    CaseItem item;
    if (AtOperator("(")) Next();
    while (true) {
      if (Peek().kind != TokenKind::kWord) Unexpected();
      item.patterns.push_back(Next().word);
      if (!AtOperator("|")) break;
      Next();
    }
    if (!AtOperator(")")) Unexpected();
    Next();
    item.body = ParseList(depth + 1);
    if (AtOperator(";;") || AtOperator(";&") || AtOperator(";;&")) {
      item.terminator = Next().word.text;
    } else if (!AtReserved("esac")) {
      Unexpected();
    }
    return item;
  }

  CommandPtr ParseGroup(int depth, Command::Kind kind) {
    auto command = std::make_unique<Command>();
    command->kind = kind;
    command->line = Next().word.line;
    command->lists.push_back(ParseList(depth + 1));
    if (kind == Command::Kind::kGroup) {
      Expect("}", "{", command->line);
    } else if (AtOperator(")")) {
      Next();
    } else if (Peek().kind == TokenKind::kEnd) {
      Fail(command->line, fmt::format("`(` on line {} has no `)`", command->line), "add `)`");
    } else {
      Unexpected();
    }
    return command;
  }

  // [[ expression ]]: operators the lexer took for redirections or separators become words.
  CommandPtr ParseCond() {
    auto command = std::make_unique<Command>();
    command->kind = Command::Kind::kCond;
    command->line = Next().word.line;
    while (!AtReserved("]]")) {
      const Token& t = Next();
      if (t.kind == TokenKind::kEnd) {
        Fail(command->line, fmt::format("`[[` on line {} has no `]]`", command->line), "add `]]`");
      }
      if (t.kind != TokenKind::kNewline) command->words.push_back(t.word);
    }
    Next();
    return command;
  }

  // name() compound  |  function name [()] compound
  CommandPtr ParseFunction(int depth, bool keyword) {
    auto command = std::make_unique<Command>();
    command->kind = Command::Kind::kFunction;
    command->line = Peek().word.line;
    if (keyword) Next();
    if (Peek().kind != TokenKind::kWord) Unexpected();
    command->name = Next().word.text;
    if (AtOperator("(")) {
      Next();
      if (!AtOperator(")")) Unexpected();
      Next();
    }
    SkipNewlines();
    if (!AtOperator("(") && !AtReserved("{") && !AtReserved("if") && !AtReserved("for") &&
        !AtReserved("while") && !AtReserved("until") && !AtReserved("case") && !AtReserved("[[") &&
        Peek().kind != TokenKind::kArith) {
      Unexpected();
    }
    command->parts.push_back(ParseCommand(depth + 1));
    return command;
  }

  std::vector<Token> tokens_;
  std::string source_;
  size_t pos_ = 0;
};

// ---- Values and fields ------------------------------------------------------------------------

// Where a piece of text was written: a line of a file (index into the interpreter's files).
struct Origin {
  int line = 0;
  int file = 0;
};

// The parts of a text that came from something the interpreter cannot know (a `$(cmd)`, a
// script argument not given), as byte ranges, sorted. Word splitting never cuts inside one:
// how the unknown text would split is unknown too, but the known text around it splits as usual.
struct Unknown {
  std::vector<std::pair<size_t, size_t>> spans;

  explicit operator bool() const { return !spans.empty(); }
  static Unknown All(size_t size) { return {{{0, size}}}; }
  // Adds the spans of `other` within [begin, end), moved to start at `offset`.
  void Add(const Unknown& other, size_t offset, size_t begin = 0, size_t end = npos) {
    for (const auto& [b, e] : other.spans) {
      const bool inside = b == e ? begin <= b && b <= end : b < end && e > begin;
      if (!inside) continue;
      spans.push_back({std::max(b, begin) - begin + offset, std::min(e, end) - begin + offset});
    }
  }
};

// A variable's element or a positional parameter, with the parts that are unknown: X=$(nproc)
// holds "$(nproc)", all unknown.
struct Value {
  Value() = default;
  Value(std::string text_, Origin origin_, Unknown unknown_ = {})
      : text(std::move(text_)), origin(origin_), unknown(std::move(unknown_)) {}
  std::string text;
  Origin origin;
  Unknown unknown;
};

struct Variable {
  std::map<int64_t, Value> elements;  // a scalar is element 0; unset when element 0 is missing
  bool array = false;
  bool exported = false;
  bool readonly = false;
  bool integer = false;  // declare -i: assignments are arithmetic
};

// A word after expansion, before it becomes a ShellWord.
struct Field {
  Field() = default;
  Field(std::string text_, Origin origin_, Unknown unknown_ = {})
      : text(std::move(text_)), origin(origin_), unknown(std::move(unknown_)) {}
  std::string text;
  Origin origin;
  Unknown unknown;
};

// What expanding a word yields: fields split at blanks (command words, array elements, `for`
// lists), one string (assignments, [[ ]] operands, `case` subjects), or a glob pattern (quoted
// characters escaped with '\').
enum class Mode { kFields, kString, kPattern };

// Counts the bytes expansions produce and the work patterns and arithmetic take; throws an
// InputError at the line being run once a limit is passed.
class Budget {
 public:
  void Spend(size_t bytes) {
    bytes_ += bytes;
    if (bytes_ > kMaxExpandedBytes) {
      Fail(fmt::format("the script expands to more than {} MiB of text", kMaxExpandedBytes >> 20));
    }
  }
  void Work(int64_t units) {
    work_ += units;
    if (work_ > kMaxWork)
      Fail("the script's expansions, arithmetic and patterns take too long to evaluate");
  }
  [[noreturn]] void Fail(const std::string& message) const {
    throw InputError({(*files)[file], line, ""}, message,
                     "ptdp reads launch scripts; this one would not finish in a real shell either");
  }
  const std::vector<std::string>* files = nullptr;  // the interpreter's, for the error's source
  int file = 0;
  int line = 0;

 private:
  size_t bytes_ = 0;
  int64_t work_ = 0;
};

// Builds the fields of one word from its parts, as bash's word splitting and quote removal do:
// quoted text never splits and makes the field exist even when empty; an unquoted expansion's
// result splits at blanks and newlines, and an empty one vanishes.
class FieldBuilder {
 public:
  FieldBuilder(Mode mode, Budget& budget) : mode_(mode), budget_(budget) {}

  // Text no splitting touches: quoted parts, anything in one string. In a pattern its
  // characters match only themselves.
  void Quoted(std::string_view text, Origin at, const Unknown& unknown = {}) {
    Begin(at);
    const size_t start = current_.text.size();
    if (mode_ == Mode::kPattern && !unknown) {
      for (char c : text) {
        if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\' || c == '&') {
          Append("\\");
        }
        Append(std::string_view(&c, 1));
      }
    } else {
      Append(text);
    }
    current_.unknown.Add(unknown, start);
  }

  void QuotedUnknown(std::string_view text, Origin at) {
    Quoted(text, at, Unknown::All(text.size()));
  }

  // Unquoted text written in the word itself: it never holds blanks.
  void Unquoted(std::string_view text, Origin at) {
    if (text.empty()) return;
    Begin(at);
    Append(text);
  }

  // The result of an unquoted expansion: split at blanks and newlines outside unknown parts,
  // empty pieces dropped. In one string or a pattern it is appended whole (glob characters
  // stay active).
  void Split(std::string_view text, Origin at, const Unknown& unknown = {}) {
    if (mode_ != Mode::kFields) return Piece(text, 0, text.size(), unknown, at);
    size_t begin = 0, next_span = 0;
    for (size_t i = 0; i < text.size();) {
      if (next_span < unknown.spans.size() && i >= unknown.spans[next_span].first) {
        i = std::max(i, unknown.spans[next_span++].second);
      } else if (text[i] == ' ' || text[i] == '\t' || text[i] == '\n') {
        Piece(text, begin, i, unknown, at);
        End();
        begin = ++i;
      } else {
        ++i;
      }
    }
    Piece(text, begin, text.size(), unknown, at);
  }

  // Between the elements of "$@" or "${A[@]}": a new field (in one string: a space).
  void Separate(Origin at) {
    if (mode_ == Mode::kFields) {
      End();
    } else {
      Begin(at);
      Append(" ");
    }
  }

  // Ends the current field, if any (between the elements of an unquoted $@).
  void End() {
    if (!active_) return;
    budget_.Spend(kFieldOverheadBytes);
    fields_.push_back(std::move(current_));
    current_ = Field{};
    active_ = false;
  }

  std::vector<Field> Take() {
    End();
    return std::move(fields_);
  }

 private:
  // text[begin, end) with its unknown parts, unless empty.
  void Piece(std::string_view text, size_t begin, size_t end, const Unknown& unknown, Origin at) {
    const size_t start = current_.text.size();
    const size_t spans = current_.unknown.spans.size();
    current_.unknown.Add(unknown, start, begin, end);
    if (end == begin && current_.unknown.spans.size() == spans) return;
    Begin(at);
    Append(text.substr(begin, end - begin));
  }

  void Begin(Origin at) {
    if (active_) return;
    active_ = true;
    current_.origin = at;
  }
  void Append(std::string_view text) {
    budget_.Spend(text.size());
    current_.text.append(text);
  }

  Mode mode_;
  Budget& budget_;
  std::vector<Field> fields_;
  Field current_;
  bool active_ = false;
};

// ---- Arithmetic: $(( )), (( )), let-style assignments, array subscripts -----------------------

struct ArithResult {
  int64_t value = 0;
  bool unknown = false;  // a variable it reads holds an unknown value
  std::string error;     // bash's complaint ("division by 0"); empty when fine
};

// The variables arithmetic reads and assigns.
class ArithVariables {
 public:
  virtual ~ArithVariables() = default;
  // The text of NAME (element `index` when `indexed`); nullopt when unset.
  virtual std::optional<Value> Get(const std::string& name, bool indexed, int64_t index) = 0;
  virtual void Set(const std::string& name, bool indexed, int64_t index, int64_t value) = 0;
};

// Evaluates bash's integer expressions (C's operators, ** and base#digits literals) in 64-bit
// two's complement with wrap-around, as bash does. Variables holding expressions are evaluated
// in turn, up to kMaxNesting deep.
class Arithmetic {
 public:
  Arithmetic(std::string_view text, ArithVariables& vars, Budget& budget, int depth)
      : s_(text), vars_(vars), budget_(budget), depth_(depth) {}

  ArithResult Evaluate() {
    ArithResult result;
    try {
      result.value = Whole();
    } catch (const Error& e) {
      // As bash says it; a long expression is quoted once, by its start (issue 35).
      result.error =
          e.expression.size() <= kLongWordBytes
              ? fmt::format("{}: {} (error token is \"{}\")", e.expression, e.message, e.token)
              : fmt::format("{}: {} (at byte {})", QuotedWord(e.expression), e.message,
                            e.expression.size() - e.token.size() + 1);
    }
    result.unknown = unknown_;
    return result;
  }

 private:
  // Bash's complaint, with the expression it is about (a variable's, when the error is in
  // one) and the text from where it stopped reading.
  struct Error {
    std::string message, expression, token;
  };

  [[noreturn]] void Fail(const std::string& message) const {
    throw Error{message, std::string(s_), std::string(s_.substr(std::min(i_, s_.size())))};
  }

  int64_t Whole() {
    if (depth_ > kMaxNesting) Fail("expression recursion level exceeded");
    SkipSpace();
    const int64_t v = i_ < s_.size() ? Comma() : 0;
    SkipSpace();
    if (i_ < s_.size()) Fail("syntax error in expression");
    return v;
  }
  // A variable named in the expression, for reading and assigning.
  struct Lvalue {
    std::string name;
    bool indexed = false;
    int64_t index = 0;
  };

  static int64_t Wrap(uint64_t v) { return static_cast<int64_t>(v); }

  void SkipSpace() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }

  // The operator at the cursor, longest first; "++" and "--" only before a name (else 1--1 is
  // 1 - -1, as in bash).
  std::string_view PeekOperator() {
    static constexpr std::string_view kOperators[] = {
        "<<=", ">>=", "**", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||", "++", "--", "+=",
        "-=",  "*=",  "/=", "%=", "&=", "^=", "|=", "+",  "-",  "*",  "/",  "%",  "<",  ">",
        "&",   "|",   "^",  "!",  "~",  "?",  ":",  "(",  ")",  "[",  "]",  ",",  "="};
    SkipSpace();
    for (std::string_view op : kOperators) {
      if (s_.substr(i_, op.size()) != op) continue;
      if (op == "++" || op == "--") {
        size_t j = i_ + 2;
        while (j < s_.size() && std::isspace(static_cast<unsigned char>(s_[j]))) ++j;
        if (j >= s_.size() || !IsNameStart(s_[j])) continue;
      }
      return op;
    }
    return {};
  }

  bool Accept(std::string_view op) {
    if (PeekOperator() != op) return false;
    i_ += op.size();
    budget_.Work(1);
    return true;
  }

  int64_t Comma() {
    int64_t v = Assignment();
    while (Accept(",")) v = Assignment();
    return v;
  }

  int64_t Assignment() {
    SkipSpace();
    const size_t start = i_;
    if (i_ < s_.size() && IsNameStart(s_[i_])) {
      ++skip_;  // the subscript is read again below when this is no assignment
      const Lvalue lhs = ReadLvalue();
      --skip_;
      const std::string_view op = PeekOperator();
      if (op.size() >= 1 && op.back() == '=' && op != "==" && op != "!=" && op != "<=" &&
          op != ">=") {
        i_ = start;
        const Lvalue target = ReadLvalue();
        Accept(op);
        const int64_t old = op == "=" ? 0 : Load(target);
        const int64_t rhs = Assignment();
        const int64_t v = op == "=" ? rhs : Binary(op.substr(0, op.size() - 1), old, rhs);
        Store(target, v);
        return v;
      }
    }
    i_ = start;
    return Conditional();
  }

  void Store(const Lvalue& lhs, int64_t v) {
    if (skip_ == 0) vars_.Set(lhs.name, lhs.indexed, lhs.index, v);
  }

  int64_t Conditional() {
    const int64_t test = LogicalOr();
    if (!Accept("?")) return test;
    skip_ += test == 0;
    const int64_t yes = Assignment();
    skip_ -= test == 0;
    if (!Accept(":")) Fail("`:' expected for conditional expression");
    skip_ += test != 0;
    const int64_t no = Conditional();
    skip_ -= test != 0;
    return test != 0 ? yes : no;
  }

  int64_t LogicalOr() {
    int64_t v = LogicalAnd();
    while (Accept("||")) {
      skip_ += v != 0;
      const int64_t rhs = LogicalAnd();
      skip_ -= v != 0;
      v = v != 0 || rhs != 0;
    }
    return v;
  }

  int64_t LogicalAnd() {
    int64_t v = BinaryLevel(0);
    while (Accept("&&")) {
      skip_ += v == 0;
      const int64_t rhs = BinaryLevel(0);
      skip_ -= v == 0;
      v = v != 0 && rhs != 0;
    }
    return v;
  }

  // Left-associative binary operators, loosest first.
  int64_t BinaryLevel(size_t level) {
    static constexpr std::string_view kLevels[][4] = {
        {"|"},        {"^"},      {"&"},          {"==", "!="}, {"<=", ">=", "<", ">"},
        {"<<", ">>"}, {"+", "-"}, {"*", "/", "%"}};
    if (level == std::size(kLevels)) return Power();
    int64_t v = BinaryLevel(level + 1);
    while (true) {
      const std::string_view op = PeekOperator();
      const auto& ops = kLevels[level];
      if (op.empty() || std::find(std::begin(ops), std::end(ops), op) == std::end(ops)) return v;
      Accept(op);
      v = Binary(op, v, BinaryLevel(level + 1));
    }
  }

  int64_t Power() {
    const int64_t base = Unary();
    if (!Accept("**")) return base;
    const int64_t exponent = Power();  // right-associative
    if (exponent < 0 && skip_ == 0) Fail("exponent less than 0");
    return Binary("**", base, exponent);
  }

  int64_t Binary(std::string_view op, int64_t a, int64_t b) {
    const uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
    if (op == "+") return Wrap(ua + ub);
    if (op == "-") return Wrap(ua - ub);
    if (op == "*") return Wrap(ua * ub);
    if (op == "/" || op == "%") {
      if (b == 0) {
        if (skip_ > 0) return 0;
        Fail("division by 0");
      }
      if (b == -1) return op == "/" ? Wrap(0 - ua) : 0;  // INT64_MIN / -1 must not trap
      return op == "/" ? a / b : a % b;
    }
    if (op == "<<") return Wrap(ua << (ub & 63));
    if (op == ">>") return a >> (ub & 63);
    if (op == "&") return a & b;
    if (op == "|") return a | b;
    if (op == "^") return a ^ b;
    if (op == "==") return a == b;
    if (op == "!=") return a != b;
    if (op == "<") return a < b;
    if (op == "<=") return a <= b;
    if (op == ">") return a > b;
    if (op == ">=") return a >= b;
    // "**": square and multiply, wrapping like bash's loop would.
    uint64_t result = 1, square = ua;
    for (uint64_t e = b < 0 ? 0 : ub; e != 0; e >>= 1) {
      if (e & 1) result *= square;
      square *= square;
    }
    return Wrap(result);
  }

  int64_t Unary() {
    if (++nesting_ + depth_ > kMaxNesting) Fail("expression recursion level exceeded");
    int64_t v;
    const std::string_view op = PeekOperator();
    if (op == "++" || op == "--") {
      Accept(op);
      SkipSpace();
      const Lvalue lhs = ReadLvalue();
      v = Wrap(static_cast<uint64_t>(Load(lhs)) + (op == "++" ? 1 : -1));
      Store(lhs, v);
    } else if (op == "-" || op == "+" || op == "!" || op == "~") {
      Accept(op);
      const int64_t operand = Unary();
      v = op == "-"   ? Wrap(0 - static_cast<uint64_t>(operand))
          : op == "+" ? operand
          : op == "!" ? operand == 0
                      : ~operand;
    } else {
      v = Primary();
    }
    --nesting_;
    return v;
  }

  int64_t Primary() {
    SkipSpace();
    if (i_ >= s_.size()) Fail("syntax error: operand expected");
    if (Accept("(")) {
      const int64_t v = Comma();
      if (!Accept(")")) Fail("missing `)'");
      return v;
    }
    if (IsDigit(s_[i_])) return ReadNumber();
    if (!IsNameStart(s_[i_])) Fail("syntax error: operand expected");
    const Lvalue lvalue = ReadLvalue();
    const int64_t v = Load(lvalue);
    SkipSpace();
    if (s_.substr(i_, 2) == "++" || s_.substr(i_, 2) == "--") {
      Store(lvalue, Wrap(static_cast<uint64_t>(v) + (s_[i_] == '+' ? 1 : -1)));
      i_ += 2;
    }
    return v;
  }

  Lvalue ReadLvalue() {
    Lvalue lvalue;
    const size_t start = i_;
    while (i_ < s_.size() && IsNameChar(s_[i_])) ++i_;
    if (i_ == start) Fail("syntax error: operand expected");
    lvalue.name = std::string(s_.substr(start, i_ - start));
    if (i_ < s_.size() && s_[i_] == '[') {
      ++i_;
      lvalue.indexed = true;
      lvalue.index = Comma();
      if (!Accept("]")) Fail("missing `]'");
    }
    budget_.Work(1);
    return lvalue;
  }

  // A variable's value as a number: empty is 0, an expression is evaluated.
  int64_t Load(const Lvalue& lvalue) {
    if (skip_ > 0) return 0;
    const std::optional<Value> value = vars_.Get(lvalue.name, lvalue.indexed, lvalue.index);
    if (!value) return 0;
    if (value->unknown) {
      unknown_ = true;
      return 0;
    }
    if (value->text.find_first_not_of(" \t\n") == npos) return 0;
    Arithmetic inner(value->text, vars_, budget_, depth_ + nesting_ + 1);
    const int64_t v = inner.Whole();
    unknown_ |= inner.unknown_;
    return v;
  }

  // 255, 0xff, 0377, 16#ff, 64#@_ : digits 0-9, a-z, A-Z, @, _ as bash reads them.
  int64_t ReadNumber() {
    const size_t start = i_;
    while (i_ < s_.size() && (IsNameChar(s_[i_]) || s_[i_] == '#' || s_[i_] == '@')) ++i_;
    const std::string_view literal = s_.substr(start, i_ - start);
    budget_.Work(static_cast<int64_t>(literal.size()));
    int base = 10;
    std::string_view digits = literal;
    if (const size_t hash = literal.find('#'); hash != npos) {
      base = 0;
      for (char c : literal.substr(0, hash)) {
        if (!IsDigit(c) || base > 64) Fail("invalid arithmetic base");
        base = base * 10 + (c - '0');
      }
      if (base < 2 || base > 64) Fail("invalid arithmetic base");
      digits = literal.substr(hash + 1);
    } else if (literal.size() > 1 && literal[0] == '0' &&
               (literal[1] == 'x' || literal[1] == 'X')) {
      base = 16;
      digits = literal.substr(2);
    } else if (literal.size() > 1 && literal[0] == '0') {
      base = 8;
      digits = literal.substr(1);
    }
    uint64_t v = 0;
    for (char c : digits) {
      const int d = DigitValue(c, base);
      if (d < 0 || d >= base) Fail("value too great for base");
      v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
    }
    return Wrap(v);
  }

  static int DigitValue(char c, int base) {
    if (IsDigit(c)) return c - '0';
    if (c >= 'a' && c <= 'z') return c - 'a' + 10;
    if (c >= 'A' && c <= 'Z') return base <= 36 ? c - 'A' + 10 : c - 'A' + 36;
    if (c == '@') return 62;
    if (c == '_') return 63;
    return -1;
  }

  std::string_view s_;
  ArithVariables& vars_;
  Budget& budget_;
  int depth_;
  size_t i_ = 0;
  int skip_ = 0;  // > 0 in a branch that short-circuits: read nothing, assign nothing
  int nesting_ = 0;
  bool unknown_ = false;
};

// ---- Patterns: case, [[ == ]], ${X#pattern}
// ------------------------------------------------------

// Matches bash glob patterns (* ? [...] [!...] and \ escapes) over the whole text. Greedy with
// one backtracking point per `*`, so time is O(text x pattern), charged to the budget.
class Glob {
 public:
  Glob(std::string_view pattern, Budget& budget) : p_(pattern), budget_(budget) {}

  bool Matches(std::string_view text) const {
    size_t t = 0, p = 0, star_p = npos, star_t = 0;
    int64_t steps = 0;
    while (t < text.size()) {
      ++steps;
      size_t next_p = p;
      if (p < p_.size() && p_[p] == '*') {
        star_p = ++p;
        star_t = t;
        continue;
      }
      if (p < p_.size() && MatchOne(p, text[t], next_p)) {
        p = next_p;
        ++t;
        continue;
      }
      if (star_p == npos) {
        budget_.Work(steps);
        return false;
      }
      p = star_p;
      t = ++star_t;
    }
    budget_.Work(steps);
    while (p < p_.size() && p_[p] == '*') ++p;
    return p == p_.size();
  }

 private:
  // Whether the pattern element at p matches c; next is set past the element.
  bool MatchOne(size_t p, char c, size_t& next) const {
    if (p_[p] == '?') {
      next = p + 1;
      return true;
    }
    if (p_[p] == '\\' && p + 1 < p_.size()) {
      next = p + 2;
      return p_[p + 1] == c;
    }
    if (p_[p] == '[') {
      if (const std::optional<bool> in = MatchClass(p, c, next)) return *in;
    }
    next = p + 1;
    return p_[p] == c;
  }

  // [abc], [a-z], [!x], [^x], [[:alpha:]]: nullopt when not a well-formed bracket expression
  // (then '[' is an ordinary character).
  std::optional<bool> MatchClass(size_t p, char c, size_t& next) const {
    size_t i = p + 1;
    const bool negate = i < p_.size() && (p_[i] == '!' || p_[i] == '^');
    if (negate) ++i;
    bool matched = false;
    for (bool first = true; i < p_.size(); first = false) {
      if (p_[i] == ']' && !first) {
        next = i + 1;
        return matched != negate;
      }
      if (p_.substr(i, 2) == "[:") {
        const size_t close = p_.find(":]", i + 2);
        if (close == npos) return std::nullopt;
        matched |= InNamedClass(p_.substr(i + 2, close - i - 2), c);
        i = close + 2;
        continue;
      }
      char lo = p_[i];
      if (lo == '\\' && i + 1 < p_.size()) lo = p_[++i];
      char hi = lo;
      if (i + 2 < p_.size() && p_[i + 1] == '-' && p_[i + 2] != ']') {
        hi = p_[i + 2];
        if (hi == '\\' && i + 3 < p_.size()) hi = p_[++i + 2];
        i += 2;
      }
      matched |= lo <= c && c <= hi;
      ++i;
    }
    return std::nullopt;
  }

  static bool InNamedClass(std::string_view name, char ch) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (name == "alpha") return std::isalpha(c);
    if (name == "digit") return std::isdigit(c);
    if (name == "alnum") return std::isalnum(c);
    if (name == "upper") return std::isupper(c);
    if (name == "lower") return std::islower(c);
    if (name == "space") return std::isspace(c);
    if (name == "blank") return c == ' ' || c == '\t';
    if (name == "punct") return std::ispunct(c);
    if (name == "xdigit") return std::isxdigit(c);
    return false;
  }

  std::string_view p_;
  Budget& budget_;
};

// Runs `f` when the scope ends, however it ends.
template <typename F>
struct OnExit {
  F f;
  ~OnExit() { f(); }
};
template <typename F>
OnExit(F) -> OnExit<F>;

// ---- Running: the interpreter's state and its expansions ------------------------------------

// Whether the last command succeeded. kAssumed: a program ptdp does not run (taken as success
// by && and ||, undecidable as an `if` condition); kUnknown: a test on a value ptdp cannot know.
enum class Status { kTrue, kFalse, kAssumed, kUnknown };

enum class Flow { kNormal, kBreak, kContinue, kReturn, kExit };

// Thrown by ${X:?message} when X is unset: bash ends the script.
struct ScriptExit {};
// Thrown by an arithmetic error ($((1/0))): bash abandons the command line it is on and reads
// the next one.
struct CommandAbort {};

// How the text being expanded is quoted. from_expansion: unquoted text inside ${X:-text} splits
// like an expansion's result; assignment: a ~ after ':' expands too; heredoc: a here-document's
// body, where quotes are ordinary characters.
struct Context {
  bool quoted = false;
  bool from_expansion = false;
  bool assignment = false;
  int depth = 0;
  bool heredoc = false;
};

// A parameter's value(s) as an expansion sees them.
struct Param {
  std::vector<Value> values;
  bool set = false;
  bool list = false;     // $@, ${A[@]}: one field per value when quoted
  bool star = false;     // $*, ${A[*]}: joined with a space when quoted
  bool missing = false;  // a script argument that was not given: one unknown word
  bool scalar = false;   // a plain variable: its words take the expansion's line
  std::string name;
};

// How an assignment sets its variable: the attributes of declare -x -r -a -i, local.
struct AssignOptions {
  bool local = false;
  bool exported = false;
  bool unexported = false;  // export -n, declare +x
  bool readonly = false;
  bool array = false;
  bool integer = false;
  bool functions = false;  // declare -f/-F/-p: prints, assigns nothing
};

// Up to `max` digits in `base` (8 or 16) from s[i]; i is left past them.
int ReadEscapeDigits(std::string_view s, size_t& i, int base, int max) {
  int v = 0;
  for (int n = 0; n < max && i < s.size(); ++n, ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int d = IsDigit(s[i]) ? c - '0' : std::isxdigit(c) ? std::tolower(c) - 'a' + 10 : 99;
    if (d >= base) break;
    v = v * base + d;
  }
  return v;
}

// ANSI-C escapes of $'...': \n \t \\ \' \xHH \NNN \cX and the rest of C's.
std::string DecodeAnsiC(std::string_view s) {
  static constexpr std::string_view kFrom = "abefnrtvE\\'\"?";
  static constexpr std::string_view kTo = "\a\b\x1b\f\n\r\t\v\x1b\\'\"?";
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i++];
      continue;
    }
    const char c = s[i + 1];
    i += 2;
    if (const size_t k = kFrom.find(c); k != npos) {
      out += kTo[k];
    } else if (c >= '0' && c <= '7') {
      --i;  // the first digit is one of the three
      out += static_cast<char>(ReadEscapeDigits(s, i, 8, 3));
    } else if (c == 'x' && i < s.size() && std::isxdigit(static_cast<unsigned char>(s[i]))) {
      out += static_cast<char>(ReadEscapeDigits(s, i, 16, 2));
    } else if (c == 'c' && i < s.size()) {
      out += static_cast<char>(s[i++] & 0x1f);
    } else {
      out += '\\';
      out += c;
    }
  }
  return out;
}

// Characters, not bytes, as bash counts them in a UTF-8 locale.
size_t Utf8Length(std::string_view s) {
  return static_cast<size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

std::string Join(const std::vector<Value>& values) {
  std::string out;
  for (size_t k = 0; k < values.size(); ++k) {
    if (k > 0) out += ' ';
    out += values[k].text;
  }
  return out;
}

class Interpreter final : public ArithVariables {
 public:
  Interpreter(const std::string& source, const ShellOptions& options, ShellResult& result)
      : options_(options), result_(result) {
    files_.push_back(source);
    budget_.files = &files_;
    scopes_.emplace_back();
    for (const auto& [name, text] : options.environment) {
      Variable& v = scopes_[0][name];
      v.elements[0] = Value{text, {}};
      v.exported = true;
    }
    Positional arguments;
    arguments.script = true;
    for (const std::string& a : options.positional) arguments.values.push_back({a, {}});
    positional_.push_back(std::move(arguments));
  }

  void RunMain(std::string_view text) { RunProgram(Parse(text, files_[0], 1)); }

  std::optional<Value> Get(const std::string& name, bool indexed, int64_t index) override {
    const Variable* v = Find(name);
    if (v == nullptr) return std::nullopt;
    const auto it = v->elements.find(indexed ? ResolveIndex(*v, index) : 0);
    if (it == v->elements.end()) return std::nullopt;
    return it->second;
  }

  void Set(const std::string& name, bool indexed, int64_t index, int64_t value) override {
    Variable& v = FindOrCreate(name);
    if (CheckWritable(name, v)) {
      v.elements[indexed ? ResolveIndex(v, index) : 0] = Value{std::to_string(value), Here()};
    }
  }

 private:
  class Expander;
  class TestCommand;
  class CondExpression;

  struct Positional {
    std::vector<Value> values;
    bool script = false;  // the script's own arguments: one not given is unknown, not empty
  };
  struct Function {
    const Command* body = nullptr;
    int file = 0;
  };
  // Restores the caller's variables, arguments and file when a function call ends, thrown or not.
  struct CallFrame {
    Interpreter& shell;
    size_t scopes;
    int file;
    ~CallFrame() {
      shell.scopes_.resize(scopes);
      shell.positional_.pop_back();
      --shell.call_depth_;
      shell.file_ = shell.budget_.file = file;
    }
  };
  // What a subshell must not change in its parent.
  struct Snapshot {
    std::vector<std::map<std::string, Variable>> scopes;
    std::vector<Positional> positional;
    std::map<std::string, Function> functions;
  };

  // ---- Bookkeeping ----

  Origin Here() const { return {line_, file_}; }

  void Note(bool warning, int line, std::string message, std::string fix = "") {
    if (!notes_seen_.insert({file_, line, message}).second) return;
    result_.notes.push_back({warning, line, std::move(message), std::move(fix), files_[file_]});
  }

  const Sequence& Parse(std::string_view text, const std::string& source, int first_line) {
    // Files that source themselves (or each other) several times over grow as a tree: the text
    // parsed in all is bounded, not just the depth.
    parsed_bytes_ += text.size();
    if (parsed_bytes_ > kMaxParsedBytes) {
      throw InputError({source, first_line, ""},
                       fmt::format("the script and the files it sources or evals come to more "
                                   "than {} MiB of text in all",
                                   kMaxParsedBytes >> 20),
                       "does a file source itself?");
    }
    std::vector<Token> tokens = Lexer(text, source, first_line, result_.notes).Run();
    programs_.push_back(
        std::make_unique<Sequence>(Parser(std::move(tokens), source).ParseProgram()));
    return *programs_.back();
  }

  // ---- Variables ----

  Variable* Find(const std::string& name) {
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
      if (const auto it = scope->find(name); it != scope->end()) return &it->second;
    }
    return nullptr;
  }

  Variable& FindOrCreate(const std::string& name) {
    Variable* v = Find(name);
    return v != nullptr ? *v : scopes_[0][name];
  }

  // A negative index counts from the end, as in bash.
  static int64_t ResolveIndex(const Variable& v, int64_t index) {
    if (index >= 0 || v.elements.empty()) return index;
    return v.elements.rbegin()->first + 1 + index;
  }

  bool CheckWritable(const std::string& name, const Variable& v) {
    if (!v.readonly) return true;
    Note(true, line_, fmt::format("{} is readonly: bash refuses the assignment", name));
    return false;
  }

  void CheckSize(const Value& value) {
    if (value.text.size() > kMaxValueBytes) {
      throw InputError({files_[file_], line_, ""},
                       fmt::format("a variable's value grows past {} MiB", kMaxValueBytes >> 20),
                       "ptdp reads launch scripts, not data");
    }
  }

  // ---- Expansion entry points ----

  std::vector<Field> ExpandWord(const Word& word, Mode mode, const Context& ctx = {}) {
    FieldBuilder out(mode, budget_);
    ExpandInto(word.text, {word.line, file_}, ctx, out);
    return out.Take();
  }

  std::vector<Field> ExpandFields(const std::vector<Word>& words) {
    std::vector<Field> fields;
    for (const Word& w : words) {
      for (Field& f : ExpandWord(w, Mode::kFields)) fields.push_back(std::move(f));
    }
    return fields;
  }

  // One string, no splitting: an assignment's value, a [[ ]] operand, a case subject.
  Field ExpandString(std::string_view raw, Origin at, Mode mode = Mode::kString,
                     const Context& ctx = {}) {
    FieldBuilder out(mode, budget_);
    ExpandInto(raw, at, ctx, out);
    std::vector<Field> fields = out.Take();
    if (fields.empty()) return Field{"", at};
    return std::move(fields[0]);
  }

  void ExpandInto(std::string_view raw, Origin at, const Context& ctx, FieldBuilder& out);

  // ---- Parameters ----

  Param Lookup(std::string_view name, std::optional<std::string_view> subscript, Origin at);
  void LookupVariable(Param& p, std::optional<std::string_view> subscript, Origin at);

  void NoteMissingArgument(std::string_view name, int line) {
    if (!missing_noted_.insert(std::string(name)).second) return;
    result_.missing_arguments.emplace_back(name);
    Note(false, line,
         fmt::format("${} is not given: the script's argument {} is read as an unknown value", name,
                     name),
         "pass the script's arguments, or write the value in the script");
  }

  int64_t EvaluateIndex(std::string_view subscript, Origin at) {
    const Field text = ExpandString(subscript, at, Mode::kString, {.quoted = true});
    if (text.unknown) return 0;
    Arithmetic arithmetic(text.text, *this, budget_, 0);
    const ArithResult r = arithmetic.Evaluate();
    if (!r.error.empty()) ArithmeticError(r.error);
    return r.value;
  }

  [[noreturn]] void ArithmeticError(const std::string& error) {
    Note(true, line_, fmt::format("bash abandons the command on line {}: {}", line_, error),
         "fix the arithmetic expression");
    throw CommandAbort{};
  }

  // ---- Assignments ----

  void Assign(const Word& word, const AssignOptions& options);
  std::vector<std::pair<std::optional<int64_t>, Value>> ExpandElements(
      const std::vector<Word>& elements);
  void SetArray(Variable& v, const std::vector<Word>& elements, bool append);
  Variable& Target(const std::string& name, bool local) {
    return local ? scopes_.back()[name] : FindOrCreate(name);
  }

  std::map<std::string, std::string> Environment() {
    std::map<std::string, std::string> env;
    for (const auto& scope : scopes_) {
      for (const auto& [name, v] : scope) {
        const auto it = v.elements.find(0);
        if (v.exported && !v.array && it != v.elements.end()) {
          budget_.Spend(name.size() + it->second.text.size());
          env[name] = it->second.text;
        } else {
          env.erase(name);
        }
      }
    }
    return env;
  }

  // ---- Running ----

  Flow Run(const Sequence& list) {
    for (const Item& item : list) {
      const Flow flow = item.background ? RunIsolated(*item.command) : RunCommand(*item.command);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  // A file's commands, or eval's. After an arithmetic error bash goes on with the next line.
  Flow RunProgram(const Sequence& program) {
    for (size_t k = 0; k < program.size(); ++k) {
      const Item& item = program[k];
      Flow flow = Flow::kNormal;
      try {
        flow = item.background ? RunIsolated(*item.command) : RunCommand(*item.command);
      } catch (const CommandAbort&) {
        const int line = item.command->line;
        while (k + 1 < program.size() && program[k + 1].command->line == line) ++k;
        SetStatus(Status::kFalse);
      }
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow RunCommand(const Command& c) {
    if (++commands_run_ > kMaxCommands) {
      throw InputError({files_[file_], c.line, ""},
                       fmt::format("the script runs more than {} commands", kMaxCommands),
                       "ptdp reads launch scripts; loops and recursion this long are not one");
    }
    line_ = budget_.line = c.line;
    budget_.file = file_;
    try {
      return Dispatch(c);
    } catch (const ScriptExit&) {
      return Flow::kExit;
    }
  }

  Flow Dispatch(const Command& c);
  Flow RunSimple(const Command& c);
  std::optional<Flow> RunBuiltin(const Command& c, const std::vector<Field>& fields);
  Flow RunDeclaration(const Command& c);
  AssignOptions DeclarationOptions(const Command& c, size_t& k);
  Flow CallFunction(const Function& function, const Command& c, const std::vector<Field>& fields);
  void List(const Command& c, const std::vector<Field>& fields);
  ShellWord ToShellWord(const Field& f) const;
  Field ExpandInput(const Command& c);
  Flow RunAndOr(const Command& c);
  Flow RunPipeline(const Command& c);
  Flow RunIf(const Command& c);
  Flow RunFor(const Command& c);
  Flow RunWhile(const Command& c);
  Flow RunArithFor(const Command& c);
  Flow RunCase(const Command& c);
  Flow RunSource(const std::vector<Field>& fields);
  Flow RunEval(const std::vector<Field>& fields);
  Flow RunNested(const Sequence& program, int file, const std::vector<Field>& args,
                 const std::string& path);
  void RunUnset(const std::vector<Field>& fields);
  void RunShift(const std::vector<Field>& fields);
  void RunSet(const std::vector<Field>& args);
  Status RunArith(const std::string& text);
  std::optional<bool> CaseMatches(const CaseItem& item, const Field& subject);
  bool StepLoop(int line);
  Flow LoopBody(const Sequence& body, bool& stop);
  bool IsPureTest(const Command& c) const;
  Status TestUnary(std::string_view op, const Field& operand);
  Status TestBinary(const Field& lhs, std::string_view op, const Field& rhs, bool in_cond);
  Status TestNonEmpty(const Field& f) {
    if (f.unknown) return Undecided(f);
    return f.text.empty() ? Status::kFalse : Status::kTrue;
  }
  Status Undecided(const Field& f) {
    reason_ = fmt::format("`{}` is not known", f.text);
    return Status::kUnknown;
  }
  Status TestError(const std::string& message) {
    Note(true, line_, fmt::format("bash: {}: the test is false", message),
         "fix the test's operands");
    return Status::kFalse;
  }
  std::optional<int64_t> TestInteger(const Field& f, bool in_cond);

  template <typename Body>
  Flow RunIsolated(const Body& body) {
    Snapshot saved{scopes_, positional_, functions_};
    budget_.Spend(StateBytes());
    const OnExit restore{[&] {
      scopes_ = std::move(saved.scopes);
      positional_ = std::move(saved.positional);
      functions_ = std::move(saved.functions);
    }};
    Flow flow;
    if constexpr (std::is_same_v<Body, Sequence>) {
      flow = Run(body);
    } else {
      flow = RunCommand(body);
    }
    return flow == Flow::kExit || flow == Flow::kReturn ? Flow::kNormal : flow;
  }

  size_t StateBytes() const {
    size_t bytes = 0;
    for (const auto& scope : scopes_) {
      for (const auto& [name, v] : scope) {
        for (const auto& [index, value] : v.elements) {
          bytes += value.text.size() + kFieldOverheadBytes;
        }
      }
    }
    return bytes;
  }

  void SetStatus(Status status, std::string reason = "") {
    status_ = status;
    if (!reason.empty()) reason_ = std::move(reason);
  }

  const ShellOptions& options_;
  ShellResult& result_;
  std::vector<std::string> files_;  // [0] the script; then sourced files
  int file_ = 0;                    // the file whose commands run
  int line_ = 0;                    // the line of the command that runs
  Budget budget_;
  std::vector<std::unique_ptr<Sequence>> programs_;      // parsed texts; functions point into them
  std::vector<std::map<std::string, Variable>> scopes_;  // [0] global; then one per call
  std::vector<Positional> positional_;
  std::map<std::string, Function> functions_;
  Status status_ = Status::kTrue;
  std::string reason_;  // why the last status is kUnknown or kAssumed
  int call_depth_ = 0, source_depth_ = 0, loop_depth_ = 0, loop_iterations_ = 0;
  size_t parsed_bytes_ = 0;  // all text parsed: the script, sourced files, eval
  int break_levels_ = 0;     // `break N` / `continue N`: loops still to leave
  int64_t commands_run_ = 0;
  size_t words_listed_ = 0;
  std::set<std::string> missing_noted_;
  std::set<std::tuple<int, int, std::string>> notes_seen_;
};

// ---- Expansion of one word ------------------------------------------------------------------

// Walks a word as written, part by part: quotes, escapes, $-expansions, command substitutions
// (unknown), ~. Literal characters gather in a run that is flushed before each expansion.
class Interpreter::Expander {
 public:
  Expander(Interpreter& shell, std::string_view raw, Origin at, const Context& ctx,
           FieldBuilder& out)
      : sh_(shell), raw_(raw), at_(at), ctx_(ctx), out_(out) {}

  void Run() {
    if (ctx_.depth > kMaxNesting) {
      throw InputError({sh_.files_[sh_.file_], at_.line, ""},
                       fmt::format("expansions nest more than {} deep", kMaxNesting));
    }
    while (i_ < raw_.size()) Step();
    Flush();
  }

 private:
  void Step() {
    ++parts_;
    const char c = raw_[i_];
    if (c == '\\') return Backslash();
    if (c == '\'' && !ctx_.quoted) return SingleQuoted();
    if (c == '"' && !ctx_.heredoc) return DoubleQuoted();
    if (c == '`') return CommandSubstitution(SkipBackquoted(raw_, i_));
    if (c == '$') return Dollar();
    if (c == '~' && TildeAllowed()) return Tilde();
    Add(c);  // a text that starts with a newline starts on the newline's line
    if (c == '\n') ++at_.line;
    ++i_;
  }

  void Add(char c) {
    if (run_.empty()) run_at_ = at_;
    run_ += c;
  }

  void Flush() {
    if (run_.empty()) return;
    if (ctx_.quoted) {
      out_.Quoted(run_, run_at_);
    } else if (ctx_.from_expansion) {
      out_.Split(run_, run_at_);
    } else {
      out_.Unquoted(run_, run_at_);
    }
    run_.clear();
  }

  Context Inner(bool quoted, bool from_expansion) const {
    return {quoted, from_expansion, false, ctx_.depth + 1, false};
  }

  // The construct from i_ to `end` (npos: the rest) as written, and the line after it.
  std::string_view Take(size_t end) {
    if (end == npos) end = raw_.size();
    const std::string_view text = raw_.substr(i_, end - i_);
    i_ = end;
    return text;
  }

  void Backslash() {
    const size_t n = raw_.size();
    const char next = i_ + 1 < n ? raw_[i_ + 1] : '\0';
    if (next == '\n' || (next == '\r' && i_ + 2 < n && raw_[i_ + 2] == '\n')) {
      i_ += next == '\n' ? 2 : 3;  // a line continuation vanishes
      ++at_.line;
      return;
    }
    const std::string_view escapable = ctx_.heredoc ? "$`\\" : "$`\"\\";
    if (i_ + 1 >= n || (ctx_.quoted && escapable.find(next) == npos)) {
      Add('\\');
      ++i_;
      return;
    }
    if (!ctx_.quoted) Flush();
    if (ctx_.quoted) {
      Add(next);
    } else {
      out_.Quoted(std::string_view(&raw_[i_ + 1], 1), at_);
    }
    i_ += 2;
  }

  void SingleQuoted() {
    Flush();
    const Origin at = at_;
    const std::string_view text = Take(SkipSingleQuoted(raw_, i_));
    out_.Quoted(text.substr(1, text.size() >= 2 ? text.size() - 2 : 0), at);
    at_.line += CountNewlines(text);
  }

  void DoubleQuoted() {
    Flush();
    const size_t end = SkipDoubleQuoted(raw_, i_, 0);
    const std::string_view text = Take(end);
    // An unclosed one (possible only inside "${X-'q"q'}") loses just its opening quote.
    const std::string_view content = end == npos ? text.substr(1) : text.substr(1, text.size() - 2);
    Expander inner(sh_, content, at_, Inner(true, false), out_);
    inner.Run();
    // "" is a word even when empty, but "${A[@]}" of no elements is none.
    if (inner.parts_ == 0 || inner.parts_ != inner.list_parts_) out_.Quoted("", at_);
    at_.line += CountNewlines(text);
  }

  // $(...) and `...` are never run: the word keeps them as written and is unknown. Only
  // $(pwd) is known: the builtin prints $PWD; so are the idioms for the script's own folder.
  void CommandSubstitution(size_t end) {
    Flush();
    const std::string_view text = Take(end);
    const Variable* pwd = IsPwd(text) ? sh_.Find("PWD") : nullptr;
    if (pwd != nullptr && pwd->elements.count(0) > 0 && !pwd->elements.at(0).unknown) {
      EmitText(pwd->elements.at(0).text, at_);
    } else if (auto numbers = Seq(text)) {
      EmitText(*numbers, at_);
    } else {
      out_.QuotedUnknown(text, at_);
    }
    at_.line += CountNewlines(text);
  }

  // $(seq LAST), $(seq FIRST LAST), $(seq FIRST STEP LAST) with integers known here: what seq
  // prints (at most 10,000 numbers), one per line; nothing otherwise.
  std::optional<std::string> Seq(std::string_view text) {
    if (!text.starts_with("$(") || !text.ends_with(")")) return std::nullopt;
    std::string_view command = text.substr(2, text.size() - 3);
    while (!command.empty() && IsBlank(command.front())) command.remove_prefix(1);
    if (!command.starts_with("seq ")) return std::nullopt;
    const Field args = sh_.ExpandString(command.substr(4), at_, Mode::kString, Inner(false, false));
    if (args.unknown) return std::nullopt;
    std::vector<int64_t> n;
    std::istringstream words(args.text);
    for (std::string w; words >> w;) {
      int64_t v = 0;
      const auto [ptr, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
      if (ec != std::errc() || ptr != w.data() + w.size()) return std::nullopt;
      n.push_back(v);
    }
    if (n.empty() || n.size() > 3) return std::nullopt;
    const int64_t first = n.size() > 1 ? n[0] : 1, last = n.back(), step = n.size() == 3 ? n[1] : 1;
    if (step == 0) return std::nullopt;
    std::string out;
    int count = 0;
    for (int64_t v = first; step > 0 ? v <= last : v >= last; v += step) {
      if (++count > 10'000) return std::nullopt;
      out += (out.empty() ? "" : "\n") + std::to_string(v);
    }
    return out;
  }

  // `pwd`, and the idioms for the script's own folder, which is $PWD here (the script runs
  // from its folder): $(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd), $(dirname $0),
  // $(dirname $(realpath $0)), `dirname $0`, ... (quotes, `--` and redirections of the output
  // to /dev/null aside).
  static bool IsPwd(std::string_view text) {
    const bool backquoted = !text.empty() && text[0] == '`';
    if (text.size() < (backquoted ? 2u : 3u)) return false;
    const std::string_view written =
        text.substr(backquoted ? 1 : 2, text.size() - (backquoted ? 2 : 3));
    std::string command;  // quotes dropped, blanks collapsed
    for (char c : written) {
      if (c == '"' || c == '\'') continue;
      if (IsBlank(c) || c == '\n') {
        if (!command.empty() && command.back() != ' ') command += ' ';
        continue;
      }
      command += c;
    }
    while (!command.empty() && command.back() == ' ') command.pop_back();
    const auto replace_all = [&](std::string_view from, std::string_view to) {
      for (size_t at = command.find(from); at != std::string::npos;
           at = command.find(from, at + to.size())) {
        command.replace(at, from.size(), to);
      }
    };
    replace_all("$( ", "$(");
    replace_all(" )", ")");
    for (std::string_view noise :
         {" -- ", " >/dev/null 2>&1", " > /dev/null 2>&1", " &>/dev/null", " &> /dev/null",
          " >/dev/null", " > /dev/null", " 2>/dev/null", " 2> /dev/null"}) {
      replace_all(noise, noise == " -- " ? " " : "");
    }
    for (std::string_view option : {"pwd -LP", "pwd -PL", "pwd -P", "pwd -L"}) {
      replace_all(option, "pwd");
    }
    for (std::string_view script :
         {"${BASH_SOURCE[0]}", "${BASH_SOURCE}", "$BASH_SOURCE", "${0}", "$0"}) {
      replace_all(script, "SCRIPT");
    }
    for (std::string_view dir :
         {"$(dirname $(realpath SCRIPT))", "$(dirname $(readlink -f SCRIPT))",
          "$(realpath $(dirname SCRIPT))", "$(dirname SCRIPT)", "`dirname SCRIPT`"}) {
      replace_all(dir, "DIR");
    }
    static constexpr std::string_view kForms[] = {"pwd",
                                                  "cd DIR && pwd",
                                                  "cd DIR; pwd",
                                                  "cd DIR;pwd",
                                                  "cd DIR&&pwd",
                                                  "cd -P DIR && pwd",
                                                  "dirname SCRIPT",
                                                  "realpath DIR",
                                                  "readlink -f DIR",
                                                  "dirname $(realpath SCRIPT)",
                                                  "dirname $(readlink -f SCRIPT)",
                                                  "python3 -c import os; print(os.getcwd())",
                                                  "python -c import os; print(os.getcwd())"};
    return std::find(std::begin(kForms), std::end(kForms), command) != std::end(kForms);
  }

  void Dollar() {
    const char next = i_ + 1 < raw_.size() ? raw_[i_ + 1] : '\0';
    if (next == '(') {
      const size_t end = SkipParens(raw_, i_ + 1, 0);
      if (end != npos && IsArithmeticExpansion(raw_, i_, end)) return ArithmeticExpansion(end);
      return CommandSubstitution(end);
    }
    if (next == '{') return Braced();
    if (next == '\'' && !ctx_.quoted) {
      Flush();
      const std::string_view text = Take(SkipAnsiC(raw_, i_));
      out_.Quoted(DecodeAnsiC(text.substr(2, text.size() >= 3 ? text.size() - 3 : 0)), at_);
      return;
    }
    if (next == '"' && !ctx_.quoted) {
      ++i_;  // $"..." (translated) reads as "..."
      return;
    }
    size_t end = i_ + 2;
    if (IsNameStart(next)) {
      while (end < raw_.size() && IsNameChar(raw_[end])) ++end;
    } else if (!IsDigit(next) && std::string_view("@*#?$!-").find(next) == npos) {
      Add('$');
      ++i_;
      return;
    }
    Flush();
    const std::string_view text = Take(end);
    Emit(sh_.Lookup(text.substr(1), std::nullopt, at_), text, at_);
  }

  void ArithmeticExpansion(size_t end) {
    Flush();
    const Origin at = at_;
    const std::string_view text = Take(end);
    at_.line += CountNewlines(text);
    const Field expr =
        sh_.ExpandString(text.substr(3, text.size() - 5), at, Mode::kString, Inner(true, false));
    if (expr.unknown) return out_.QuotedUnknown(text, at);
    Arithmetic arithmetic(expr.text, sh_, sh_.budget_, 0);
    const ArithResult r = arithmetic.Evaluate();
    if (!r.error.empty()) sh_.ArithmeticError(r.error);
    if (r.unknown) return out_.QuotedUnknown(text, at);
    EmitText(std::to_string(r.value), at);
  }

  void EmitText(const std::string& text, Origin at) {
    if (ctx_.quoted) {
      out_.Quoted(text, at);
    } else {
      out_.Split(text, at);
    }
  }

  // A parameter's values into fields: "$@" one field per value, "$*" joined, unquoted ones
  // split; a missing script argument one unknown word as written.
  void Emit(const Param& p, std::string_view written, Origin at) {
    if (p.missing) {
      sh_.NoteMissingArgument(p.name, at.line);
      return out_.QuotedUnknown(written, at);
    }
    if (p.list && ctx_.quoted) ++list_parts_;
    if (p.star && ctx_.quoted) {
      Unknown unknown;
      size_t offset = 0;
      for (const Value& v : p.values) {
        unknown.Add(v.unknown, offset);
        offset += v.text.size() + 1;
      }
      return out_.Quoted(Join(p.values), at, unknown);
    }
    for (size_t k = 0; k < p.values.size(); ++k) {
      const Value& v = p.values[k];
      const Origin origin = p.scalar || v.origin.line == 0 ? at : v.origin;
      if (k > 0) out_.Separate(origin);
      if (ctx_.quoted) {
        out_.Quoted(v.text, origin, v.unknown);
      } else {
        out_.Split(v.text, origin, v.unknown);
      }
    }
  }

  void Braced();
  bool Length(std::string_view body, std::string_view written);
  void Operator(const Param& p, std::string_view name, std::string_view op,
                std::string_view written);
  void Transform(const Param& p, std::string_view op, std::string_view written);
  bool Replace(Param& p, std::string_view op);
  bool Slice(Param& p, std::string_view op);
  std::optional<int64_t> Evaluate(std::string_view expression);
  void Unsupported(std::string_view written, const std::string& why) {
    sh_.Note(true, at_.line, fmt::format("{}: {}; the word is unknown", written, why),
             "write the value without this expansion");
    out_.QuotedUnknown(written, at_);
  }

  bool TildeAllowed() const {
    if (ctx_.quoted || ctx_.from_expansion) return false;
    if (i_ == 0) return true;
    return ctx_.assignment && raw_[i_ - 1] == ':';
  }

  // ~ and ~/dir are $HOME; ~+ is $PWD. An unset HOME or ~user is unknown.
  void Tilde() {
    size_t end = i_ + 1;
    while (end < raw_.size() && raw_[end] != '/' && !(ctx_.assignment && raw_[end] == ':')) {
      if (!IsNameChar(raw_[end]) && raw_[end] != '+' && raw_[end] != '-') {
        Add('~');
        ++i_;
        return;
      }
      ++end;
    }
    const std::string_view prefix = raw_.substr(i_, end - i_);
    const char* name = prefix == "~" ? "HOME" : prefix == "~+" ? "PWD" : nullptr;
    const Variable* v = name ? sh_.Find(name) : nullptr;
    Flush();
    if (v != nullptr && v->elements.count(0)) {
      out_.Quoted(v->elements.at(0).text, at_, v->elements.at(0).unknown);
    } else {
      out_.QuotedUnknown(prefix, at_);
    }
    i_ = end;
  }

  Interpreter& sh_;
  std::string_view raw_;
  size_t i_ = 0;
  Origin at_;
  Context ctx_;
  FieldBuilder& out_;
  std::string run_;
  Origin run_at_;
  int parts_ = 0, list_parts_ = 0;  // steps taken; of them, quoted "$@"-like expansions
};

void Interpreter::ExpandInto(std::string_view raw, Origin at, const Context& ctx,
                             FieldBuilder& out) {
  budget_.Work(static_cast<int64_t>(raw.size()));  // a word can be long and produce nothing
  Expander(*this, raw, at, ctx, out).Run();
}

// ${...}: ${#name}, ${name}, ${name[sub]} and the operators after them.
void Interpreter::Expander::Braced() {
  Flush();
  const Origin at = at_;
  const std::string_view written = Take(SkipBraces(raw_, i_ + 1, 0, ctx_.quoted));
  const std::string_view body = written.substr(2, written.size() >= 3 ? written.size() - 3 : 0);
  if (body.size() > 1 && body[0] == '#' && Length(body.substr(1), written)) {
    at_.line += CountNewlines(written);
    return;
  }
  if (body.size() > 1 && body[0] == '!') {
    return Unsupported(written, "indirect expansion ${!name} is not interpreted");
  }
  size_t k = 0;
  if (!body.empty() && IsDigit(body[0])) {
    while (k < body.size() && IsDigit(body[k])) ++k;
  } else if (!body.empty() && IsNameStart(body[0])) {
    while (k < body.size() && IsNameChar(body[k])) ++k;
  } else if (!body.empty() && std::string_view("@*#?$!-").find(body[0]) != npos) {
    k = 1;
  }
  if (k == 0) return Unsupported(written, "bad substitution");
  const std::string_view name = body.substr(0, k);
  std::optional<std::string_view> subscript;
  if (k < body.size() && body[k] == '[' && IsNameStart(name[0])) {
    const size_t close = body.find(']', k);
    if (close == npos) return Unsupported(written, "bad substitution");
    subscript = body.substr(k + 1, close - k - 1);
    k = close + 1;
  }
  const Param p = sh_.Lookup(name, subscript, at);
  Operator(p, name, body.substr(k), written);
  at_.line += CountNewlines(written);
}

// ${#name}, ${#A[@]}: false when the body is no parameter (then '#' is $#).
bool Interpreter::Expander::Length(std::string_view body, std::string_view written) {
  size_t k = 0;
  if (IsDigit(body[0])) {
    while (k < body.size() && IsDigit(body[k])) ++k;
  } else if (IsNameStart(body[0])) {
    while (k < body.size() && IsNameChar(body[k])) ++k;
  } else if (std::string_view("@*#?$!-").find(body[0]) != npos) {
    k = 1;
  }
  const std::string_view name = body.substr(0, k);
  std::optional<std::string_view> subscript;
  if (k > 0 && k < body.size() && body[k] == '[' && body.back() == ']') {
    subscript = body.substr(k + 1, body.size() - k - 2);
    k = body.size();
  }
  if (k == 0 || k != body.size()) return false;
  const Param p = sh_.Lookup(name, subscript, at_);
  if (p.missing) {
    sh_.NoteMissingArgument(body, at_.line);
    out_.QuotedUnknown(written, at_);
    return true;
  }
  size_t length = 0;
  if (p.list || p.star) {
    length = p.values.size();
  } else if (p.set) {
    if (p.values[0].unknown) {
      out_.QuotedUnknown(written, at_);
      return true;
    }
    length = Utf8Length(p.values[0].text);
  }
  EmitText(std::to_string(length), at_);
  return true;
}

void Interpreter::Expander::Operator(const Param& p, std::string_view name, std::string_view op,
                                     std::string_view written) {
  if (op.empty()) return Emit(p, written, at_);
  const bool colon = op[0] == ':' && op.size() > 1 && std::string_view("-=+?").find(op[1]) != npos;
  const std::string_view rest = op.substr(colon ? 1 : 0);
  if (std::string_view("-=+?").find(rest[0]) == npos) return Transform(p, op, written);
  const std::string_view word = rest.substr(1);
  const bool null = !p.set || (colon && Join(p.values).empty());
  const Context inner = Inner(ctx_.quoted, !ctx_.quoted);
  switch (rest[0]) {
    case '-':  // default
      if (!null) return Emit(p, written, at_);
      return sh_.ExpandInto(word, at_, inner, out_);
    case '+':  // alternative
      if (null) return;
      return sh_.ExpandInto(word, at_, inner, out_);
    case '=': {  // assign the default
      if (!null) return Emit(p, written, at_);
      if (p.missing || !IsNameStart(name[0])) {
        return Unsupported(written, fmt::format("${} cannot be assigned this way", name));
      }
      Value value{"", at_};
      const Field f = sh_.ExpandString(word, at_, Mode::kString, Inner(true, false));
      value.text = f.text;
      value.unknown = f.unknown;
      Variable& v = sh_.FindOrCreate(std::string(name));
      if (sh_.CheckWritable(std::string(name), v)) v.elements[0] = value;
      return EmitText(value.text, at_);
    }
    default: {  // '?': an error that ends the script
      if (!null) return Emit(p, written, at_);
      if (p.missing) return Emit(p, written, at_);
      const Field message = sh_.ExpandString(word, at_, Mode::kString, Inner(true, false));
      sh_.Note(true, at_.line,
               fmt::format("bash stops the script here: {}: {}", name,
                           message.text.empty() ? "parameter null or not set" : message.text),
               fmt::format("set {} before this line", name));
      throw ScriptExit{};
    }
  }
}

// The index of the first '/' outside quotes and expansions in ${X/pattern/replacement}.
size_t FindUnquotedSlash(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t skipped = SkipQuotedOrExpansion(s, i, 0, false);
    if (skipped == npos) return npos;
    if (skipped != i) {
      i = skipped;
    } else if (s[i] == '/') {
      return i;
    } else {
      ++i;
    }
  }
  return npos;
}

// ${X#p} ${X##p} ${X%p} ${X%%p}: the value with the shortest or longest match removed.
std::string TrimPattern(const std::string& value, const Glob& glob, char side, bool longest) {
  const size_t n = value.size();
  for (size_t step = 0; step <= n; ++step) {
    // '#' tries prefixes short to long (long to short when longest); '%' suffixes likewise.
    const size_t k = (side == '#') == longest ? n - step : step;
    if (side == '#' && glob.Matches(std::string_view(value).substr(0, k))) return value.substr(k);
    if (side == '%' && glob.Matches(std::string_view(value).substr(n - (n - k)))) {
      return value.substr(0, k);
    }
  }
  return value;
}

// ${X/p/r} (mode '1': first), ${X//p/r} ('/': all), ${X/#p/r} ('#': prefix), ${X/%p/r} ('%':
// suffix): the longest match at the leftmost place. In r an unquoted & is the matched text (bash
// 5.2's default); `replacement` has quoted characters escaped with '\'.
std::string ReplacePattern(const std::string& value, const Glob& glob, char mode,
                           std::string_view replacement) {
  auto substitute = [&](std::string_view match) {
    std::string out;
    for (size_t i = 0; i < replacement.size(); ++i) {
      if (replacement[i] == '\\' && i + 1 < replacement.size()) {
        out += replacement[++i];
      } else if (replacement[i] == '&') {
        out.append(match);
      } else {
        out += replacement[i];
      }
    }
    return out;
  };
  const size_t n = value.size();
  std::string out;
  for (size_t start = 0; start <= n;) {
    std::optional<size_t> match_end;
    for (size_t end = n + 1; end-- > start;) {
      if (glob.Matches(std::string_view(value).substr(start, end - start))) {
        match_end = end;
        break;
      }
      if (mode == '%') break;
    }
    if (match_end) {
      out += substitute(std::string_view(value).substr(start, *match_end - start));
      if (mode != '/') return out + value.substr(*match_end);
      if (*match_end == start && start < n) out += value[start];
      start = std::max(*match_end, start + 1);
      continue;
    }
    if (mode == '#') return value;
    if (start < n) out += value[start];
    ++start;
  }
  return out;
}

void Interpreter::Expander::Transform(const Param& p, std::string_view op,
                                      std::string_view written) {
  if (p.missing) {
    sh_.NoteMissingArgument(p.name, at_.line);
    return out_.QuotedUnknown(written, at_);
  }
  for (const Value& v : p.values) {
    if (v.unknown) return out_.QuotedUnknown(written, at_);
  }
  Param result = p;
  bool known = true;
  if (op[0] == ':') {
    known = Slice(result, op.substr(1));
  } else if (op[0] == '#' || op[0] == '%') {
    const bool longest = op.size() > 1 && op[1] == op[0];
    const Field pattern =
        sh_.ExpandString(op.substr(longest ? 2 : 1), at_, Mode::kPattern, Inner(false, false));
    known = !pattern.unknown;
    const Glob glob(pattern.text, sh_.budget_);
    for (Value& v : result.values) v.text = TrimPattern(v.text, glob, op[0], longest);
  } else if (op[0] == '/') {
    known = Replace(result, op.substr(1));
  } else if ((op[0] == '^' || op[0] == ',') && op.size() <= 2 &&
             (op.size() == 1 || op[1] == op[0])) {
    for (Value& v : result.values) {
      const size_t count = op.size() == 2 ? v.text.size() : std::min<size_t>(1, v.text.size());
      for (size_t k = 0; k < count; ++k) {
        const unsigned char c = static_cast<unsigned char>(v.text[k]);
        v.text[k] = static_cast<char>(op[0] == '^' ? std::toupper(c) : std::tolower(c));
      }
    }
  } else {
    return Unsupported(written, "this form of ${...} is not interpreted");
  }
  if (!known) return out_.QuotedUnknown(written, at_);
  Emit(result, written, at_);
}

bool Interpreter::Expander::Replace(Param& p, std::string_view op) {
  char mode = '1';
  if (!op.empty() && (op[0] == '/' || op[0] == '#' || op[0] == '%')) {
    mode = op[0];
    op.remove_prefix(1);
  }
  const size_t slash = FindUnquotedSlash(op);
  const std::string_view pattern_text = op.substr(0, slash);
  const std::string_view replacement_text = slash == npos ? "" : op.substr(slash + 1);
  const Field pattern = sh_.ExpandString(pattern_text, at_, Mode::kPattern, Inner(false, false));
  const Field replacement =
      sh_.ExpandString(replacement_text, at_, Mode::kPattern, Inner(false, false));
  if (pattern.unknown || replacement.unknown) return false;
  if (pattern.text.empty()) return true;
  const Glob glob(pattern.text, sh_.budget_);
  for (Value& v : p.values) {
    v.text = ReplacePattern(v.text, glob, mode, replacement.text);
    sh_.budget_.Spend(v.text.size());
  }
  return true;
}

// ${X:offset} ${X:offset:length}: characters of a value, or elements of $@ / ${A[@]}.
bool Interpreter::Expander::Slice(Param& p, std::string_view op) {
  const size_t colon = op.find(':');
  std::optional<int64_t> offset = Evaluate(op.substr(0, colon));
  std::optional<int64_t> length;
  if (colon != npos) length = Evaluate(op.substr(colon + 1));
  if (!offset || (colon != npos && !length)) return false;
  auto range = [&](int64_t size) -> std::pair<size_t, size_t> {
    int64_t begin = *offset < 0 ? size + *offset : *offset;
    if (begin < 0 || begin > size) return {0, 0};
    int64_t end = size;
    if (length) end = *length < 0 ? size + *length : std::min(size, begin + *length);
    return {static_cast<size_t>(begin), static_cast<size_t>(std::max(begin, end))};
  };
  if (p.list || p.star) {
    if (p.name == "@" || p.name == "*") {
      p.values.insert(p.values.begin(), Value{sh_.files_[0], {}});
    }
    const auto [begin, end] = range(static_cast<int64_t>(p.values.size()));
    p.values = std::vector<Value>(p.values.begin() + begin, p.values.begin() + end);
    return true;
  }
  for (Value& v : p.values) {
    const auto [begin, end] = range(static_cast<int64_t>(v.text.size()));
    v.text = v.text.substr(begin, end - begin);
  }
  return true;
}

std::optional<int64_t> Interpreter::Expander::Evaluate(std::string_view expression) {
  const Field text = sh_.ExpandString(expression, at_, Mode::kString, Inner(true, false));
  if (text.unknown) return std::nullopt;
  Arithmetic arithmetic(text.text, sh_, sh_.budget_, 0);
  const ArithResult r = arithmetic.Evaluate();
  if (!r.error.empty()) sh_.ArithmeticError(r.error);
  if (r.unknown) return std::nullopt;
  return r.value;
}

// ---- Parameters ---------------------------------------------------------------------------------

Param Interpreter::Lookup(std::string_view name, std::optional<std::string_view> subscript,
                          Origin at) {
  Param p;
  p.name = std::string(name);
  const Positional& args = positional_.back();
  if (IsDigit(name[0])) {
    const size_t n = name.size() > 9 ? SIZE_MAX : std::stoul(std::string(name));
    if (n == 0) {
      p.values.push_back({files_[0], {}});
    } else if (n <= args.values.size()) {
      p.values.push_back(args.values[n - 1]);
    } else {
      p.missing = args.script;
    }
  } else if (name == "@" || name == "*") {
    p.values = args.values;
    p.list = name == "@";
    p.star = name == "*";
  } else if (name == "#") {
    p.values.push_back({std::to_string(args.values.size()), at});
  } else if (name == "?") {
    const bool known = status_ == Status::kTrue || status_ == Status::kFalse;
    p.values.push_back({known ? (status_ == Status::kTrue ? "0" : "1") : "$?", at,
                        known ? Unknown{} : Unknown::All(2)});
  } else if (name == "$" || name == "!" || name == "-") {
    p.values.push_back({fmt::format("${}", name), at, Unknown::All(2)});
  } else {
    LookupVariable(p, subscript, at);
  }
  p.set = !p.values.empty();
  return p;
}

void Interpreter::LookupVariable(Param& p, std::optional<std::string_view> subscript, Origin at) {
  static constexpr std::string_view kDynamic[] = {
      "RANDOM", "SRANDOM", "SECONDS", "EPOCHSECONDS", "EPOCHREALTIME", "BASHPID", "PPID"};
  const bool all = subscript && (*subscript == "@" || *subscript == "*");
  p.list = all && *subscript == "@";
  p.star = all && *subscript == "*";
  const Variable* v = Find(p.name);
  if (v == nullptr) {
    if (p.name == "LINENO") p.values.push_back({std::to_string(at.line), at});
    const auto& prefixes = options_.unknown_when_unset;
    if (std::find(std::begin(kDynamic), std::end(kDynamic), p.name) != std::end(kDynamic) ||
        std::any_of(prefixes.begin(), prefixes.end(),
                    [&](const std::string& prefix) { return p.name.starts_with(prefix); })) {
      p.values.push_back({"$" + p.name, at, Unknown::All(p.name.size() + 1)});
    }
    p.scalar = !subscript;
    return;
  }
  if (all) {
    for (const auto& [index, value] : v->elements) p.values.push_back(value);
    return;
  }
  p.scalar = !subscript;
  const int64_t index = subscript ? ResolveIndex(*v, EvaluateIndex(*subscript, at)) : 0;
  if (const auto it = v->elements.find(index); it != v->elements.end()) {
    p.values.push_back(it->second);
  }
}

// ---- Conditions: test, [ ], [[ ]] --------------------------------------------------------------

Status Not(Status s) {
  if (s == Status::kTrue) return Status::kFalse;
  if (s == Status::kFalse) return Status::kTrue;
  return Status::kUnknown;
}
Status And(Status a, Status b) {
  if (a == Status::kFalse || b == Status::kFalse) return Status::kFalse;
  return a == Status::kTrue && b == Status::kTrue ? Status::kTrue : Status::kUnknown;
}
Status Or(Status a, Status b) {
  if (a == Status::kTrue || b == Status::kTrue) return Status::kTrue;
  return a == Status::kFalse && b == Status::kFalse ? Status::kFalse : Status::kUnknown;
}
Status FromBool(bool b) { return b ? Status::kTrue : Status::kFalse; }

bool IsFileTest(std::string_view op) {
  return op.size() == 2 && op[0] == '-' &&
         std::string_view("abcdefghkprsuwxGLNOS").find(op[1]) != npos;
}
bool IsUnaryTest(std::string_view op) {
  return IsFileTest(op) || op == "-z" || op == "-n" || op == "-v" || op == "-t" || op == "-o" ||
         op == "-R";
}
bool IsBinaryTest(std::string_view op, bool in_cond) {
  static constexpr std::string_view kOperators[] = {"=",   "==",  "!=",  "<",   ">",
                                                    "-eq", "-ne", "-lt", "-le", "-gt",
                                                    "-ge", "-nt", "-ot", "-ef", "=~"};
  if (op == "=~" && !in_cond) return false;
  return std::find(std::begin(kOperators), std::end(kOperators), op) != std::end(kOperators);
}

Status Interpreter::TestUnary(std::string_view op, const Field& operand) {
  if (IsFileTest(op)) {
    Note(false, line_,
         fmt::format("`{} {}`: ptdp does not look at files; it assumed the file exists", op,
                     operand.text),
         "");
    return Status::kTrue;
  }
  if (op == "-t" || op == "-o" || op == "-R") {
    reason_ = fmt::format("`{} {}` depends on how the script runs", op, operand.text);
    return Status::kUnknown;
  }
  if (operand.unknown) return Undecided(operand);
  if (op == "-v") {
    const Variable* v = Find(operand.text);
    return FromBool(v != nullptr && v->elements.count(0) > 0);
  }
  return FromBool(operand.text.empty() == (op == "-z"));
}

// An operand of -eq and friends: in [[ ]] an arithmetic expression, in [ ] a decimal integer.
std::optional<int64_t> Interpreter::TestInteger(const Field& f, bool in_cond) {
  if (in_cond) {
    Arithmetic arithmetic(f.text, *this, budget_, 0);
    const ArithResult r = arithmetic.Evaluate();
    if (!r.error.empty() || r.unknown) return std::nullopt;
    return r.value;
  }
  const size_t first = f.text.find_first_not_of(" \t");
  const size_t last = f.text.find_last_not_of(" \t");
  if (first == npos) return std::nullopt;
  std::string_view digits = std::string_view(f.text).substr(first, last - first + 1);
  const bool negative = digits[0] == '-';
  if (digits[0] == '-' || digits[0] == '+') digits.remove_prefix(1);
  if (digits.empty() || digits.find_first_not_of("0123456789") != npos) return std::nullopt;
  uint64_t v = 0;
  for (char c : digits) v = v * 10 + static_cast<uint64_t>(c - '0');
  return static_cast<int64_t>(negative ? 0 - v : v);
}

Status Interpreter::TestBinary(const Field& lhs, std::string_view op, const Field& rhs,
                               bool in_cond) {
  if (op == "-nt" || op == "-ot" || op == "-ef") {
    reason_ = fmt::format("`{}` compares files ptdp does not look at", op);
    return Status::kUnknown;
  }
  if (op == "=~") {
    reason_ = "ptdp does not interpret =~ regular expressions";
    return Status::kUnknown;
  }
  if (lhs.unknown) return Undecided(lhs);
  if (rhs.unknown) return Undecided(rhs);
  if (op == "=" || op == "==" || op == "!=") {
    const bool equal = in_cond ? Glob(rhs.text, budget_).Matches(lhs.text) : lhs.text == rhs.text;
    return FromBool(equal != (op == "!="));
  }
  if (op == "<") return FromBool(lhs.text < rhs.text);
  if (op == ">") return FromBool(lhs.text > rhs.text);
  const std::optional<int64_t> a = TestInteger(lhs, in_cond), b = TestInteger(rhs, in_cond);
  if (!a || !b) {
    return TestError(fmt::format("{}: integer expression expected", !a ? lhs.text : rhs.text));
  }
  if (op == "-eq") return FromBool(*a == *b);
  if (op == "-ne") return FromBool(*a != *b);
  if (op == "-lt") return FromBool(*a < *b);
  if (op == "-le") return FromBool(*a <= *b);
  if (op == "-gt") return FromBool(*a > *b);
  return FromBool(*a >= *b);
}

// test ARGS / [ ARGS ]: POSIX's rules by the number of arguments, then ! ( ) -a -o.
class Interpreter::TestCommand {
 public:
  TestCommand(Interpreter& shell, std::vector<Field> args) : sh_(shell), args_(std::move(args)) {}

  Status Evaluate() { return ByCount(0, args_.size()); }

 private:
  const std::string& Text(size_t k) const { return args_[k].text; }

  Status ByCount(size_t from, size_t n) {
    switch (n) {
      case 0:
        return Status::kFalse;
      case 1:
        return sh_.TestNonEmpty(args_[from]);
      case 2:
        if (Text(from) == "!") return Not(sh_.TestNonEmpty(args_[from + 1]));
        if (IsUnaryTest(Text(from))) return sh_.TestUnary(Text(from), args_[from + 1]);
        return sh_.TestError(fmt::format("{}: unary operator expected", Text(from)));
      case 3:
        if (IsBinaryTest(Text(from + 1), false)) {
          return sh_.TestBinary(args_[from], Text(from + 1), args_[from + 2], false);
        }
        if (Text(from + 1) == "-a" || Text(from + 1) == "-o") break;
        if (Text(from) == "!") return Not(ByCount(from + 1, 2));
        if (Text(from) == "(" && Text(from + 2) == ")") return sh_.TestNonEmpty(args_[from + 1]);
        return sh_.TestError(fmt::format("{}: binary operator expected", Text(from + 1)));
      case 4:
        if (Text(from) == "!") return Not(ByCount(from + 1, 3));
        if (Text(from) == "(" && Text(from + 3) == ")") return ByCount(from + 1, 2);
        break;
      default:
        break;
    }
    i_ = from;
    end_ = from + n;
    const Status s = AnyOf();
    if (i_ != end_) return sh_.TestError("too many arguments");
    return s;
  }

  Status AnyOf() {
    Status s = AllOf();
    while (i_ < end_ && Text(i_) == "-o") {
      ++i_;
      s = Or(s, AllOf());
    }
    return s;
  }

  Status AllOf() {
    Status s = Term();
    while (i_ < end_ && Text(i_) == "-a") {
      ++i_;
      s = And(s, Term());
    }
    return s;
  }

  Status Term() {
    if (i_ >= end_) return sh_.TestError("argument expected");
    if (Text(i_) == "!") {
      ++i_;
      return Not(Term());
    }
    if (Text(i_) == "(" && ++depth_ < kMaxNesting) {
      ++i_;
      const Status s = AnyOf();
      if (i_ < end_ && Text(i_) == ")") ++i_;
      --depth_;
      return s;
    }
    if (IsUnaryTest(Text(i_)) && i_ + 1 < end_) {
      i_ += 2;
      return sh_.TestUnary(Text(i_ - 2), args_[i_ - 1]);
    }
    if (i_ + 2 < end_ && IsBinaryTest(Text(i_ + 1), false)) {
      i_ += 3;
      return sh_.TestBinary(args_[i_ - 3], Text(i_ - 2), args_[i_ - 1], false);
    }
    return sh_.TestNonEmpty(args_[i_++]);
  }

  Interpreter& sh_;
  std::vector<Field> args_;
  size_t i_ = 0, end_ = 0;
  int depth_ = 0;
};

// [[ expression ]]: operands are expanded only when evaluated (&& and || short-circuit), without
// splitting; the right side of == and != is a pattern.
class Interpreter::CondExpression {
 public:
  CondExpression(Interpreter& shell, const std::vector<Word>& words) : sh_(shell), words_(words) {}

  Status Evaluate() {
    const Status s = AnyOf();
    if (i_ != words_.size()) return sh_.TestError("syntax error in conditional expression");
    return s;
  }

 private:
  bool At(std::string_view op) const { return i_ < words_.size() && words_[i_].text == op; }

  Status AnyOf() {
    Status s = AllOf();
    while (At("||")) {
      ++i_;
      skip_ += s == Status::kTrue;
      const Status rhs = AllOf();
      skip_ -= s == Status::kTrue;
      s = s == Status::kTrue ? s : Or(s, rhs);
    }
    return s;
  }

  Status AllOf() {
    Status s = Term();
    while (At("&&")) {
      ++i_;
      skip_ += s == Status::kFalse;
      const Status rhs = Term();
      skip_ -= s == Status::kFalse;
      s = s == Status::kFalse ? s : And(s, rhs);
    }
    return s;
  }

  Field Operand(size_t k, Mode mode) {
    const Word& w = words_[k];
    return sh_.ExpandString(w.text, {w.line, sh_.file_}, mode);
  }

  bool IsConnector(size_t k) const {
    return k >= words_.size() || words_[k].text == "&&" || words_[k].text == "||" ||
           words_[k].text == ")";
  }

  Status Term() {
    if (i_ >= words_.size()) return sh_.TestError("unexpected end of conditional expression");
    if (At("!")) {
      ++i_;
      return Not(Term());
    }
    if (At("(") && ++depth_ < kMaxNesting) {
      ++i_;
      const Status s = AnyOf();
      if (At(")")) ++i_;
      --depth_;
      return s;
    }
    if (IsUnaryTest(words_[i_].text) && !IsConnector(i_ + 1)) {
      i_ += 2;
      if (skip_ > 0) return Status::kFalse;
      return sh_.TestUnary(words_[i_ - 2].text, Operand(i_ - 1, Mode::kString));
    }
    if (i_ + 2 < words_.size() && IsBinaryTest(words_[i_ + 1].text, true)) {
      i_ += 3;
      if (skip_ > 0) return Status::kFalse;
      const std::string& op = words_[i_ - 2].text;
      const bool pattern = op == "==" || op == "=" || op == "!=";
      return sh_.TestBinary(Operand(i_ - 3, Mode::kString), op,
                            Operand(i_ - 1, pattern ? Mode::kPattern : Mode::kString), true);
    }
    ++i_;
    if (skip_ > 0) return Status::kFalse;
    return sh_.TestNonEmpty(Operand(i_ - 1, Mode::kString));
  }

  Interpreter& sh_;
  const std::vector<Word>& words_;
  size_t i_ = 0;
  int skip_ = 0;
  int depth_ = 0;
};

// ---- Running commands ---------------------------------------------------------------------------

Flow Interpreter::Dispatch(const Command& c) {
  using Kind = Command::Kind;
  switch (c.kind) {
    case Kind::kSimple:
      return RunSimple(c);
    case Kind::kPipeline:
      return RunPipeline(c);
    case Kind::kAnd:
    case Kind::kOr:
      return RunAndOr(c);
    case Kind::kIf:
      return RunIf(c);
    case Kind::kFor:
      return RunFor(c);
    case Kind::kArithFor:
      return RunArithFor(c);
    case Kind::kLoop:
      if (c.text == "while" || c.text == "until") return RunWhile(c);
      Note(true, c.line,
           fmt::format("the `{}` loop on line {} was not run: ptdp runs only `for`, `while` "
                       "and `until` loops",
                       c.text, c.line),
           "write the commands the loop would run without the loop");
      SetStatus(Status::kUnknown, fmt::format("the `{}` loop was not run", c.text));
      return Flow::kNormal;
    case Kind::kCase:
      return RunCase(c);
    case Kind::kGroup:
      return Run(c.lists[0]);
    case Kind::kSubshell:
      return RunIsolated(c.lists[0]);
    case Kind::kFunction:
      functions_[c.name] = {c.parts[0].get(), file_};
      SetStatus(Status::kTrue);
      return Flow::kNormal;
    case Kind::kArith:
      SetStatus(RunArith(c.text));
      return Flow::kNormal;
    case Kind::kCond:
      SetStatus(CondExpression(*this, c.words).Evaluate());
      return Flow::kNormal;
  }
  return Flow::kNormal;
}

bool IsDeclaration(std::string_view w) {
  return w == "export" || w == "declare" || w == "typeset" || w == "local" || w == "readonly";
}

Flow Interpreter::RunSimple(const Command& c) {
  if (!c.words.empty() && c.assignments.empty() && IsDeclaration(c.words[0].text)) {
    return RunDeclaration(c);
  }
  const std::vector<Field> fields = ExpandFields(c.words);
  if (fields.empty()) {
    for (const Word& w : c.assignments) Assign(w, {});
    SetStatus(Status::kTrue);
    return Flow::kNormal;
  }
  if (!fields[0].unknown) {
    if (const std::optional<Flow> flow = RunBuiltin(c, fields)) return *flow;
    if (const auto it = functions_.find(fields[0].text); it != functions_.end()) {
      return CallFunction(it->second, c, fields);
    }
  }
  List(c, fields);
  SetStatus(Status::kAssumed, fmt::format("`{}` is a program ptdp does not run", fields[0].text));
  return fields[0].text == "exec" && fields.size() > 1 ? Flow::kExit : Flow::kNormal;
}

// The builtins that change the interpreter's state or decide a status; nullopt for the others.
std::optional<Flow> Interpreter::RunBuiltin(const Command& c, const std::vector<Field>& fields) {
  const std::string& name = fields[0].text;
  const std::vector<Field> args(fields.begin() + 1, fields.end());
  if (name == ":" || name == "true" || name == "false") {
    SetStatus(FromBool(name != "false"));
  } else if (name == "test" || name == "[") {
    std::vector<Field> operands = args;
    if (name == "[" && (operands.empty() || operands.back().text != "]")) {
      SetStatus(TestError("[: missing `]'"));
    } else {
      if (name == "[") operands.pop_back();
      SetStatus(TestCommand(*this, std::move(operands)).Evaluate());
    }
  } else if (name == "exit") {
    return Flow::kExit;
  } else if (name == "return") {
    if (call_depth_ == 0 && source_depth_ == 0) {
      Note(true, line_, "return outside a function: bash refuses it and goes on");
      return Flow::kNormal;
    }
    if (!args.empty()) SetStatus(FromBool(args[0].text == "0"));
    return Flow::kReturn;
  } else if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) return Flow::kNormal;
    const std::optional<int64_t> levels = args.empty() ? 1 : TestInteger(args[0], false);
    break_levels_ = static_cast<int>(std::clamp<int64_t>(levels.value_or(1), 1, loop_depth_));
    return name == "break" ? Flow::kBreak : Flow::kContinue;
  } else if (name == "shift") {
    RunShift(args);
  } else if (name == "source" || name == ".") {
    return RunSource(fields);
  } else if (name == "eval") {
    return RunEval(fields);
  } else if (name == "unset") {
    RunUnset(args);
  } else if (name == "set") {
    List(c, fields);
    RunSet(args);
  } else {
    return std::nullopt;
  }
  return Flow::kNormal;
}

ShellWord Interpreter::ToShellWord(const Field& f) const {
  return {f.text, f.origin.line, static_cast<bool>(f.unknown), files_[f.origin.file]};
}

// A here-document's body expands like double-quoted text in which quotes are ordinary; a
// here-string is its word expanded, plus a newline.
Field Interpreter::ExpandInput(const Command& c) {
  const Origin at{c.input->line, file_};
  if (c.input_literal) return Field{c.input->text, at};
  if (c.input_herestring) {
    Field f = ExpandString(c.input->text, at);
    f.text += '\n';
    return f;
  }
  return ExpandString(c.input->text, at, Mode::kString, {.quoted = true, .heredoc = true});
}

void Interpreter::List(const Command& c, const std::vector<Field>& fields) {
  words_listed_ += fields.size();
  if (words_listed_ > kMaxWords) {
    throw InputError({files_[file_], c.line, ""},
                     fmt::format("the script's commands have more than {} words", kMaxWords),
                     "ptdp reads launch scripts; this is not one");
  }
  ShellCommand command;
  command.line = c.line;
  command.source = files_[file_];
  for (const Field& f : fields) command.words.push_back(ToShellWord(f));
  if (c.input) command.input = ToShellWord(ExpandInput(c));
  // NAME=value before the program: in its environment only, each seeing the ones before it.
  scopes_.emplace_back();
  const OnExit pop{[&] { scopes_.pop_back(); }};
  for (const Word& w : c.assignments) Assign(w, {.local = true, .exported = true});
  command.environment = Environment();
  result_.commands.push_back(std::move(command));
}

Flow Interpreter::CallFunction(const Function& function, const Command& c,
                               const std::vector<Field>& fields) {
  if (call_depth_ >= kMaxCallDepth) {
    Note(true, line_,
         fmt::format("{} was not run: functions call each other more than {} deep", fields[0].text,
                     kMaxCallDepth));
    SetStatus(Status::kUnknown, "a function was not run");
    return Flow::kNormal;
  }
  Positional arguments;
  for (size_t k = 1; k < fields.size(); ++k) {
    arguments.values.push_back({fields[k].text, fields[k].origin, fields[k].unknown});
  }
  const CallFrame frame{*this, scopes_.size(), file_};
  scopes_.emplace_back();  // NAME=value before the call: the function's, exported
  for (const Word& w : c.assignments) Assign(w, {.local = true, .exported = true});
  scopes_.emplace_back();  // the function's locals
  positional_.push_back(std::move(arguments));
  ++call_depth_;
  file_ = function.file;
  const Flow flow = RunCommand(*function.body);
  line_ = budget_.line = c.line;
  return flow == Flow::kExit ? Flow::kExit : Flow::kNormal;
}

// The options of export/declare/typeset/local/readonly; `k` is left on the first operand.
AssignOptions Interpreter::DeclarationOptions(const Command& c, size_t& k) {
  const std::string& builtin = c.words[0].text;
  AssignOptions options;
  options.exported = builtin == "export";
  options.readonly = builtin == "readonly";
  options.local = builtin == "local" || (builtin != "export" && builtin != "readonly" &&
                                         call_depth_ > 0);  // declare in a function
  for (k = 1;
       k < c.words.size() && !c.words[k].is_array && AssignmentEquals(c.words[k].text) == npos;
       ++k) {
    const std::string option = ExpandString(c.words[k].text, {c.words[k].line, file_}).text;
    if (option == "--") {
      ++k;
      break;
    }
    if (option.size() < 2 || (option[0] != '-' && option[0] != '+')) break;
    const bool on = option[0] == '-';
    for (char flag : option.substr(1)) {
      if (flag == 'x') (on ? options.exported : options.unexported) = true;
      if (flag == 'n' && builtin == "export") options.unexported = true;
      if (flag == 'r') options.readonly = on;
      if (flag == 'a' || flag == 'A') options.array = on;
      if (flag == 'i') options.integer = on;
      if (flag == 'g') options.local = false;
      if (flag == 'f' || flag == 'F' || flag == 'p') options.functions = true;
      if (flag == 'A') {
        Note(true, c.line, "associative arrays are not interpreted: their keys are read as numbers",
             "use an indexed array or plain variables");
      }
    }
  }
  return options;
}

// export, declare, typeset, local, readonly: their NAME=value operands are assignments (no word
// splitting), the other operands name variables to give the attributes.
Flow Interpreter::RunDeclaration(const Command& c) {
  SetStatus(Status::kTrue);
  if (c.words[0].text == "local" && call_depth_ == 0) {
    Note(true, c.line, "local outside a function: bash refuses it and goes on");
    return Flow::kNormal;
  }
  size_t k = 0;
  const AssignOptions options = DeclarationOptions(c, k);
  for (; k < c.words.size() && !options.functions; ++k) {
    const Word& w = c.words[k];
    if (w.is_array || AssignmentEquals(w.text) != npos) {
      Assign(w, options);
      continue;
    }
    for (const Field& f : ExpandWord(w, Mode::kFields)) {
      if (f.unknown || f.text.empty() || !IsNameStart(f.text[0])) continue;
      Variable& v = Target(f.text, options.local);
      v.exported = (v.exported || options.exported) && !options.unexported;
      v.readonly |= options.readonly;
      v.array |= options.array;
      v.integer |= options.integer;
    }
  }
  return Flow::kNormal;
}

// ---- Assignments ----------------------------------------------------------------------------

void Interpreter::Assign(const Word& word, const AssignOptions& options) {
  const size_t eq = AssignmentEquals(word.text);
  std::string_view lhs = std::string_view(word.text).substr(0, eq);
  const bool append = !lhs.empty() && lhs.back() == '+';
  if (append) lhs.remove_suffix(1);
  const size_t bracket = lhs.find('[');
  const std::string name(lhs.substr(0, bracket));
  Variable& v = Target(name, options.local);
  v.exported = (v.exported || options.exported) && !options.unexported;
  v.integer = v.integer || options.integer;
  if (!CheckWritable(name, v)) return;
  if (word.is_array) {
    SetArray(v, word.elements, append);
  } else {
    const std::string_view raw = std::string_view(word.text).substr(eq + 1);
    const Origin at{word.line + CountNewlines(lhs), file_};
    const Field f = ExpandString(raw, at, Mode::kString, {.assignment = true});
    Value value{f.text, at, f.unknown};
    const int64_t index =
        bracket == npos
            ? 0
            : ResolveIndex(v, EvaluateIndex(lhs.substr(bracket + 1, lhs.size() - bracket - 2), at));
    Value& slot = v.elements[index];
    if (v.integer && !value.unknown) {
      const std::string expression =
          append && !slot.text.empty() ? fmt::format("{}+({})", slot.text, value.text) : value.text;
      Arithmetic arithmetic(expression, *this, budget_, 0);
      const ArithResult r = arithmetic.Evaluate();
      if (!r.error.empty()) ArithmeticError(r.error);
      value.text = std::to_string(r.value);
      value.unknown = r.unknown ? Unknown::All(value.text.size()) : Unknown{};
    } else if (append) {
      Unknown unknown = slot.unknown;
      unknown.Add(value.unknown, slot.text.size());
      value.text = slot.text + value.text;
      value.unknown = std::move(unknown);
    }
    CheckSize(value);
    slot = std::move(value);
  }
  v.array = v.array || options.array || word.is_array;
  v.readonly = v.readonly || options.readonly;
}

// A ( ... ) list: each element word-split into values; [N]=value elements set index N.
std::vector<std::pair<std::optional<int64_t>, Value>> Interpreter::ExpandElements(
    const std::vector<Word>& elements) {
  std::vector<std::pair<std::optional<int64_t>, Value>> out;
  for (const Word& w : elements) {
    const size_t close = w.text.find("]=");
    if (!w.text.empty() && w.text[0] == '[' && close != npos) {
      const Origin at{w.line, file_};
      const int64_t index = EvaluateIndex(std::string_view(w.text).substr(1, close - 1), at);
      const Field f = ExpandString(std::string_view(w.text).substr(close + 2), at);
      out.push_back({index, Value{f.text, f.origin, f.unknown}});
      continue;
    }
    for (Field& f : ExpandWord(w, Mode::kFields)) {
      out.push_back({std::nullopt, Value{std::move(f.text), f.origin, f.unknown}});
    }
  }
  return out;
}

void Interpreter::SetArray(Variable& v, const std::vector<Word>& elements, bool append) {
  auto values = ExpandElements(elements);  // before clearing: A=("${A[@]}" x) reads the old A
  if (!append) v.elements.clear();
  int64_t next = v.elements.empty() ? 0 : v.elements.rbegin()->first + 1;
  for (auto& [index, value] : values) {
    const int64_t at = index ? *index : next;
    CheckSize(value);
    v.elements[at] = std::move(value);
    next = at + 1;
  }
}

void Interpreter::RunUnset(const std::vector<Field>& args) {
  bool functions = false;
  for (const Field& f : args) {
    if (f.text == "-f" || f.text == "-v") {
      functions = f.text == "-f";
      continue;
    }
    if (functions) {
      functions_.erase(f.text);
      continue;
    }
    const size_t bracket = f.text.find('[');
    const std::string name = f.text.substr(0, bracket);
    for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope) {
      const auto it = scope->find(name);
      if (it == scope->end()) continue;
      if (!CheckWritable(name, it->second)) break;
      if (bracket == npos) {
        scope->erase(it);
      } else {
        const std::string_view sub = std::string_view(f.text).substr(bracket + 1);
        it->second.elements.erase(
            ResolveIndex(it->second, EvaluateIndex(sub.substr(0, sub.find(']')), f.origin)));
      }
      break;
    }
  }
  SetStatus(Status::kTrue);
}

// set [options] [--] [arguments]: the arguments, when any (or after --), become $1...
void Interpreter::RunSet(const std::vector<Field>& args) {
  size_t k = 0;
  bool replace = false;
  for (; k < args.size(); ++k) {
    const std::string& a = args[k].text;
    if (a == "--" || a == "-") {
      replace = true;
      ++k;
      break;
    }
    if (a.empty() || (a[0] != '-' && a[0] != '+')) break;
    if (a == "-o" || a == "+o") ++k;  // takes an option name
  }
  if (replace || k < args.size()) {
    Positional replaced;
    for (; k < args.size(); ++k) {
      replaced.values.push_back({args[k].text, args[k].origin, args[k].unknown});
    }
    positional_.back() = std::move(replaced);
  }
  SetStatus(Status::kTrue);
}

void Interpreter::RunShift(const std::vector<Field>& args) {
  std::vector<Value>& values = positional_.back().values;
  const std::optional<int64_t> n = args.empty() ? 1 : TestInteger(args[0], false);
  if (!n || *n < 0 || static_cast<size_t>(*n) > values.size()) {
    SetStatus(Status::kFalse);
    return;
  }
  values.erase(values.begin(), values.begin() + *n);
  SetStatus(Status::kTrue);
}

// ---- Lists, pipelines, conditions, loops
// ---------------------------------------------------------

// A test that has no effect but its status: evaluating it where bash might not changes nothing.
bool Interpreter::IsPureTest(const Command& c) const {
  using Kind = Command::Kind;
  switch (c.kind) {
    case Kind::kCond:
      return true;
    case Kind::kSimple:
      return c.assignments.empty() && !c.words.empty() &&
             (c.words[0].text == "[" || c.words[0].text == "test" || c.words[0].text == "true" ||
              c.words[0].text == "false");
    case Kind::kPipeline:
      return c.parts.size() == 1 && IsPureTest(*c.parts[0]);
    case Kind::kAnd:
    case Kind::kOr:
      return IsPureTest(*c.parts[0]) && IsPureTest(*c.parts[1]);
    default:
      return false;
  }
}

Flow Interpreter::RunAndOr(const Command& c) {
  const bool is_and = c.kind == Command::Kind::kAnd;
  Flow flow = RunCommand(*c.parts[0]);
  if (flow != Flow::kNormal) return flow;
  const Status left = status_;
  // A program ptdp does not run is taken to succeed: `mkdir -p d || exit 1` goes on.
  const bool succeeded = left == Status::kTrue || left == Status::kAssumed;
  if (is_and ? left == Status::kFalse : succeeded) return Flow::kNormal;
  if (left == Status::kUnknown) {
    const std::string reason = reason_;
    if (!IsPureTest(*c.parts[1])) {
      Note(true, c.line,
           fmt::format("cannot tell whether the command on line {} succeeds ({}): the command "
                       "after {} on line {} was not run",
                       c.line, reason, is_and ? "&&" : "||", c.parts[1]->line),
           "give the script the value it tests, or remove the test");
      SetStatus(Status::kUnknown, reason);
      return Flow::kNormal;
    }
    flow = RunCommand(*c.parts[1]);
    const Status right = status_;
    SetStatus(is_and ? And(Status::kUnknown, right) : Or(Status::kUnknown, right), reason);
    return flow;
  }
  flow = RunCommand(*c.parts[1]);
  if (left == Status::kAssumed && status_ == Status::kTrue) SetStatus(Status::kAssumed);
  return flow;
}

Flow Interpreter::RunPipeline(const Command& c) {
  Flow flow = Flow::kNormal;
  if (c.parts.size() == 1) {
    flow = RunCommand(*c.parts[0]);
  } else {
    for (const CommandPtr& part : c.parts) flow = RunIsolated(*part);  // each in a subshell
  }
  if (c.negated) {
    const bool assumed = status_ == Status::kAssumed;
    SetStatus(Not(status_), assumed ? reason_ : "");
  }
  return flow;
}

Flow Interpreter::RunIf(const Command& c) {
  const size_t n = c.lists.size();
  for (size_t k = 0; k + 1 < n; k += 2) {
    const Flow flow = Run(c.lists[k]);
    if (flow != Flow::kNormal) return flow;
    if (status_ == Status::kTrue) return Run(c.lists[k + 1]);
    if (status_ == Status::kFalse) continue;
    const int line = c.lists[k].empty() ? c.line : c.lists[k].front().command->line;
    const bool last = k + 2 >= n;
    Note(true, line,
         fmt::format("cannot tell whether the condition on line {} holds ({}): {}", line, reason_,
                     last ? "its branch was skipped"
                          : (k + 3 == n ? "the else branch was taken" : "it was taken as false")),
         "give the script the value it tests, or remove the condition");
  }
  SetStatus(Status::kTrue);
  if (n % 2 == 1) return Run(c.lists[n - 1]);
  return Flow::kNormal;
}

// Counts one iteration against the limit for all loops; false (with a note) past it.
bool Interpreter::StepLoop(int line) {
  if (loop_iterations_ < kMaxLoopIterations) {
    ++loop_iterations_;
    return true;
  }
  Note(true, line,
       fmt::format("the loop on line {} was stopped: ptdp runs at most {} loop iterations in all",
                   line, kMaxLoopIterations),
       "");
  return false;
}

// Runs a loop's body once; `stop` is set when the loop must end (break, return, exit).
Flow Interpreter::LoopBody(const Sequence& body, bool& stop) {
  Flow flow;
  {
    ++loop_depth_;
    const OnExit leave{[&] { --loop_depth_; }};
    flow = Run(body);
  }
  stop = flow != Flow::kNormal && flow != Flow::kContinue;
  if ((flow == Flow::kBreak || flow == Flow::kContinue) && --break_levels_ > 0) {
    stop = true;
    return flow;  // the loop outside this one breaks or continues too
  }
  return flow == Flow::kBreak || flow == Flow::kContinue ? Flow::kNormal : flow;
}

Flow Interpreter::RunFor(const Command& c) {
  std::vector<Field> items;
  if (c.has_in) {
    items = ExpandFields(c.words);
  } else {
    for (const Value& v : positional_.back().values) items.push_back({v.text, v.origin, v.unknown});
  }
  SetStatus(Status::kTrue);
  for (const Field& item : items) {
    if (!StepLoop(c.line)) break;
    Variable& v = FindOrCreate(c.name);
    if (CheckWritable(c.name, v)) v.elements[0] = Value{item.text, item.origin, item.unknown};
    bool stop = false;
    const Flow flow = LoopBody(c.lists[0], stop);
    if (stop) return flow;
  }
  return Flow::kNormal;
}

// while / until: the condition must be known each time round (the loop that parses a
// script's own arguments, `while [[ $# -gt 0 ]]; do case $1 in ...; shift; done`, is the usual
// one); iterations count against the limit for all loops.
Flow Interpreter::RunWhile(const Command& c) {
  const bool until = c.text == "until";
  while (true) {
    const Flow condition = Run(c.lists[0]);
    if (condition != Flow::kNormal) return condition;
    if (status_ != Status::kTrue && status_ != Status::kFalse) {  // unknown, or assumed
      Note(true, c.line,
           fmt::format("cannot tell whether the `{}` loop on line {} goes on ({}): it was "
                       "stopped",
                       c.text, c.line,
                       status_ == Status::kUnknown ? reason_ : "a program's exit status"),
           "give the script the value it tests");
      break;
    }
    if ((status_ == Status::kTrue) == until) break;
    if (!StepLoop(c.line)) break;
    bool stop = false;
    const Flow flow = LoopBody(c.lists[1], stop);
    if (stop) return flow;
  }
  SetStatus(Status::kTrue);
  return Flow::kNormal;
}

// for ((init; test; step)): the test must be known each time round.
Flow Interpreter::RunArithFor(const Command& c) {
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t semicolon = c.text.find(';', start);
    parts.push_back(c.text.substr(start, semicolon - start));
    if (semicolon == npos) break;
    start = semicolon + 1;
  }
  if (parts.size() != 3) {
    Note(true, c.line, "for ((...)) needs three expressions separated by `;`: not run");
    return Flow::kNormal;
  }
  RunArith(parts[0]);
  while (true) {
    const Status test =
        parts[1].find_first_not_of(" \t\n") == npos ? Status::kTrue : RunArith(parts[1]);
    if (test == Status::kFalse) break;
    if (test != Status::kTrue) {
      Note(true, c.line,
           fmt::format("cannot tell whether the loop on line {} goes on ({}): it was stopped",
                       c.line, reason_));
      break;
    }
    if (!StepLoop(c.line)) break;
    bool stop = false;
    const Flow flow = LoopBody(c.lists[0], stop);
    if (stop) return flow;
    RunArith(parts[2]);
  }
  SetStatus(Status::kTrue);
  return Flow::kNormal;
}

// (( expression )): true when not 0. An error is a false status, as in bash.
Status Interpreter::RunArith(const std::string& text) {
  const Field expr = ExpandString(text, Here(), Mode::kString, {.quoted = true});
  if (expr.unknown) return Undecided(expr);
  Arithmetic arithmetic(expr.text, *this, budget_, 0);
  const ArithResult r = arithmetic.Evaluate();
  if (!r.error.empty()) return TestError(fmt::format("((: {}", r.error));
  if (r.unknown) {
    reason_ = fmt::format("`(({}))` reads an unknown value", text);
    return Status::kUnknown;
  }
  return FromBool(r.value != 0);
}

// Whether a case item's patterns match; nullopt when a pattern is unknown.
std::optional<bool> Interpreter::CaseMatches(const CaseItem& item, const Field& subject) {
  for (const Word& pattern : item.patterns) {
    const Field p = ExpandString(pattern.text, {pattern.line, file_}, Mode::kPattern);
    if (p.unknown) {
      reason_ = fmt::format("the pattern `{}` is not known", p.text);
      return std::nullopt;
    }
    if (Glob(p.text, budget_).Matches(subject.text)) return true;
  }
  return false;
}

Flow Interpreter::RunCase(const Command& c) {
  const Field subject = ExpandString(c.words[0].text, {c.words[0].line, file_});
  SetStatus(Status::kTrue);
  if (subject.unknown) reason_ = fmt::format("`{}` is not known", subject.text);
  bool fall_through = false;
  for (const CaseItem& item : c.items) {
    if (!fall_through) {
      const std::optional<bool> matches =
          subject.unknown ? std::nullopt : CaseMatches(item, subject);
      if (!matches) {
        Note(true, c.line,
             fmt::format("cannot tell which branch of the case on line {} runs ({}): none was "
                         "taken",
                         c.line, reason_),
             "give the script the value it tests");
        return Flow::kNormal;
      }
      if (!*matches) continue;
    }
    const Flow flow = Run(item.body);
    if (flow != Flow::kNormal) return flow;
    fall_through = item.terminator == ";&";
    if (item.terminator != ";&" && item.terminator != ";;&") break;
  }
  return Flow::kNormal;
}

// ---- source and eval
// ------------------------------------------------------------------------------

Flow Interpreter::RunSource(const std::vector<Field>& fields) {
  SetStatus(Status::kFalse);
  if (fields.size() < 2) return Flow::kNormal;
  const Field& path = fields[1];
  const std::string fix = "write the file's lines in the script in place of the source command";
  if (path.unknown) {
    Note(true, line_, fmt::format("{} was not read: its path is not known", QuotedWord(path.text)),
         fix);
    result_.unread_files.push_back(path.text);
    return Flow::kNormal;
  }
  if (!options_.read_file) {
    Note(true, line_,
         fmt::format("{} was not read: ptdp reads only the script it is given",
                     QuotedWord(path.text)),
         fix);
    result_.unread_files.push_back(path.text);
    return Flow::kNormal;
  }
  if (source_depth_ >= kMaxSourceDepth) {
    Note(true, line_,
         fmt::format("{} was not read: sourced files nest more than {} deep", QuotedWord(path.text),
                     kMaxSourceDepth));
    return Flow::kNormal;
  }
  const FileText file = options_.read_file(path.text);
  if (!file.text) {
    // A refusal says why (outside the folders ptdp may read, not a regular file); a failure
    // only that it failed, whatever the system said (issue 35).
    if (file.refused.empty()) {
      Note(true, line_, fmt::format("{} could not be read", QuotedWord(path.text)), fix);
    } else {
      Note(true, line_, fmt::format("{} was not read: {}", QuotedWord(path.text), file.refused),
           file.fix.empty() ? fix : file.fix);
    }
    result_.unread_files.push_back(path.text);
    return Flow::kNormal;
  }
  const std::optional<std::string>& text = file.text;
  const int caller_line = line_;
  const Sequence* program = nullptr;
  try {
    program = &Parse(*text, path.text, 1);
  } catch (const InputError& e) {
    // As bash does, a sourced file with a syntax error is abandoned and the script goes on.
    Note(true, caller_line, fmt::format("{} was not run: {}", QuotedWord(path.text), e.what()));
    return Flow::kNormal;
  }
  std::vector<Field> args(fields.begin() + 2, fields.end());
  return RunNested(*program, static_cast<int>(files_.size()), args, path.text);
}

Flow Interpreter::RunEval(const std::vector<Field>& fields) {
  // The words joined, as bash joins them. An unknown part (`$(date +%s)`, a script argument not
  // given) goes in as written: parsed again it is the same unknown part, so the command eval
  // runs is read with that word unknown, as it would be without eval.
  // Text that is unknown through and through (`eval $(make_cmd)`) is not run.
  std::string text;
  bool known = false;
  for (size_t k = 1; k < fields.size(); ++k) {
    if (k > 1) text += ' ';
    text += fields[k].text;
    size_t unknown = 0;
    for (const auto& [b, e] : fields[k].unknown.spans) unknown += e - b;
    known = known || unknown < fields[k].text.size();
  }
  if (!known && fields.size() > 1) {
    Note(true, line_, fmt::format("eval was not run: `{}` is not known", text));
    SetStatus(Status::kUnknown, "eval was not run");
    return Flow::kNormal;
  }
  if (source_depth_ >= kMaxSourceDepth) {
    Note(true, line_, fmt::format("eval was not run: it nests more than {} deep", kMaxSourceDepth));
    return Flow::kNormal;
  }
  const int caller_line = line_;
  const Sequence* program = nullptr;
  try {
    program = &Parse(text, files_[file_], line_);
  } catch (const InputError& e) {
    Note(true, caller_line, fmt::format("eval was not run: {}", e.what()));
    SetStatus(Status::kFalse);
    return Flow::kNormal;
  }
  SetStatus(Status::kTrue);
  return RunNested(*program, file_, {}, "");
}

// Runs a sourced file (its own file index, new arguments when given) or eval'd text.
Flow Interpreter::RunNested(const Sequence& program, int file, const std::vector<Field>& args,
                            const std::string& path) {
  const int caller_file = file_, caller_line = line_;
  if (!path.empty()) files_.push_back(path);
  if (!args.empty()) {
    Positional arguments;
    for (const Field& f : args) arguments.values.push_back({f.text, f.origin, f.unknown});
    positional_.push_back(std::move(arguments));
  }
  ++source_depth_;
  file_ = file;
  const OnExit restore{[&] {
    --source_depth_;
    if (!args.empty()) positional_.pop_back();
    file_ = budget_.file = caller_file;
    line_ = budget_.line = caller_line;
  }};
  const Flow flow = RunProgram(program);
  if (!path.empty() && flow == Flow::kReturn) return Flow::kNormal;
  return flow;
}

}  // namespace

ShellResult InterpretShell(std::string_view text, const std::string& source,
                           const ShellOptions& options) {
  ShellResult result;
  try {
    Interpreter(source, options, result).RunMain(text);
  } catch (const TooDeep&) {  // the lexer refuses such nesting first; a safety net
    throw InputError({source, 0, ""},
                     fmt::format("expansions nest more than {} deep", kMaxNesting));
  }
  return result;
}

}  // namespace ptdp
