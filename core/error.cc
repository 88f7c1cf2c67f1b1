#include "core/error.h"

namespace ptdp {
namespace {

std::string Format(const InputError::Where& where, const std::string& message,
                   const std::string& hint) {
  std::string text;
  if (!where.source.empty()) {
    text.append(where.source);
    if (where.line > 0) text.append(":").append(std::to_string(where.line));
    text.append(": ");
  }
  if (!where.key.empty()) text.append(where.key).append(": ");
  text.append(message);
  if (!hint.empty()) text.append(" (hint: ").append(hint).append(")");
  return text;
}

}  // namespace

InputError::InputError(Where where, std::string message, std::string hint)
    : std::runtime_error(Format(where, message, hint)),
      where_(std::move(where)),
      message_(std::move(message)),
      hint_(std::move(hint)) {}

}  // namespace ptdp
