// The worker protocol's frame decoder and message readers (docs/PROTOCOL.md sections 2-4), fed what a worker
// could write on the reply channel or driftcheck on the request channel: every frame, every reply reader, and
// the case object of supports/run requests against a small arena. Anything must be read or rejected with
// ProtocolError; an accepted frame re-encodes to the same frame, and an accepted case object written back out
// (case_text) reads back as the same views.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "driftcheck/external/protocol.hpp"

namespace {

using namespace driftcheck;
using namespace driftcheck::external;

void check_case(const nlohmann::json& payload) {
  std::vector<std::byte> arena(4096);
  const auto it = payload.find("case");
  if (it == payload.end()) return;
  // Storages of a supports request are allocated: at most 1 MiB, so the fuzzer finds bugs, not big
  // allocations.
  DecodedCase d = decode_case(*it, arena, std::uint64_t{1} << 20);
  const std::string again = case_text(d.c, nullptr);
  const DecodedCase e = decode_case(nlohmann::json::parse(again), {}, std::uint64_t{1} << 20);
  for (const auto& [name, t] : d.c.tensors)
    if (e.c.tensor(name).describe() != t.describe()) std::abort();
}

void check_message(const Frame& f) {
  const std::vector<std::uint64_t> expected{16, 64};
  switch (f.type) {
    case MessageType::kHelloReply:
      parse_hello_reply(f.payload);
      break;
    case MessageType::kSupportsReply:
      parse_supports_reply(f.payload);
      break;
    case MessageType::kRunReply:
      check_run_reply(f.payload, expected);
      break;
    case MessageType::kError:
      parse_error_reply(f.payload);
      break;
    case MessageType::kSupports:
    case MessageType::kRun:
      check_case(f.payload);
      break;
    default:
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::vector<Frame> frames;
  try {
    frames = decode_frames(bytes);
  } catch (const ProtocolError&) {
    return 0;
  }
  for (const Frame& f : frames) {
    const auto again = decode_frames(encode_frame(f.type, f.seq, f.payload));
    if (again.size() != 1 || again[0].payload != f.payload || again[0].seq != f.seq) std::abort();
    try {
      check_message(f);
    } catch (const ProtocolError&) {
    }
  }
  return 0;
}
