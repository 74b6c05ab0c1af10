#include "driftcheck/external/serve.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include <fmt/format.h>

#include "json_fields.hpp"

namespace driftcheck::external {
namespace {

int fd_from_env(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// false at a clean end of file before the first byte; throws ProtocolError when the stream ends inside.
bool read_exact(int fd, char* out, std::size_t n, bool eof_ok) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = read(fd, out + done, n - done);
    if (got > 0) {
      done += static_cast<std::size_t>(got);
    } else if (got == 0) {
      if (done == 0 && eof_ok) return false;
      throw ProtocolError("the request channel ended inside a frame");
    } else if (errno != EINTR) {
      throw ProtocolError(fmt::format("cannot read requests: {}", std::strerror(errno)));
    }
  }
  return true;
}

}  // namespace

WorkerServer::WorkerServer()
    : request_fd_(fd_from_env("DRIFTCHECK_REQUEST_FD", 3)),
      reply_fd_(fd_from_env("DRIFTCHECK_REPLY_FD", 4)),
      arena_fd_(fd_from_env("DRIFTCHECK_ARENA_FD", 5)) {}

WorkerServer::~WorkerServer() {
  if (arena_) munmap(arena_, mapped_);
}

std::optional<Frame> WorkerServer::next() {
  std::array<std::byte, kFrameHeaderSize> header;
  if (!read_exact(request_fd_, reinterpret_cast<char*>(header.data()), header.size(), true))
    return std::nullopt;
  const FrameHeader h = decode_header(header);
  std::string payload(h.length, '\0');
  read_exact(request_fd_, payload.data(), payload.size(), false);
  return Frame{h.type, h.seq, decode_payload(payload)};
}

void WorkerServer::write_raw(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = write(reply_fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw ProtocolError(fmt::format("cannot write replies: {}", std::strerror(errno)));
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
}

void WorkerServer::reply(MessageType type, std::uint32_t seq, const nlohmann::json& payload) {
  write_raw(encode_frame(type, seq, payload));
}

std::span<std::byte> WorkerServer::arena(std::uint64_t size) {
  if (size > mapped_) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, arena_fd_, 0);
    if (p == MAP_FAILED) throw ProtocolError(fmt::format("cannot map the arena: {}", std::strerror(errno)));
    if (arena_) munmap(arena_, mapped_);
    arena_ = static_cast<std::byte*>(p), mapped_ = size;
  }
  return {arena_, static_cast<std::size_t>(size)};
}

namespace {

nlohmann::json hello_for(const Backend& b) {
  HelloReply h;
  h.ops = {std::string(op_name(b.op()))};
  h.available = b.available(&h.reason);
  h.supports_round_trip = true;
  h.info = fmt::format("driftcheck worker --backend {} (pid {})", b.name(), getpid());
  return hello_reply_json(h);
}

// One request answered; false on shutdown.
bool answer(WorkerServer& server, const Backend& b, const Frame& f) {
  const auto reply_type = static_cast<MessageType>(static_cast<std::uint16_t>(f.type) | 0x80);
  switch (f.type) {
    case MessageType::kHello:
      server.reply(reply_type, f.seq, hello_for(b));
      return true;
    case MessageType::kShutdown:
      return false;
    case MessageType::kSupports: {
      const DecodedCase d = decode_case(Fields(f.payload, "supports request").object("case"), {});
      server.reply(reply_type, f.seq, supports_reply_json(b.supports(d.c)));
      return true;
    }
    case MessageType::kRun: {
      const Fields request(f.payload, "run request");
      const auto arena = server.arena(request.unsigned_integer("arena_size"));
      DecodedCase d = decode_case(request.object("case"), arena);
      if (!d.in_arena) throw ProtocolError("run request without arena offsets");
      try {
        b.run(d.c);
      } catch (const BackendDeclined& e) {
        server.reply(MessageType::kError, f.seq, error_json(e.what(), false, true));
        return true;
      } catch (const std::exception& e) {
        server.reply(MessageType::kError, f.seq, error_json(e.what(), false));
        return true;
      }
      server.reply(reply_type, f.seq, run_reply_json(write_back(d, arena)));
      return true;
    }
    default:
      throw ProtocolError(fmt::format("a worker cannot accept a {} frame", message_name(f.type)));
  }
}

}  // namespace

int serve(const Backend& b) {
  WorkerServer server;
  try {
    while (auto f = server.next())
      if (!answer(server, b, *f)) break;
  } catch (const std::exception& e) {
    std::cerr << fmt::format("driftcheck worker {}: {}\n", b.name(), e.what());
    return 3;
  }
  return 0;
}

}  // namespace driftcheck::external
