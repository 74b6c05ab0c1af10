// A worker for the protocol tests: serves a built-in backend like `driftcheck worker`, and misbehaves on
// command, so every fault of docs/PROTOCOL.md section 5 can be produced on purpose:
//   fault_worker --backend NAME [--fault MODE] [--on hello|supports|run] [--every K]
//                [--case-every K] [--from-case N]
// misbehaves at every K-th request of the chosen kind (default: every run request), or, with --case-every or
// --from-case, at the requests of the chosen kind for the cases whose index is a multiple of K and at least N
// (the same cases in every worker process, so a campaign's fault rate per case is known). Modes:
//   none, crash (abort), segv, exit (status 7), hang, garbage (text on the reply channel), stdout (prints to
//   stdout, then replies correctly), wrong_count, wrong_size, wrong_version, out_of_order, extra_reply,
//   error, fatal (an error reply flagged fatal), decline (an error reply flagged unsupported), guard (flips
//   the last byte of the first output's storage, a guard band: the oracle's storage check must catch it),
//   nan (every element of every output NaN: a kernel that only ever fails with NaN), slow_start (sleeps 30 s
//   before reading hello).
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "driftcheck/device/registry.hpp"
#include "driftcheck/external/serve.hpp"

namespace {

using namespace driftcheck;
using namespace driftcheck::external;

struct Options {
  std::string backend;
  std::string fault = "none";
  std::string on = "run";
  int every = 1;
  long case_every = 0;  // 0: by the request counter
  long from_case = 0;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--backend") o.backend = value;
    if (flag == "--fault") o.fault = value;
    if (flag == "--on") o.on = value;
    if (flag == "--every") o.every = std::max(1, std::atoi(value.c_str()));
    if (flag == "--case-every") o.case_every = std::max(1L, std::atol(value.c_str()));
    if (flag == "--from-case") o.from_case = std::max(0L, std::atol(value.c_str()));
  }
  return o;
}

MessageType reply_type(MessageType t) {
  return static_cast<MessageType>(static_cast<std::uint16_t>(t) | 0x80);
}

// The correct reply to a request (what `driftcheck worker` answers).
// `guard` (when this request was chosen) flips a guard byte before the storages go back.
// `nan` (when this request was chosen) overwrites every output element with NaN.
nlohmann::json correct_reply(WorkerServer& server, const Backend& b, const Frame& f, bool guard, bool nan) {
  switch (f.type) {
    case MessageType::kHello:
      return hello_reply_json({{std::string(op_name(b.op()))}, true, "", true, "fault_worker"});
    case MessageType::kSupports:
      return supports_reply_json(b.supports(decode_case(f.payload.at("case"), {}).c));
    default: {
      const auto arena = server.arena(f.payload.at("arena_size").get<std::uint64_t>());
      DecodedCase d = decode_case(f.payload.at("case"), arena);
      b.run(d.c);
      if (nan)
        for (const auto& name : op_signature(d.c).outputs) {
          Tensor& out = d.c.tensor(name);
          out.copy_from(std::vector<double>(static_cast<std::size_t>(out.numel()), std::nan("")));
        }
      if (guard) {
        auto& bytes = d.c.tensor(op_signature(d.c).outputs.front()).storage()->bytes;
        bytes.back() ^= std::byte{0x5a};
      }
      return run_reply_json(write_back(d, arena));
    }
  }
}

// Misbehaves on this request; false when it did so instead of replying.
bool misbehave(WorkerServer& server, const Frame& f, const std::string& fault, nlohmann::json& reply) {
  if (fault == "crash") std::abort();
  if (fault == "segv") {  // the default action, even under a sanitizer that would catch it and exit 1
    std::signal(SIGSEGV, SIG_DFL);
    std::raise(SIGSEGV);
  }
  if (fault == "exit") std::exit(7);
  if (fault == "hang") std::this_thread::sleep_for(std::chrono::hours(1));
  if (fault == "garbage") {
    server.write_raw("Traceback (most recent call last): this is not a frame\n");
    return false;
  }
  if (fault == "stdout") std::printf("debug print from the kernel\n"), std::fflush(stdout);
  if (fault == "wrong_count" && reply.contains("storages"))
    reply["storages"].erase(reply["storages"].size() - 1);
  if (fault == "wrong_size" && reply.contains("storages"))
    reply["storages"][0] = reply["storages"][0].get<int>() + 1;
  if (fault == "decline") {  // "unsupported": true, and fatal too: the worker must be kept all the same
    server.reply(MessageType::kError, f.seq, error_json("no kernel for this case's mask", true, true));
    return false;
  }
  if (fault == "error" || fault == "fatal") {
    server.reply(MessageType::kError, f.seq,
                 error_json("CUDA error: an illegal memory access was encountered", fault == "fatal"));
    return false;
  }
  if (fault == "wrong_version" || fault == "out_of_order") {
    std::string frame = encode_frame(reply_type(f.type), f.seq + (fault == "out_of_order"), reply);
    if (fault == "wrong_version") frame[4] = 2;
    server.write_raw(frame);
    return false;
  }
  if (fault == "extra_reply") {  // both in one write, so both are in the pipe when the first is read
    const std::string frame = encode_frame(reply_type(f.type), f.seq, reply);
    server.write_raw(frame + frame);
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const Backend* b = registry().find(o.backend);
  if (b == nullptr) {
    std::cerr << "fault_worker: unknown backend " << o.backend << "\n";
    return 2;
  }
  if (o.fault == "slow_start") std::this_thread::sleep_for(std::chrono::seconds(30));
  WorkerServer server;
  int seen = 0;
  while (auto f = server.next()) {
    if (f->type == MessageType::kShutdown) return 0;
    bool chosen = message_name(f->type) == o.on;
    if (chosen && (o.case_every > 0 || o.from_case > 0)) {
      const long index = f->payload.at("case").at("index").get<long>();
      chosen = index >= o.from_case && (o.case_every == 0 || index % o.case_every == 0);
    } else if (chosen) {
      chosen = ++seen % o.every == 0;
    }
    nlohmann::json reply;
    // A kernel error (a twin's modelled CUDA fault) is an error reply, as serve.cpp answers it.
    try {
      reply = correct_reply(server, *b, *f, chosen && o.fault == "guard", chosen && o.fault == "nan");
    } catch (const std::exception& e) {
      server.reply(MessageType::kError, f->seq, error_json(e.what(), false));
      continue;
    }
    if (chosen && !misbehave(server, *f, o.fault, reply)) continue;
    server.reply(reply_type(f->type), f->seq, reply);
  }
  return 0;
}
