#include "core/trace.h"

#include <fmt/format.h>

#include "core/json.h"

namespace ptdp {

std::string ChromeTraceJson(std::string_view process_name, std::span<const TraceTrack> tracks,
                            std::span<const TraceEvent> events) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  out += fmt::format(
      "{{\"ph\": \"M\", \"pid\": 0, \"tid\": 0, \"name\": \"process_name\", \"args\": "
      "{{\"name\": {}}}}}",
      JsonString(process_name));
  for (const TraceTrack& t : tracks) {
    out += fmt::format(
        ",\n{{\"ph\": \"M\", \"pid\": 0, \"tid\": {}, \"name\": \"thread_name\", \"args\": "
        "{{\"name\": {}}}}},\n{{\"ph\": \"M\", \"pid\": 0, \"tid\": {}, \"name\": "
        "\"thread_sort_index\", \"args\": {{\"sort_index\": {}}}}}",
        t.id, JsonString(t.name), t.id, t.id);
  }
  for (const TraceEvent& e : events) {
    out += fmt::format(
        ",\n{{\"ph\": \"X\", \"pid\": 0, \"tid\": {}, \"name\": {}, \"cat\": {}, \"ts\": {}, "
        "\"dur\": {}",
        e.track, JsonString(e.name), JsonString(e.category), JsonNumber(e.start_s * 1e6),
        JsonNumber(e.duration_s * 1e6));
    if (e.microbatch >= 0) {
      out +=
          fmt::format(", \"args\": {{\"microbatch\": {}, \"chunk\": {}}}", e.microbatch, e.chunk);
    }
    out += "}";
  }
  out += "\n]}\n";
  return out;
}

}  // namespace ptdp
