// The worker protocol (docs/PROTOCOL.md, driftcheck.worker version 1): frames on the control channel, the
// JSON of each message, and the case object with the arena layout of its storages. Shared by driftcheck's
// side (worker.hpp) and by C++ workers (serve.hpp, the test worker).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "driftcheck/device/backend.hpp"

namespace driftcheck::external {

inline constexpr std::string_view kProtocolName = "driftcheck.worker";
inline constexpr std::uint16_t kProtocolVersion = 1;
inline constexpr std::size_t kFrameHeaderSize = 16;
inline constexpr std::uint32_t kMaxPayload = 16u << 20;
inline constexpr std::uint64_t kArenaAlignment = 64;

enum class MessageType : std::uint16_t {
  kHello = 0x01,
  kSupports = 0x02,
  kRun = 0x03,
  kShutdown = 0x04,
  kHelloReply = 0x81,
  kSupportsReply = 0x82,
  kRunReply = 0x83,
  kError = 0xFF,
};
std::string_view message_name(MessageType t);

// A frame or message driftcheck (or a worker) cannot accept; the message says what was wrong, in one line.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct FrameHeader {
  MessageType type = MessageType::kHello;
  std::uint32_t seq = 0;
  std::uint32_t length = 0;  // payload bytes
};

struct Frame {
  MessageType type = MessageType::kHello;
  std::uint32_t seq = 0;
  nlohmann::json payload;  // always an object
};

std::string encode_frame(MessageType type, std::uint32_t seq, const nlohmann::json& payload);
// The same with the payload already written as JSON text (the case object, written directly: case_text).
std::string encode_frame(MessageType type, std::uint32_t seq, std::string_view payload);
// Validates magic, version, type and length; throws ProtocolError naming the problem ("the worker speaks
// protocol version 2").
FrameHeader decode_header(std::span<const std::byte, kFrameHeaderSize> bytes);
// The payload must be exactly one JSON object.
nlohmann::json decode_payload(std::string_view bytes);
// Every frame of a byte string that holds whole frames only (the frame decoder's fuzz target and tests).
std::vector<Frame> decode_frames(std::string_view bytes);

// --- Messages
// -------------------------------------------------------------------------------------------------

struct HelloReply {
  std::vector<std::string> ops;
  bool available = true;
  std::string reason;
  bool supports_round_trip = true;
  std::string info;
};
nlohmann::json hello_request(std::string_view backend, OpKind op, int arena_fd,
                             const std::string& arena_path);
nlohmann::json hello_reply_json(const HelloReply& r);
// Throws ProtocolError for a wrong protocol name or version or a malformed reply.
HelloReply parse_hello_reply(const nlohmann::json& j);

nlohmann::json supports_reply_json(const Support& s);
Support parse_supports_reply(const nlohmann::json& j);

// `unsupported`: the worker found at run time that it does not take the case (docs/PROTOCOL.md 3.4).
nlohmann::json error_json(std::string_view message, bool fatal, bool unsupported = false);
struct ErrorReply {
  std::string message;
  bool fatal = false;
  bool unsupported = false;
};
ErrorReply parse_error_reply(const nlohmann::json& j);

// A run reply lists the bytes of every storage handed back; it must match the request exactly.
nlohmann::json run_reply_json(std::span<const std::uint64_t> nbytes);
void check_run_reply(const nlohmann::json& j, std::span<const std::uint64_t> expected);

// --- The case object
// ------------------------------------------------------------------------------------------

// Where each distinct storage of a case sits in the arena: storages in order of first use over the tensors
// in name order, each at a multiple of kArenaAlignment.
struct ArenaLayout {
  std::vector<Storage*> storages;
  std::vector<std::uint64_t> offsets;
  std::vector<std::uint64_t> nbytes;
  std::uint64_t size = 0;
};
ArenaLayout arena_layout(Case& c);

// The case object of docs/PROTOCOL.md section 4 as JSON text; with a layout, every storage gets its
// arena_offset. case_json parses it back (tests, tools).
std::string case_text(const Case& c, const ArenaLayout* layout);
nlohmann::json case_json(const Case& c, const ArenaLayout* layout);
void copy_to_arena(const ArenaLayout& layout, std::span<std::byte> arena);
// Copies every storage back from the arena into the case's storages (which the layout points to).
void copy_from_arena(const ArenaLayout& layout, std::span<const std::byte> arena);

// The worker side: rebuilds the case from its object, storages filled from `arena` when it has arena offsets
// (a supports request has none: storages are then zero-filled, at most `max_storage_bytes` in all). Throws
// ProtocolError naming the first problem (unknown dtype, a view outside its storage, a storage outside the
// arena, a malformed case); the case is not validate()d.
struct DecodedCase {
  Case c;
  std::vector<std::shared_ptr<Storage>> storages;  // in the request's order
  std::vector<std::uint64_t> offsets;
  bool in_arena = false;  // storages came from the arena (a run request), not zero-filled (supports)
};
DecodedCase decode_case(const nlohmann::json& j, std::span<const std::byte> arena,
                        std::uint64_t max_storage_bytes = std::uint64_t{1} << 34);
// Writes every storage back to its arena bytes (the worker's side of copy_from_arena) and returns their
// sizes.
std::vector<std::uint64_t> write_back(const DecodedCase& d, std::span<std::byte> arena);

}  // namespace driftcheck::external
