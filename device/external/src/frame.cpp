// Frames (docs/PROTOCOL.md section 2) and the JSON of the hello/supports/run/error messages (section 3).
#include <cstring>

#include <fmt/format.h>

#include "driftcheck/external/protocol.hpp"
#include "json_fields.hpp"

namespace driftcheck::external {
namespace {

using nlohmann::json;

constexpr std::array<char, 4> kMagic{'D', 'C', 'W', 'P'};

void put_u16(std::string& out, std::uint16_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>(v >> 8));
}
void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint32_t get_le(std::span<const std::byte> b, std::size_t at, int n) {
  std::uint32_t v = 0;
  for (int i = 0; i < n; ++i)
    v |= std::to_integer<std::uint32_t>(b[at + static_cast<std::size_t>(i)]) << (8 * i);
  return v;
}

bool known_type(std::uint32_t t) {
  switch (static_cast<MessageType>(t)) {
    case MessageType::kHello:
    case MessageType::kSupports:
    case MessageType::kRun:
    case MessageType::kShutdown:
    case MessageType::kHelloReply:
    case MessageType::kSupportsReply:
    case MessageType::kRunReply:
    case MessageType::kError:
      return true;
  }
  return false;
}

}  // namespace

std::string_view message_name(MessageType t) {
  switch (t) {
    case MessageType::kHello:
      return "hello";
    case MessageType::kSupports:
      return "supports";
    case MessageType::kRun:
      return "run";
    case MessageType::kShutdown:
      return "shutdown";
    case MessageType::kHelloReply:
      return "hello_reply";
    case MessageType::kSupportsReply:
      return "supports_reply";
    case MessageType::kRunReply:
      return "run_reply";
    case MessageType::kError:
      return "error";
  }
  return "unknown";
}

std::string encode_frame(MessageType type, std::uint32_t seq, const json& payload) {
  return encode_frame(type, seq, std::string_view(payload.dump()));
}

std::string encode_frame(MessageType type, std::uint32_t seq, std::string_view body) {
  if (body.size() > kMaxPayload)
    throw ProtocolError(
        fmt::format("{} payload of {} bytes exceeds the 16 MiB limit", message_name(type), body.size()));
  std::string out(kMagic.begin(), kMagic.end());
  out.reserve(kFrameHeaderSize + body.size());
  put_u16(out, kProtocolVersion);
  put_u16(out, static_cast<std::uint16_t>(type));
  put_u32(out, seq);
  put_u32(out, static_cast<std::uint32_t>(body.size()));
  out += body;
  return out;
}

FrameHeader decode_header(std::span<const std::byte, kFrameHeaderSize> b) {
  if (std::memcmp(b.data(), kMagic.data(), kMagic.size()) != 0) {
    std::string shown;
    for (std::size_t i = 0; i < kFrameHeaderSize; ++i) {
      const auto c = std::to_integer<unsigned char>(b[i]);
      shown += c >= 0x20 && c < 0x7f ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02x}", c);
    }
    throw ProtocolError(fmt::format("bad frame magic (not a driftcheck.worker frame): \"{}\"", shown));
  }
  if (const auto version = get_le(b, 4, 2); version != kProtocolVersion)
    throw ProtocolError(fmt::format("the worker speaks protocol version {}, driftcheck speaks {}", version,
                                    kProtocolVersion));
  const auto type = get_le(b, 6, 2);
  if (!known_type(type)) throw ProtocolError(fmt::format("unknown message type 0x{:04x}", type));
  FrameHeader h{static_cast<MessageType>(type), get_le(b, 8, 4), get_le(b, 12, 4)};
  if (h.length < 2 || h.length > kMaxPayload)
    throw ProtocolError(
        fmt::format("{} payload length {} outside [2, 16 MiB]", message_name(h.type), h.length));
  return h;
}

json decode_payload(std::string_view bytes) {
  json j = json::parse(bytes.begin(), bytes.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ProtocolError("payload is not one JSON value");
  if (!j.is_object()) throw ProtocolError(fmt::format("payload is a JSON {}, not an object", j.type_name()));
  return j;
}

std::vector<Frame> decode_frames(std::string_view bytes) {
  std::vector<Frame> frames;
  while (!bytes.empty()) {
    if (bytes.size() < kFrameHeaderSize) throw ProtocolError("truncated frame header");
    const auto h = decode_header(std::span<const std::byte, kFrameHeaderSize>(
        reinterpret_cast<const std::byte*>(bytes.data()), kFrameHeaderSize));
    bytes.remove_prefix(kFrameHeaderSize);
    if (bytes.size() < h.length) throw ProtocolError("truncated frame payload");
    frames.push_back({h.type, h.seq, decode_payload(bytes.substr(0, h.length))});
    bytes.remove_prefix(h.length);
  }
  return frames;
}

// --- Messages
// -------------------------------------------------------------------------------------------------

json hello_request(std::string_view backend, OpKind op, int arena_fd, const std::string& arena_path) {
  return {{"protocol", kProtocolName},
          {"version", kProtocolVersion},
          {"backend", backend},
          {"op", op_name(op)},
          {"driftcheck", DRIFTCHECK_VERSION},
          {"arena", {{"fd", arena_fd}, {"path", arena_path}}}};
}

json hello_reply_json(const HelloReply& r) {
  json j = {{"protocol", kProtocolName},
            {"version", kProtocolVersion},
            {"ops", r.ops},
            {"available", r.available},
            {"supports_round_trip", r.supports_round_trip},
            {"info", r.info}};
  if (!r.available) j["reason"] = r.reason;
  return j;
}

HelloReply parse_hello_reply(const json& j) {
  const Fields f(j, "hello_reply");
  if (const auto name = f.string("protocol"); name != kProtocolName)
    throw ProtocolError(fmt::format("hello_reply: protocol \"{}\", expected \"{}\"", name, kProtocolName));
  if (const auto v = f.integer("version"); v != kProtocolVersion)
    throw ProtocolError(
        fmt::format("the worker speaks protocol version {}, driftcheck speaks {}", v, kProtocolVersion));
  HelloReply r;
  r.ops = f.strings("ops");
  r.available = f.boolean("available");
  r.reason = f.string_or("reason", "");
  r.supports_round_trip = f.boolean_or("supports_round_trip", true);
  r.info = f.string_or("info", "");
  return r;
}

json supports_reply_json(const Support& s) {
  json j = {{"ok", s.ok}};
  if (!s.ok) j["reason"] = s.reason;
  return j;
}

Support parse_supports_reply(const json& j) {
  const Fields f(j, "supports_reply");
  if (f.boolean("ok")) return Support::yes();
  std::string why = f.string_or("reason", "");
  return Support::no(why.empty() ? "the worker declined the case without a reason" : std::move(why));
}

json error_json(std::string_view message, bool fatal, bool unsupported) {
  json j = {{"message", message}, {"fatal", fatal}};
  if (unsupported) j["unsupported"] = true;
  return j;
}

ErrorReply parse_error_reply(const json& j) {
  const Fields f(j, "error");
  return {f.string("message"), f.boolean_or("fatal", false), f.boolean_or("unsupported", false)};
}

json run_reply_json(std::span<const std::uint64_t> nbytes) {
  return {{"storages", std::vector<std::uint64_t>(nbytes.begin(), nbytes.end())}};
}

void check_run_reply(const json& j, std::span<const std::uint64_t> expected) {
  const Fields f(j, "run_reply");
  const auto got = f.sizes("storages");
  if (got.size() != expected.size())
    throw ProtocolError(
        fmt::format("run_reply hands back {} storages, the case has {}", got.size(), expected.size()));
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != expected[i])
      throw ProtocolError(
          fmt::format("run_reply: storage {} has {} bytes, the case's has {}", i, got[i], expected[i]));
  }
}

}  // namespace driftcheck::external
