#include "cli/printable.h"

#include "core/text.h"

namespace ptdp::cli {

PrintableBuffer::~PrintableBuffer() {
  FlushHeld();
  target_->pubsync();
}

void PrintableBuffer::Put(std::string_view text) {
  std::string pending = std::move(held_);
  held_.clear();
  pending.append(text);
  // Hold back a character cut at the end; PrintableText escapes the rest.
  size_t end = pending.size();
  for (size_t back = 1; back <= 3 && back <= pending.size(); ++back) {
    const size_t at = pending.size() - back;
    if ((static_cast<unsigned char>(pending[at]) & 0xC0) == 0x80) continue;  // a continuation
    if (DecodeUtf8(std::string_view(pending).substr(at)).truncated) end = at;
    break;
  }
  held_ = pending.substr(end);
  const std::string out = PrintableText(std::string_view(pending).substr(0, end));
  target_->sputn(out.data(), static_cast<std::streamsize>(out.size()));
}

void PrintableBuffer::FlushHeld() {
  if (held_.empty()) return;
  const std::string out = PrintableText(held_);  // an incomplete character: each byte as \xNN
  held_.clear();
  target_->sputn(out.data(), static_cast<std::streamsize>(out.size()));
}

void PrintableBuffer::WriteRaw(std::string_view text) {
  FlushHeld();
  target_->sputn(text.data(), static_cast<std::streamsize>(text.size()));
}

PrintableBuffer::int_type PrintableBuffer::overflow(int_type ch) {
  if (traits_type::eq_int_type(ch, traits_type::eof())) return traits_type::not_eof(ch);
  const char c = traits_type::to_char_type(ch);
  Put(std::string_view(&c, 1));
  return ch;
}

std::streamsize PrintableBuffer::xsputn(const char* s, std::streamsize n) {
  Put(std::string_view(s, static_cast<size_t>(n)));
  return n;
}

int PrintableBuffer::sync() {
  // A flush does not end a character cut short: it stays held for the next write.
  return target_->pubsync();
}

PrintableStream::PrintableStream(std::ostream& target)
    : std::ostream(nullptr), buffer_(target.rdbuf()) {
  rdbuf(&buffer_);
  copyfmt(target);
  clear(target.rdstate());
}

PrintableStream::~PrintableStream() { flush(); }

void WriteRaw(std::ostream& out, std::string_view text) {
  if (auto* printable = dynamic_cast<PrintableBuffer*>(out.rdbuf())) {
    printable->WriteRaw(text);
  } else {
    out << text;
  }
}

}  // namespace ptdp::cli
