// CaseSpec: the small, JSON-serialisable description a generator draws and a shrinker shrinks; materialize()
// turns it into a Case (tensors with layouts, guard bands, poisoned unused KV slots) deterministically.
// Case k of seed s is gen_case_spec(op) run with a RapidCheck Random derived from (s, k) alone, so campaigns
// can be sharded, resumed and any finding replayed on its own.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <rapidcheck.h>
#include <nlohmann/json_fwd.hpp>

#include "driftcheck/device/backend.hpp"  // kMaxCompileSet
#include "driftcheck/reference/case.hpp"

namespace driftcheck::fuzz {

// Value distributions: where real kernels lose precision or overflow (docs/ORACLE.md section 7).
enum class Distribution : std::uint8_t {
  kNormal,           // N(0, 1)
  kOutlierChannels,  // a few channels 100x larger, as real activations have
  kNearConstant,     // rows whose variance is near 0
  kNearMax,          // magnitudes near the activation format's max finite
  kSubnormal,        // values in or near the format's subnormal range
  kLargeLogits,      // attention: q.k large enough that exp overflows without max subtraction
};

// Where the K and V caches live (docs/ORACLE.md, "Layouts"): two storages, or views of one tensor as vLLM's
// backends allocate it.
enum class KvLayout : std::uint8_t {
  kSeparate,          // k_cache and v_cache in storages of their own
  kBlockInterleaved,  // one [blocks, 2, bs, Hkv, D] tensor, K and V = kv[:, 0] and kv[:, 1] (TRITON_ATTN)
  kStacked,  // one [2, blocks, bs, Hkv, D] tensor, K and V = kv[0] and kv[1] (FLASH_ATTN, ROCM_AITER_FA)
};

// Special values a small share of cases carry (issue #8 item 7), so that propagation defects show: a NaN in
// one row, head or sequence leaking into another, a masked row turning into NaN, an infinite value whose
// weight underflows. The reference's semantics (fp64, docs/REFERENCE.md) decide what is right.
enum class Special : std::uint8_t {
  kNone,
  kNanInput,    // one input element is NaN: rows x / e / a; attention one element of a live key
  kInfInput,    // one input element is +-inf: rows x / e / a; attention one element of a live value (NaN in
                // fp8 formats without infinities)
  kMaskedRows,  // attention, causal: one sequence has more queries than keys, so its first rows see no key
};

struct CaseSpec {
  OpKind op = OpKind::kRmsNorm;
  OpParams params;
  DType act_dtype = DType::kBF16;  // activations, weights and outputs
  DType kv_dtype = DType::kBF16;   // attention KV cache
  // rmsnorm / dual / concat shapes
  std::int64_t rows = 1;
  std::int64_t hidden = 64;    // H (concat: width of a)
  std::int64_t hidden_b = 64;  // concat: width of b
  // attention batch: one entry per sequence
  std::vector<std::int64_t> query_lens;
  std::vector<std::int64_t> seq_lens;
  std::int64_t spare_blocks = 0;       // physical blocks no sequence uses (poisoned)
  std::uint64_t block_table_seed = 0;  // 0: identity placement; else a random permutation of physical blocks
  // The block table as a slice of a wider persistent table (vLLM keeps one [max_reqs, max_blocks_per_req]
  // table and passes rows [first, first + num_seqs), sometimes only the first columns): the view's rows are
  // max_blocks + table_pad_cols apart, with table_rows_before rows of other requests above it and
  // table_rows_after below. Entries outside the view hold valid block ids of other sequences' blocks, so a
  // kernel that ignores the row stride or offset reads real data of the wrong sequence.
  std::int64_t table_pad_cols = 0;
  std::int64_t table_rows_before = 0;
  std::int64_t table_rows_after = 0;
  // Entries no kernel may read (past a sequence's last block, inside and outside the view) hold ids outside
  // the cache instead of valid ones: reading one must be an `error` verdict, not a crash.
  bool table_poison = false;
  // q as the first Hq * D columns of a fused qkv projection output: tokens q_token_pad elements further apart
  // than the heads need (2 Hkv D in vLLM).
  std::int64_t q_token_pad = 0;
  KvLayout kv_layout = KvLayout::kSeparate;
  // layouts
  std::int64_t row_pad = 0;      // extra elements between rows (row stride = width + row_pad)
  std::int64_t base_offset = 0;  // element offset of every tensor's first element (1..7 misaligns)
  bool inplace_output = false;   // rmsnorm: y aliases x (as in-place kernels write)
  // rmsnorm, not in place: y is a fresh contiguous, aligned tensor (what a caller allocates for a kernel that
  // checks out.is_contiguous()) instead of sharing x's row padding and offset. Optional in JSON (false).
  bool contiguous_output = false;
  // values
  Distribution distribution = Distribution::kNormal;
  std::uint64_t value_seed = 1;
  Special special = Special::kNone;  // optional in JSON ("none")
};

Case materialize(const CaseSpec& spec);
// Attention: the new tokens' K/V inputs k_new / v_new [T, Hkv, D] (activation dtype) of case c, derived from
// its caches so that the cache stays what it is: where the cache is not fp8, the stored value times the scale
// (the cache write copies); fp8, a value drawn (stream of `value_seed`) inside the stored code's rounding
// interval, so that quantising it (value / scale, saturating) gives the stored code. Replaces any k_new /
// v_new the case has. materialize() calls it last; readers of files written without them call it on load.
void add_new_kv(Case& c, std::uint64_t value_seed);
std::string_view special_name(Special s);

void to_json(nlohmann::json& j, const CaseSpec& s);
void from_json(const nlohmann::json& j, CaseSpec& s);  // throws InvalidArgument on a malformed spec

// Options that bound generation (kept inside RapidCheck's safe size range, max_size <= 100).
struct GenOptions {
  // GenOptions{false} (small shapes) reads as before the profiles came.
  GenOptions(bool large = true, std::string profile = {})  // NOLINT(google-explicit-constructor)
      : large_shapes(large), model(std::move(profile)) {}

  bool large_shapes = true;  // include drafter-sized widths (4096, 6144, 8192) and long contexts
  // A model profile's name (profiles.hpp): its real shapes in most cases. Empty: the default stream, which no
  // profile changes.
  std::string model;
  // Compile set (docs/CAMPAIGN.md "Compile sets"): K > 0 draws every case's compile-relevant parameters (the
  // fields compile_key() names: dtypes, widths, heads, head size, block size, feature flags, layout classes)
  // from K combinations fixed by (seed, op), so a JIT-compiled kernel meets at most K specialisations per op
  // and reaches steady state after K compiles. Case k's other parameters (batch, lengths, values, table
  // layout) are those of case k of the stream without it, trimmed where the combination's shape needs it.
  // 0: off, the stream unchanged. At most kMaxCompileSet.
  int compile_set = 0;
};

// The default (or model) stream's generator; a compile set needs the seed, so it is drawn by draw_case only
// (gen_case_spec throws InvalidArgument for GenOptions::compile_set > 0).
rc::Gen<CaseSpec> gen_case_spec(OpKind op, const GenOptions& opts = {});

// What a JIT-compiled kernel specialises on, as one string (two cases with equal keys need no new compile):
// the formats, widths (rmsnorm, dual, concat), heads, head size and block size (attention), the feature flags
// kernels take as compile-time constants (weight mode, residual, in-place or fresh output, causal, the
// window, softcap, sinks) and the layout classes (row padding, base offset, fused q, KV storage). The batch,
// the lengths, eps and the scales, the values and the block table are not in it.
std::string compile_key(const CaseSpec& s);

// The stream replay flags of a generator's options (" --model NAME --compile-set K", empty for the default
// stream), as `driftcheck replay` takes them.
std::string stream_args(const GenOptions& opts);

// The deterministic case k of seed s: draws gen_case_spec(op) with a Random derived from (seed, index, op).
// Returns the shrinkable so a failure can be shrunk. Safe to call from several threads: the returned
// shrinkable's value() and shrinks() take generation_mutex() (RapidCheck's generator state is
// process-global).
rc::Shrinkable<CaseSpec> draw_case(OpKind op, std::uint64_t seed, std::uint64_t index,
                                   const GenOptions& opts = {});

// The lock every RapidCheck generation in this process must hold (draw_case's shrinkables take it themselves;
// hold it around any other use of gen_case_spec when other threads may be drawing).
std::recursive_mutex& generation_mutex();

// A short class of the case's shape for deduplicating findings ("attn/decode/gqa4/bs544/fp8_e4m3fn").
std::string shape_class(const CaseSpec& s);

// The one-step smaller variants of s a shrinker tries (docs/CAMPAIGN.md "Findings, deduplication,
// shrinking"), in this order: the structure that makes a repro big (attention: halves of the batch, each
// sequence dropped, each context and query shortened, KV heads, the GQA ratio, head size, block size; the
// norm family: rows and widths), then features and layouts (softcap, window, sinks, scales, table slices,
// poison, shared KV storage, fused q, row padding, offsets), then the value distribution. A candidate may
// leave a backend's supported space; the shrinker then skips it.
std::vector<CaseSpec> shrink_candidates(const CaseSpec& s);

// The case's shape in one line, for shrunk repros in reports ("attention bf16, kv fp8_e4m3fn, 1 seq (query
// 1, context 17), heads 2/1, head_dim 16, block_size 16").
std::string shape_line(const CaseSpec& s);

}  // namespace driftcheck::fuzz
