// Sharding a campaign over processes, GPUs and hosts (docs/CAMPAIGN.md, "Several GPUs and hosts"). The case
// stream is a pure function of (seed, index), so shard I of N simply takes the indices k with k % N == I: no
// coordination at run time, and `driftcheck merge` folds the shards back into the report of the unsharded
// campaign. The shard can come from the flag or from the launcher's environment (OpenMPI, MPICH, Slurm job
// arrays and tasks, Kubernetes indexed Jobs); one GPU per rank is picked by the launcher's local rank.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace driftcheck::fuzz {

struct Shard {
  std::uint64_t index = 0;
  std::uint64_t count = 1;

  bool sharded() const { return count > 1; }
  // The campaign case index of this shard's `local`-th case.
  std::uint64_t case_index(std::uint64_t local) const { return index + local * count; }
  // How many of the case indices below `total` belong to this shard.
  std::uint64_t cases_below(std::uint64_t total) const {
    return total > index ? (total - index + count - 1) / count : 0;
  }
  std::string name() const;  // "2/8"
  friend bool operator==(const Shard&, const Shard&) = default;
};

// Reads one environment variable; nullopt when unset. Tests pass a map instead of the process environment.
using Environment = std::function<std::optional<std::string>(const char* name)>;
Environment process_environment();

// --shard I/N, `auto` (index and count from the launcher's environment) or `auto/N` (index from the
// environment, count N: a Kubernetes indexed Job exports JOB_COMPLETION_INDEX but not its completions).
// Throws UsageError naming what is wrong (a malformed spec, I >= N, no launcher variables for `auto`, an
// environment whose variables disagree with each other).
Shard parse_shard(std::string_view spec, const Environment& env);

// Where shard `s` of a campaign in `out` writes: `out` itself when unsharded, else out/shard-<I>-of-<N>
// (every rank of an mpirun gets the same --out).
std::filesystem::path shard_dir(const std::filesystem::path& out, const Shard& s);

// --device N or `auto`: the GPU ordinal this process uses among the `device_count` it sees. `auto` is the
// launcher's local rank (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID; 0 without one) modulo
// device_count, so ranks on one host take different GPUs; `note` says when ranks must share one. Throws
// UsageError for a malformed N or one beyond device_count.
int resolve_device(std::string_view spec, const Environment& env, int device_count, std::string* note);

}  // namespace driftcheck::fuzz
