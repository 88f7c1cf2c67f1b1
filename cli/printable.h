// Everything ptdp prints passes PrintableText (core/text.h) on its way out (issue 35): a launch
// script's words (a flag named `--$'\e]0;TITLE\a'`, a file name with an escape in it) reach
// messages from many places, and none of them may retitle, clear or reprogram the terminal, nor
// hand a Python caller bytes that are not UTF-8. Run (cli/cli.h) wraps its two streams in a
// PrintableStream; the text ptdp writes itself is printable already and passes unchanged.
#pragma once

#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>

namespace ptdp::cli {

// A stream buffer that writes to `target` the PrintableText of what it is given: control
// characters other than newline and tab, and bytes that are not UTF-8, as \xNN (C1 as \u00NN).
// A character cut between two writes is held until the next, so a stream is escaped as the
// whole text would be. Nothing is buffered otherwise: writes reach `target` in order.
class PrintableBuffer : public std::streambuf {
 public:
  explicit PrintableBuffer(std::streambuf* target) : target_(target) {}
  ~PrintableBuffer() override;
  PrintableBuffer(const PrintableBuffer&) = delete;
  PrintableBuffer& operator=(const PrintableBuffer&) = delete;

  // Writes `text` as it is (a progress line's carriage returns, which ptdp writes itself).
  void WriteRaw(std::string_view text);

 protected:
  int_type overflow(int_type ch) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override;

 private:
  void Put(std::string_view text);
  void FlushHeld();  // a character cut short for good: its bytes as \xNN

  std::streambuf* target_;
  std::string held_;  // the start of a UTF-8 character whose last bytes have not come yet
};

// An ostream over `target`'s buffer through a PrintableBuffer, with `target`'s format flags.
class PrintableStream : public std::ostream {
 public:
  explicit PrintableStream(std::ostream& target);
  ~PrintableStream() override;

 private:
  PrintableBuffer buffer_;
};

// Writes `text` unescaped when `out` is a PrintableStream (or another stream on a
// PrintableBuffer), else as usual: for the control characters ptdp means (a progress line's
// carriage returns).
void WriteRaw(std::ostream& out, std::string_view text);

}  // namespace ptdp::cli
