// One backend interface, one registry. A backend has a dotted name (`cpu.rmsnorm.cuda_kernel`,
// `gpu.attn.unified`, `mutant.rmsnorm.stride_ignored`), says whether it supports a case and, when not, why,
// and runs a case by writing the case's output tensors (and in-place inputs). Errors are thrown as
// BackendError.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "driftcheck/reference/case.hpp"

namespace driftcheck {

// kExternal: declared in a backends file and run by a worker process or plugin (docs/PROTOCOL.md).
enum class BackendKind : std::uint8_t { kCpu, kGpu, kMutant, kExternal };

class BackendError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How a backend that runs out of process (an external worker, an --isolate'd built-in) failed a case, when
// the failure itself is the verdict: it reported an error or broke the worker protocol, it did not answer in
// time, or its process died (a segfault, an illegal address that killed the CUDA context). docs/PROTOCOL.md,
// section 5.
enum class FaultKind : std::uint8_t { kError, kTimeout, kCrash };

class BackendFault : public BackendError {
 public:
  BackendFault(FaultKind kind, const std::string& what) : BackendError(what), kind_(kind) {}
  FaultKind kind() const { return kind_; }

 private:
  FaultKind kind_;
};

// Thrown by run() when a backend finds only at run time that it does not take a case: a kernel library that
// picks its kernel from the data (torch's SDPA under one backend, whose masks depend on seq_lens) and has
// none for this one. The case is `unsupported` with this reason, like a supports() "no": never a pass, never
// a fault.
class BackendDeclined : public BackendError {
 public:
  using BackendError::BackendError;
};

// Thrown by supports() or run() of a backend that did not run a case for a reason of its own state, not of
// the case: its worker was being restarted after a fault and the caller does not wait for restarts, or the
// caller's deadline (CallPolicy) passed first. The case is neither judged nor unsupported; the campaign
// counts it apart (docs/CAMPAIGN.md "Worker faults"). A metamorphic re-run that meets it is no evidence
// either way, as for BackendDeclined.
class BackendNotRun : public BackendDeclined {
 public:
  using BackendDeclined::BackendDeclined;
};

// What the calling thread lets the calls of an out-of-process backend (a worker, an --isolate'd built-in)
// wait for. Set for a scope with CallPolicyScope; the default waits for everything, as `replay` and the
// tests want.
struct CallPolicy {
  // false: a call that would wait for a worker being started in place of one that faulted throws
  // BackendNotRun instead (a campaign's discovery: the other backends of the case, and the next cases, go
  // on).
  bool wait_for_restart = true;
  // Set: no wait and no request outlives it. A request's timeout is cut to the time left, and a request cut
  // short, or a wait for a worker that ends there, throws BackendNotRun (the grouping phase's budget).
  std::optional<std::chrono::steady_clock::time_point> deadline;
};
const CallPolicy& call_policy();  // this thread's
class CallPolicyScope {
 public:
  explicit CallPolicyScope(CallPolicy p);
  ~CallPolicyScope();
  CallPolicyScope(const CallPolicyScope&) = delete;
  CallPolicyScope& operator=(const CallPolicyScope&) = delete;

 private:
  CallPolicy saved_;
};

// What worker faults cost an out-of-process backend so far: replacement workers started after a fault (each
// a process start, an import, a CUDA context), and the seconds those starts took (docs/PROTOCOL.md
// section 5).
struct WorkerRestarts {
  std::int64_t restarts = 0;
  double seconds = 0;
};

// Whether a backend can run a case; `reason` says why not, in the field's words ("block_size 128: ROCM_ATTN's
// custom kernel supports 16 and 32 only").
struct Support {
  bool ok = true;
  std::string reason;
  static Support yes() { return {}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
};

// How a kernel reduces a row (rmsnorm family: the sum of squares), as the statistical tier reads it
// (docs/ORACLE.md section 9): `threads` partial sums, each accumulated sequentially over chunks of `vec`
// consecutive elements (chunk c to thread c % threads), then combined by a shuffle tree within each warp of
// `warp` lanes and the warp totals added one after another (cub's block reduction). The default, one thread,
// is a sequential sum: the worst case, right for a kernel that declares nothing.
struct ReductionShape {
  int threads = 1;  // a kernel launching min(threads, H) threads
  int vec = 1;      // the largest chunk a thread reads at once
  int warp = 32;
};

// The numerics a backend declares; the oracle derives its tolerance from them (docs/ORACLE.md).
struct Numerics {
  // rmsnorm family: roundings to the output format on the way to each output element (1: fp32 math, one final
  // rounding; 2: x * s rounded, then multiplied by the weight and rounded again).
  int output_roundings = 1;
  // attention: P (softmax weights) rounded to the activation dtype before P.V, as Triton kernels do.
  bool p_rounded = false;
  // attention: partial outputs of KV partitions stored in the activation dtype before the merge (ROCM_ATTN).
  bool partials_rounded = false;
  // fp8 KV: dequantised K/V rounded to the activation dtype before the dot products (Triton unified).
  bool kv_dequant_rounded = false;
  // The same rounding in the rows of sequences with query length > 1 only (prefill/extend): ROCM_ATTN's
  // Triton prefix prefill dequantises the fp8 context to act, its decode kernel reads fp8 exactly.
  bool kv_dequant_rounded_prefill = false;
  // attention, rows of decode sequences (query length 1) with an fp8 cache: QK and P.V on fp8 MFMAs, so q
  // (times q_scale, 1 when none is passed) and P are converted to the cache's fp8 format first (aiter
  // paged_attention_v1); K and V enter as stored, k_scale after QK, v_scale after P.V.
  bool fp8_mfma_decode = false;
  // attention: where the kernel reads the new tokens' K/V (case.hpp NewKv): the reference, the naive baseline
  // and the error model it is judged with read the same source.
  NewKv new_kv = NewKv::kCache;
  // attention: a row whose softmax sum is NaN (a NaN logit) or 0 (no visible key) gets lse +inf, where the
  // reference's lse is NaN or -inf: FlashAttention-2's convention (its forward writes INFINITY when the row
  // sum is 0 or NaN). o is judged as ever (NaN in a NaN row, 0 in a row with no key).
  bool lse_undefined_inf = false;
  // rmsnorm family: the shape of the sum-of-squares reduction (statistical tier only).
  ReductionShape reduction;
  // Metamorphic contracts the oracle checks bit for bit.
  bool deterministic = true;
  bool batch_invariant = true;  // a row's bits do not depend on the other rows/sequences in the batch
  bool block_permutation_invariant = true;  // physical KV block placement does not change any bit
};

// What a command line needs to find a backend that is not built in: the backends file (`--backends FILE`) or
// the C plugin (`--plugin FILE.so`) that defines it, by absolute path. Commands driftcheck prints name it,
// and repro bundles record it with the file's hash, so they run as printed (docs/CAMPAIGN.md "Replay").
struct BackendDefinition {
  enum class Kind : std::uint8_t { kBuiltIn, kBackendsFile, kPlugin };
  Kind kind = Kind::kBuiltIn;
  std::filesystem::path path;  // absolute; empty for a built-in
};

// The largest compile set a campaign draws from (Backend::compile_set, GenOptions::compile_set).
inline constexpr int kMaxCompileSet = 64;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view description() const = 0;  // one line: what kernel it models, and its source
  // The upstream code a backend reproduces: repository, file(s) and the commit or release range it is pinned
  // to ("vllm-project/vllm@0013943 vllm/v1/attention/ops/triton_unified_attention.py"). Empty for backends
  // that model no upstream kernel (hand-made test backends).
  virtual std::string_view provenance() const { return {}; }
  virtual BackendKind kind() const = 0;
  virtual OpKind op() const = 0;
  // False with a reason when the backend cannot run on this machine (no GPU, no driver).
  virtual bool available(std::string* why) const {
    (void)why;
    return true;
  }
  virtual Support supports(const Case& c) const = 0;
  // One line summarising what supports() accepts ("bf16/fp16/fp32; block_size 16 or 32; head_dim 64/128"),
  // for `driftcheck list`. Empty when the backend has not written one.
  virtual std::string supports_summary() const { return {}; }
  // Writes c's outputs. May be called concurrently from several threads on different cases.
  virtual void run(Case& c) const = 0;
  virtual Numerics numerics() const { return {}; }
  // The numerics the backend computes one case with: a kernel that picks its path per batch (ROCM_ATTN sends
  // decode rows to its custom kernel or to a Triton one) declares what the path this case takes does. The
  // oracle judges a case with these; `numerics()` is what `driftcheck list` shows (the common path).
  virtual Numerics numerics_for(const Case& c) const {
    (void)c;
    return numerics();
  }
  // Where a backend not built in comes from, for `driftcheck list`: "backends.toml:12; worker: torch 2.11,
  // cuda:0" for an external backend, "out of process (--isolate)" for an isolated one. Empty for built-ins.
  virtual std::string origin() const { return {}; }
  // The file that defines a backend that is not built in (BackendDefinition).
  virtual BackendDefinition definition() const { return {}; }
  // False when the kernel already runs in another process (a worker, an --isolate'd backend): --isolate
  // leaves those as they are and wraps the others (built-ins and C plugins).
  virtual bool in_process() const { return true; }
  // Out-of-process backends: their worker restarts so far (cumulative over the process). Zero in process.
  virtual WorkerRestarts worker_restarts() const { return {}; }
  // Mutants: the correct backend this one breaks, and the bug class it models with its source (issue/PR).
  virtual std::string_view mutates() const { return {}; }
  virtual std::string_view bug_class() const { return {}; }
  // Upstream defects a twin reproduces, each one named switch of its kernel parameters
  // ("softcap_from_exp"). A known finding (golden/known-findings.toml) names one. without_defects() returns
  // this backend (same name, same bug for a mutant) with the named defects repaired, or nullptr when it
  // models none of them: a failure is explained by known findings when the repaired backend passes the same
  // case (fuzz/campaign/include/driftcheck/fuzz/known_findings.hpp).
  virtual std::vector<std::string> modelled_defects() const { return {}; }
  // The CPU twin that models this kernel, for a kernel from outside (a backends file's `twin = "cpu.x"`): it
  // has no defect switches of its own, so a failure of it is a known finding when its twin fails the same
  // case with that known finding and its outputs agree with the twin's (known_findings.hpp). Empty otherwise.
  virtual std::string_view twin() const { return {}; }
  virtual std::unique_ptr<Backend> without_defects(const std::vector<std::string>& defects) const {
    (void)defects;
    return nullptr;
  }
  // A kernel compiled just in time for every new specialisation (Triton, torch.compile) declares the compile
  // set a campaign should draw its cases from (a backends file's `compile_set = K`; docs/CAMPAIGN.md "Compile
  // sets"), so that it compiles K times and not once per case. 0: none needed.
  virtual int compile_set() const { return 0; }
};

class Registry {
 public:
  void add(std::unique_ptr<Backend> b);  // throws InvalidArgument on a duplicate name
  // Puts `b` in place of the backend of the same name and hands that one back (--isolate wraps a built-in
  // backend in an out-of-process one that keeps its name). Throws InvalidArgument when there is none.
  std::unique_ptr<Backend> replace(std::unique_ptr<Backend> b);
  const std::vector<std::unique_ptr<Backend>>& all() const { return backends_; }
  const Backend* find(std::string_view name) const;
  // Backends whose name matches a glob (`*` and `?`; a comma-separated list of globs is their union).
  std::vector<const Backend*> match(std::string_view globs, bool include_mutants) const;

 private:
  std::vector<std::unique_ptr<Backend>> backends_;
};

bool glob_match(std::string_view pattern, std::string_view text);
std::string_view backend_kind_name(BackendKind k);

}  // namespace driftcheck
