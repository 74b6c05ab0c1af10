#include "driftcheck/fuzz/shard.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include "driftcheck/fuzz/campaign.hpp"  // UsageError

namespace driftcheck::fuzz {
namespace {

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// A launcher variable that must hold a number when set.
std::optional<std::uint64_t> number_var(const Environment& env, const char* name) {
  const auto text = env(name);
  if (!text) return std::nullopt;
  const auto v = parse_u64(*text);
  if (!v) throw UsageError(fmt::format("--shard auto: {}={} is not a non-negative integer", name, *text));
  return v;
}

// One level of a launch: its index, its count when the launcher says it, and where they came from.
struct Level {
  std::uint64_t index = 0;
  std::optional<std::uint64_t> count;
  std::string from;
};

// Ranks of one launch: OpenMPI's mpirun, MPICH/Intel MPI's hydra, Slurm's srun tasks. MPI first: OpenMPI
// under Slurm starts its daemons with srun, so SLURM_PROCID there numbers daemons, not ranks.
std::optional<Level> rank_level(const Environment& env) {
  const char* const pairs[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                  {"PMI_RANK", "PMI_SIZE"},
                                  {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (const auto& [rank, size] : pairs) {
    const auto r = number_var(env, rank);
    if (!r) continue;
    const auto n = number_var(env, size);
    if (!n) throw UsageError(fmt::format("--shard auto: {} is set but {} is not", rank, size));
    return Level{*r, n, fmt::format("{}/{}", rank, size)};
  }
  return std::nullopt;
}

// Jobs of an array: a Slurm job array (a range, --array=0-15 or with a step) or a Kubernetes indexed Job
// (which does not export its completions: the count comes from --shard auto/N).
std::optional<Level> array_level(const Environment& env) {
  if (const auto id = number_var(env, "SLURM_ARRAY_TASK_ID")) {
    const auto min = number_var(env, "SLURM_ARRAY_TASK_MIN").value_or(0);
    const auto step = number_var(env, "SLURM_ARRAY_TASK_STEP").value_or(1);
    const auto count = number_var(env, "SLURM_ARRAY_TASK_COUNT");
    if (!count)
      throw UsageError("--shard auto: SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not");
    if (*id < min || step == 0 || (*id - min) % step != 0)
      throw UsageError(
          fmt::format("--shard auto: SLURM_ARRAY_TASK_ID {} is not in the range MIN {} STEP {} "
                      "(submit the array as a range, --array=0-{})",
                      *id, min, step, *count - 1));
    return Level{(*id - min) / step, count, "SLURM_ARRAY_TASK_ID/COUNT"};
  }
  if (const auto k = number_var(env, "JOB_COMPLETION_INDEX"))
    return Level{*k, std::nullopt, "JOB_COMPLETION_INDEX"};
  return std::nullopt;
}

Shard checked(Shard s, std::string_view what) {
  if (s.count == 0) throw UsageError(fmt::format("--shard {}: the shard count must be at least 1", what));
  if (s.index >= s.count)
    throw UsageError(fmt::format("--shard {}: shard {} of {} (shards are numbered 0..{})", what, s.index,
                                 s.count, s.count - 1));
  return s;
}

// Ranks inside array jobs (mpirun or srun in every job of an array) nest: shard = job * ranks + rank.
Shard shard_from_environment(const Environment& env, std::optional<std::uint64_t> given_count,
                             std::string_view spec) {
  const auto ranks = rank_level(env);
  const auto array = array_level(env);
  if (!ranks && !array)
    throw UsageError(fmt::format(
        "--shard {}: no launcher variables (OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE, SLURM_PROCID/NTASKS, "
        "SLURM_ARRAY_TASK_ID/COUNT, JOB_COMPLETION_INDEX); pass --shard I/N",
        spec));
  const Level inner = ranks.value_or(Level{0, 1, ""});
  Level outer = array.value_or(Level{0, 1, ""});
  if (!outer.count) {  // Kubernetes: the total comes from auto/N
    if (!given_count)
      throw UsageError(
          fmt::format("--shard {}: {} is set but a Kubernetes Job does not export its number of "
                      "completions: pass --shard auto/N",
                      spec, outer.from));
    if (*given_count % *inner.count != 0)
      throw UsageError(fmt::format("--shard {}: {} ranks per job do not divide {} shards", spec, *inner.count,
                                   *given_count));
    outer.count = *given_count / *inner.count;
  }
  const Shard s{outer.index * *inner.count + inner.index, *outer.count * *inner.count};
  if (given_count && *given_count != s.count)
    throw UsageError(fmt::format("--shard {}: the launcher ({}) runs {} shards, not {}", spec,
                                 array ? array->from + (ranks ? " x " + ranks->from : "") : ranks->from,
                                 s.count, *given_count));
  return checked(s, spec);
}

}  // namespace

std::string Shard::name() const {
  return fmt::format("{}/{}", index, count);
}

Environment process_environment() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
  };
}

Shard parse_shard(std::string_view spec, const Environment& env) {
  const auto slash = spec.find('/');
  const std::string_view first = spec.substr(0, slash);
  std::optional<std::uint64_t> count;
  if (slash != std::string_view::npos) {
    count = parse_u64(spec.substr(slash + 1));
    if (!count) throw UsageError(fmt::format("--shard {}: expected I/N, auto or auto/N", spec));
  }
  if (first == "auto") return shard_from_environment(env, count, spec);
  const auto index = parse_u64(first);
  if (!index || !count) throw UsageError(fmt::format("--shard {}: expected I/N, auto or auto/N", spec));
  return checked({*index, *count}, spec);
}

std::filesystem::path shard_dir(const std::filesystem::path& out, const Shard& s) {
  return s.sharded() ? out / fmt::format("shard-{}-of-{}", s.index, s.count) : out;
}

int resolve_device(std::string_view spec, const Environment& env, int device_count, std::string* note) {
  if (spec != "auto") {
    const auto n = parse_u64(spec);
    if (!n) throw UsageError(fmt::format("--device {}: expected a GPU ordinal or auto", spec));
    if (*n >= static_cast<std::uint64_t>(std::max(device_count, 0)))
      throw UsageError(fmt::format("--device {}: this machine has {} GPU{}", spec, device_count,
                                   device_count == 1 ? "" : "s"));
    return static_cast<int>(*n);
  }
  if (device_count <= 0) return 0;
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    const auto text = env(name);
    if (!text) continue;
    const auto rank = parse_u64(*text);
    if (!rank)
      throw UsageError(fmt::format("--device auto: {}={} is not a non-negative integer", name, *text));
    const auto device = static_cast<int>(*rank % static_cast<std::uint64_t>(device_count));
    if (note && *rank >= static_cast<std::uint64_t>(device_count))
      *note = fmt::format("local rank {} ({}) shares GPU {} with another rank: {} GPUs here", *rank, name,
                          device, device_count);
    return device;
  }
  return 0;
}

}  // namespace driftcheck::fuzz
