// Fault injection against the driftcheck binary (docs/CAMPAIGN.md "Durability"): a full disk (a small tmpfs
// when the test may mount one, and the DRIFTCHECK_FAULT_ENOSPC_AFTER seam at many points), kill -9 at random
// points followed by --resume and compared with an uninterrupted run, Ctrl-C/SIGTERM in every phase that
// takes time, worker threads that cannot be created (the DRIFTCHECK_FAULT_THREADS seam and a real
// address-space limit), a closed stderr, and external workers that crash or hang (tests/fault_worker.cpp:
// what a fault costs, how its findings are grouped, what the reports say). Every test runs the real binary
// in a child process.
#include <gtest/gtest.h>

#include <sys/mount.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "campaign_files.hpp"
#include "driftcheck/files/file_io.hpp"
#include "driftcheck/reports/report.hpp"
#include "driftcheck_process.hpp"

namespace driftcheck::testing {
namespace {

// Cheap mutants (the norm family and concat): 16 cases give about 15 distinct findings, all shrunk within a
// second, so one short campaign has every phase (journal, discovery, bundles, shrinking, report).
const std::string kCheapMutants = "mutant.concat.*,mutant.rmsnorm.oob_write,mutant.dual.halves_swapped";

// A campaign that is deterministic to the byte: one job (the lowest failing case of each signature is the one
// bundled) and a shrink budget that never binds (each shrink ends on its 200-step cap or on a minimum).
std::vector<std::string> fuzz_args(const fs::path& out, const std::string& backends = kCheapMutants,
                                   const std::string& cases = "16") {
  return {"fuzz", "--backend", backends, "--cases", cases,       "--jobs", "1", "--shrink-seconds",
          "120",  "--seed",    "7",      "--out",   out.string()};
}
std::vector<std::string> resume_args(const fs::path& out, const std::string& cases = "16") {
  return {"fuzz", "--resume",         "--cases", cases,   "--jobs",
          "1",    "--shrink-seconds", "120",     "--out", out.string()};
}

ChildOptions with_env(std::string assignment) {
  ChildOptions o;
  o.env.push_back(std::move(assignment));
  return o;
}

Outcome run(const std::vector<std::string>& args, const ChildOptions& o = {}) {
  Child c(args, o);
  return c.wait();
}

fs::path fresh(const std::string& name) {
  const auto dir = scratch() / name;
  fs::remove_all(dir);
  return dir;
}

// A run that was stopped continues with --resume; one stopped before its journal existed starts again (a
// --resume without a journal would start the default campaign, not this one).
std::vector<std::string> continue_args(const fs::path& out) {
  return fs::exists(out / "journal.jsonl") ? resume_args(out) : fuzz_args(out);
}

// The uninterrupted campaign every fault is compared with (run once per test process), and how long it took.
struct Reference {
  fs::path dir;
  double seconds = 0;
};
const Reference& reference_run() {
  static const Reference ref = [] {
    Reference r{fresh("reference"), 0};
    const Outcome o = run(fuzz_args(r.dir));
    EXPECT_EQ(o.code, 1) << o.err;
    r.seconds = o.seconds;
    return r;
  }();
  return ref;
}
const fs::path& reference() {
  return reference_run().dir;
}

std::size_t error_lines(const Outcome& r, const std::string& text) {
  std::size_t n = 0;
  for (const auto& l : lines_of(r.err)) n += l.find(text) != std::string::npos;
  return n;
}

// ---------------------------------------------------------------------------------------------------------------
// Disk full

// A write fails with ENOSPC after `budget` bytes: the run stops with exit 3 and one line naming the file,
// leaves no half-written bundle, and --resume (with room again) finishes the very campaign an uninterrupted
// run makes.
void expect_disk_full_then_resume(const fs::path& dir, const Outcome& full) {
  EXPECT_EQ(full.signal, 0) << "killed by a signal: " << full.err;
  EXPECT_EQ(full.code, 3) << full.err;
  EXPECT_EQ(full.err.find("terminate called"), std::string::npos) << full.err;
  // The first failure is the one named (later ones, such as the report that cannot be written either,
  // follow).
  const auto first = full.err.find("I/O error: ");
  ASSERT_NE(first, std::string::npos) << full.err;
  EXPECT_NE(full.err.find("No space left on device", first), std::string::npos) << full.err;
  if (fs::exists(dir / "findings")) {
    for (const auto& name : bundle_names(dir)) EXPECT_FALSE(name.ends_with(".tmp")) << name;
  }
  const Outcome resumed = run(continue_args(dir));
  ASSERT_EQ(resumed.code, 1) << resumed.err;
  expect_every_bundle_written(dir);
  expect_same_campaign(reference(), dir);
}

TEST(DiskFull, InjectedAtManyPointsTheRunStopsCleanlyAndResumeFinishesIt) {
  if (!files::fault_injection_available()) GTEST_SKIP() << "built without DRIFTCHECK_FAULT_INJECTION";
  std::uintmax_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(reference()))
    if (e.is_regular_file()) total += e.file_size();
  // From the journal's header to the last bundles: fractions of everything the campaign writes.
  for (const double share : {0.0, 0.001, 0.01, 0.05, 0.2, 0.5, 0.8, 0.95}) {
    const auto budget = static_cast<std::uintmax_t>(share * static_cast<double>(total));
    SCOPED_TRACE("ENOSPC after " + std::to_string(budget) + " of " + std::to_string(total) + " bytes");
    const auto dir = fresh("enospc_" + std::to_string(budget));
    const Outcome full =
        run(fuzz_args(dir), with_env("DRIFTCHECK_FAULT_ENOSPC_AFTER=" + std::to_string(budget)));
    expect_disk_full_then_resume(dir, full);
  }
}

// The real thing where the test may mount a tmpfs (root in CI): a campaign on a filesystem that fills up,
// then resumed on the same filesystem after it grows.
TEST(DiskFull, OnASmallTmpfsTheRunStopsCleanlyAndResumesAfterItGrows) {
  const auto mnt = fresh("tmpfs");
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=160k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                 << "); the injected ENOSPC test covers it";
  struct Unmount {
    fs::path p;
    ~Unmount() { ::umount2(p.c_str(), MNT_DETACH); }
  } unmount{mnt};
  const auto dir = mnt / "campaign";
  const Outcome full = run(fuzz_args(dir));
  ASSERT_EQ(::mount("tmpfs", mnt.c_str(), "tmpfs", MS_REMOUNT, "size=64m"), 0) << std::strerror(errno);
  expect_disk_full_then_resume(dir, full);
}

// ---------------------------------------------------------------------------------------------------------------
// kill -9 at random points, then --resume

// One sequence: kill the campaign at a random time, kill its resumption at another, resume it to the end, and
// compare with the uninterrupted run. Returns how many kills landed on a running process.
int kill_twice_and_resume(std::mt19937& rng, const std::string& name) {
  const auto dir = fresh(name);
  const double t = reference_run().seconds;
  std::uniform_real_distribution<double> first(0.0, 0.95 * t), second(0.0, 0.6 * t);
  int landed = 0;
  for (const double at : {first(rng), second(rng)}) {
    Child c(continue_args(dir));
    while (c.elapsed() < at && c.running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    landed += c.signal(SIGKILL);
    const Outcome o = c.wait();
    EXPECT_TRUE(o.signal == SIGKILL || o.code == 1) << name << " at " << at << " s: " << o.err;
  }
  const Outcome done = run(continue_args(dir));
  EXPECT_EQ(done.code, 1) << name << ": " << done.err;
  expect_every_bundle_written(dir);
  expect_same_campaign(reference(), dir);
  return landed;
}

// At least 6 kills per shard; 4 shards (ctest runs them in parallel): 24 kills or more per suite run.
void kill_shard(unsigned seed) {
  (void)reference_run();
  std::mt19937 rng(seed);
  int landed = 0;
  for (int sequence = 0; landed < 6 && sequence < 12; ++sequence) {
    const std::string name = "kill_" + std::to_string(seed) + "_" + std::to_string(sequence);
    SCOPED_TRACE(name);
    landed += kill_twice_and_resume(rng, name);
  }
  EXPECT_GE(landed, 6);
}

TEST(KillResume, Shard1) {
  kill_shard(1);
}
TEST(KillResume, Shard2) {
  kill_shard(2);
}
TEST(KillResume, Shard3) {
  kill_shard(3);
}
TEST(KillResume, Shard4) {
  kill_shard(4);
}

// The states a kill -9 inside a bundle write leaves, built by hand so that each is met every time (the random
// kills meet them by chance). Shrinking is off on resume, so the bundles must come back without its help.
struct CrashState {
  fs::path dir;
  std::string id;     // the finding whose bundle write was interrupted
  std::string saved;  // its bundle's finding.json before the "kill"
};
CrashState unshrunk_campaign(const std::string& name) {
  CrashState s{fresh(name), "", ""};
  auto args = fuzz_args(s.dir);
  args[8] = "0";  // --shrink-seconds 0: every bundle is its drawn case
  EXPECT_EQ(run(args).code, 1);
  s.id = report_of(s.dir).at("findings")[0].at("id");
  s.saved = slurp(s.dir / "findings" / s.id / "finding.json");
  return s;
}
void expect_resume_restores(const CrashState& s) {
  const Outcome r = run({"fuzz", "--resume", "--shrink-seconds", "0", "--out", s.dir.string()});
  EXPECT_EQ(r.code, 1) << r.err;
  expect_every_bundle_written(s.dir);
  EXPECT_EQ(slurp(s.dir / "findings" / s.id / "finding.json"), s.saved);
}

// Killed after the finding's record, inside the write of its first bundle: a partial temp directory and no
// bundle record.
TEST(CrashStates, AKillInsideTheFirstBundleWrite) {
  const CrashState s = unshrunk_campaign("crash_first_write");
  std::string kept;
  for (const auto& line : lines_of(slurp(s.dir / "journal.jsonl")))
    if (!(line.find(R"("type":"bundle")") != std::string::npos && line.find(s.id) != std::string::npos))
      kept += line + "\n";
  std::ofstream(s.dir / "journal.jsonl", std::ios::trunc) << kept;
  fs::rename(s.dir / "findings" / s.id, s.dir / "findings" / (s.id + ".tmp"));
  fs::resize_file(s.dir / "findings" / (s.id + ".tmp") / "finding.json", 10);
  expect_resume_restores(s);
}

// Killed between the two renames of a replacement (filesystems without RENAME_EXCHANGE): the journaled bundle
// moved aside to .old, the new one complete in .tmp, none under the bundle's name.
TEST(CrashStates, AKillBetweenTheTwoRenamesOfAReplacement) {
  const CrashState s = unshrunk_campaign("crash_renames");
  const auto bundle = s.dir / "findings" / s.id;
  fs::rename(bundle, bundle.string() + ".old");
  fs::copy(bundle.string() + ".old", bundle.string() + ".tmp");
  expect_resume_restores(s);
}

// ---------------------------------------------------------------------------------------------------------------
// Signals

// The ids of the groups the journal records (each a shrunk, ablated representative).
std::set<std::string> group_ids(const fs::path& dir) {
  std::set<std::string> ids;
  for (const auto& line : lines_of(slurp(dir / "journal.jsonl"))) {
    const auto r = nlohmann::json::parse(line);
    if (r.at("type") == "group") ids.insert(r.at("id").get<std::string>());
  }
  return ids;
}

// Ctrl-C in the grouping phase ends it after the shrink candidate in flight (not at its budget), and the
// report is written. Shown by what was done rather than by a time limit: an ignored signal lets the phase
// group every (backend, verdict).
TEST(Signals, CtrlCInTheGroupingPhaseEndsItWithinAStep) {
  const auto dir = fresh("sigint_shrink");
  // Every attention mutant: 28 findings in more than a dozen (backend, verdict) classes, whose grouping takes
  // many seconds on an idle 2-core machine (longer on a loaded one, which only leaves more classes ungrouped
  // when the signal lands).
  Child c(fuzz_args(dir, "mutant.attn.*", "12"));
  ASSERT_TRUE(c.wait_for_err("grouping", 600)) << c.err_so_far();
  ASSERT_TRUE(c.signal(SIGINT));
  const Outcome o = c.wait();
  EXPECT_EQ(o.code, 1) << o.err;
  const auto report = report_of(dir);
  ASSERT_GT(report.at("findings").size(), 2u);
  std::set<std::string> classes;
  for (const auto& f : report.at("findings"))
    classes.insert(f.at("backend").get<std::string>() + "|" + f.at("verdict").get<std::string>());
  EXPECT_LT(group_ids(dir).size(), classes.size()) << "the grouping phase went on after Ctrl-C";
  expect_every_bundle_written(dir);
}

// Ctrl-C while a resumed run writes the bundles a kill left missing: it stops there, and the next --resume
// writes the rest.
TEST(Signals, CtrlCWhileResumeRewritesBundles) {
  const auto dir = fresh("sigint_rebundle");
  // Every attention mutant: about 28 findings in more than a dozen (backend, verdict) classes, the first two
  // of each bundled again: a couple of seconds.
  ASSERT_EQ(run({"fuzz", "--backend", "mutant.attn.*", "--cases", "12", "--jobs", "1", "--shrink-seconds",
                 "0", "--seed", "7", "--out", dir.string()})
                .code,
            1);
  fs::remove_all(dir / "findings");
  Child c({"fuzz", "--resume", "--shrink-seconds", "0", "--out", dir.string()});
  ASSERT_TRUE(c.wait_for_err("writing them again", 600)) << c.err_so_far();
  c.signal(SIGINT);
  const Outcome o = c.wait();
  EXPECT_EQ(o.code, 1) << o.err;
  // Each bundle redraws and evaluates an attention case (tens of ms or more): the signal, sent within
  // milliseconds of the warning, lands before the last one.
  EXPECT_GT(missing_drawn_bundles(report_of(dir)), 0)
      << "the interrupt was not honoured while bundles were rewritten";
  const Outcome again = run({"fuzz", "--resume", "--shrink-seconds", "0", "--out", dir.string()});
  EXPECT_EQ(again.code, 1) << again.err;
  expect_every_bundle_written(dir);
}

// SIGTERM in discovery ends it after the cases in flight, a second one kills at once; either way the journal
// resumes.
TEST(Signals, SigtermInDiscoveryThenASecondOneAndResume) {
  const auto dir = fresh("sigterm_twice");
  Child c(fuzz_args(dir, kCheapMutants, "1000000"));
  while (!fs::exists(dir / "journal.jsonl") && c.running())
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  c.signal(SIGTERM);
  // Apart, so that the two are not merged into one; the second kills the process if it is still finishing.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  c.signal(SIGTERM);
  const Outcome o = c.wait();
  EXPECT_TRUE(o.signal == SIGTERM || o.code == 1) << "exit " << o.code << ": " << o.err;
  const Outcome resumed = run(resume_args(dir, "40"));
  EXPECT_EQ(resumed.code, 1) << resumed.err;
  expect_every_bundle_written(dir);
}

// ---------------------------------------------------------------------------------------------------------------
// Signals while a case takes minutes: the slow test plugin (tests/plugins/test_plugin.c) sleeps 600 s in the
// run call whose number DC_TEST_PLUGIN_SLOW_CALL names, the way a 128k-token attention case computes for
// minutes; it also fails rows >= 3, so it has findings to shrink. Without the grace period the process would
// wait for the call; with it, it exits a grace after the signal, leaving that thread behind.

const std::string kWithSlowPlugin = "plugin.test_concat," + kCheapMutants;

std::vector<std::string> with_slow_plugin(std::vector<std::string> args, const std::string& grace) {
  args.insert(args.begin() + 1, {"--plugin", DRIFTCHECK_SLOW_PLUGIN, "--grace-seconds", grace});
  return args;
}

// The uninterrupted campaign with the slow plugin (never slow here): its directory, and the numbers of the
// plugin's first run call and of its first call in the grouping phase (deterministic with one job).
struct SlowReference {
  fs::path dir;
  int discovery_call = 0, grouping_call = 0;
};
const SlowReference& slow_reference() {
  static const SlowReference ref = [] {
    SlowReference r{fresh("slow_reference")};
    const Outcome o = run(with_slow_plugin(fuzz_args(r.dir, kWithSlowPlugin, "24"), "5"),
                          with_env("DC_TEST_PLUGIN_COUNT=1"));
    EXPECT_EQ(o.code, 1) << o.err;
    const auto grouping = o.err.find("grouping");
    for (const auto& line : lines_of(o.err)) {
      int call = 0;
      if (std::sscanf(line.c_str(), "test plugin: call %d", &call) != 1) continue;
      if (r.discovery_call == 0) r.discovery_call = call + 3;  // a few cases into the stream
      if (r.grouping_call == 0 && o.err.find(line + "\n", grouping) != std::string::npos)
        r.grouping_call = call;
    }
    EXPECT_GT(r.discovery_call, 3) << o.err;
    EXPECT_GT(r.grouping_call, r.discovery_call) << "the slow plugin has nothing to shrink: " << o.err;
    return r;
  }();
  return ref;
}

// Starts the campaign with the plugin's call `call` slow, waits until that call sleeps, sends `signals`
// (apart, so they are not merged into one), and returns the outcome and the seconds from the first signal to
// the exit.
std::pair<Outcome, double> interrupt_slow_case(const fs::path& dir, int call, const std::string& grace,
                                               const std::vector<int>& signals) {
  Child c(with_slow_plugin(fuzz_args(dir, kWithSlowPlugin, "24"), grace),
          with_env("DC_TEST_PLUGIN_SLOW_CALL=" + std::to_string(call)));
  EXPECT_TRUE(c.wait_for_err("sleeps", 600)) << c.err_so_far();
  const auto t0 = std::chrono::steady_clock::now();
  for (const int sig : signals) {
    c.signal(sig);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  Outcome o = c.wait(900);
  return {o, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

// What every interrupted run must leave: a report of what was recorded (its findings' bundles whole), a stuck
// discovery case not counted, and a --resume (the plugin fast again) that finishes the very campaign an
// uninterrupted run makes.
void expect_interrupted_then_resumed(const fs::path& dir, const Outcome& o, bool in_discovery) {
  EXPECT_EQ(o.signal, 0) << "killed by signal " << o.signal;
  EXPECT_EQ(o.code, 1) << o.err;  // the mutants' findings recorded before the signal
  EXPECT_NE(o.err.find("abandoned"), std::string::npos) << o.err;
  EXPECT_EQ(report_of(dir).at("cases").get<int>() < 24, in_discovery);
  expect_every_bundle_written(dir);
  auto resume = resume_args(dir, "24");
  resume.insert(resume.begin() + 1, {"--plugin", DRIFTCHECK_SLOW_PLUGIN});
  const Outcome resumed = run(resume);
  EXPECT_EQ(resumed.code, 1) << resumed.err;
  expect_same_campaign(slow_reference().dir, dir);
}

TEST(Signals, SigtermWhileACaseTakesMinutesEndsAGraceLater) {
  const auto dir = fresh("sigterm_slow_case");
  const auto [o, seconds] = interrupt_slow_case(dir, slow_reference().discovery_call, "2", {SIGTERM});
  // 2 s of grace, then the report: well under the 600 s the call takes (the margin is for a loaded machine).
  EXPECT_LT(seconds, 2 + 20) << o.err;
  expect_interrupted_then_resumed(dir, o, true);
}

TEST(Signals, ASecondSignalEndsTheGraceAtOnce) {
  const auto dir = fresh("sigterm_twice_slow_case");
  const auto [o, seconds] =
      interrupt_slow_case(dir, slow_reference().discovery_call, "600", {SIGTERM, SIGINT});
  EXPECT_LT(seconds, 20) << o.err;  // not the 600 s of grace
  expect_interrupted_then_resumed(dir, o, true);
}

TEST(Signals, CtrlCWhileAShrinkCandidateTakesMinutes) {
  const auto dir = fresh("sigint_slow_shrink");
  const auto [o, seconds] = interrupt_slow_case(dir, slow_reference().grouping_call, "2", {SIGINT});
  EXPECT_LT(seconds, 2 + 20) << o.err;
  EXPECT_LT(group_ids(dir).size(), group_ids(slow_reference().dir).size());
  expect_interrupted_then_resumed(dir, o, false);
}

TEST(Signals, AClosedStderrDoesNotKillTheRunOrLoseTheReport) {
  const auto dir = fresh("sigpipe");
  ChildOptions o;
  o.stderr_to_closed_pipe = true;
  const Outcome r = run(fuzz_args(dir), o);
  EXPECT_EQ(r.signal, 0) << "killed by signal " << r.signal;
  EXPECT_EQ(r.code, 1);
  expect_same_campaign(reference(), dir);
}

// ---------------------------------------------------------------------------------------------------------------
// Threads that cannot be created

TEST(Threads, NoWorkerThreadAtAllIsExitThreeWithAReport) {
  if (!files::fault_injection_available()) GTEST_SKIP() << "built without DRIFTCHECK_FAULT_INJECTION";
  const auto dir = fresh("no_threads");
  const Outcome r = run(fuzz_args(dir), with_env("DRIFTCHECK_FAULT_THREADS=0"));
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_EQ(error_lines(r, "cannot start a worker thread"), 1u) << r.err;
  EXPECT_EQ(report_of(dir).at("exit_code"), 3);
}

TEST(Threads, FewerThreadsThanAskedStillRunTheWholeCampaign) {
  if (!files::fault_injection_available()) GTEST_SKIP() << "built without DRIFTCHECK_FAULT_INJECTION";
  const auto dir = fresh("one_thread");
  auto args = fuzz_args(dir);
  args[6] = "4";  // --jobs 4, one of which starts
  const Outcome r = run(args, with_env("DRIFTCHECK_FAULT_THREADS=1"));
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(error_lines(r, "started 1 of 4 worker threads"), 1u) << r.err;
  expect_same_campaign(reference(), dir);
}

// A real limit: 2 GB of address space cannot hold a thousand 8 MB thread stacks. (ASan reserves terabytes of
// address space, so its build cannot run under the limit at all.)
TEST(Threads, AThousandJobsUnderAnAddressSpaceLimitDoNotAbort) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer cannot run under RLIMIT_AS";
#endif
  const auto dir = fresh("ulimit");
  auto args = fuzz_args(dir);
  args[6] = "1000";
  ChildOptions o;
  o.address_space = rlim_t{2000} << 20;
  const Outcome r = run(args, o);
  EXPECT_EQ(r.signal, 0) << r.err;
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(error_lines(r, "worker threads (Resource temporarily unavailable)"), 1u) << r.err;
}

// ---------------------------------------------------------------------------------------------------------------
// Workers that crash or hang (docs/CAMPAIGN.md "Worker faults")

// A backends file with one fault_worker backend, ext.NAME, serving cpu.rmsnorm.native and misbehaving on
// every case whose index is a multiple of `case_every` (in whichever worker process gets it).
fs::path fault_backends(const std::string& name, const std::string& fault, int case_every, double timeout_s) {
  const auto file = scratch() / (name + ".toml");
  std::ofstream(file) << "format = \"driftcheck.backends\"\nversion = 1\n\n[[backend]]\nname = \"" << name
                      << "\"\nop = \"rmsnorm\"\ncommand = [\"" << FAULT_WORKER_BIN
                      << "\", \"--backend\", \"cpu.rmsnorm.native\", \"--fault\", \"" << fault
                      << "\", \"--case-every\", \"" << case_every << "\"]\ntimeout_s = " << timeout_s
                      << "\nnumerics = \"like:cpu.rmsnorm.native\"\n";
  return file;
}

// A case that hangs is not waited for beyond the grouping phase's budget. The campaign finds its timeouts
// with a 1 s timeout; the worker is then declared with a 120 s one and the campaign resumed for its grouping
// phase alone (3 s): the timeout's case, run once more to see whether it reproduces, is cut where the budget
// ends. Before, that re-run waited the whole timeout (and the heatmap of the backend's worst case another).
TEST(WorkerFaults, AHangingCaseDoesNotHoldTheGroupingPhaseBeyondItsBudget) {
  const auto dir = fresh("hanging_grouping");
  const auto file = fault_backends("hangs", "hang", 1, 1);
  const Outcome found =
      run({"fuzz", "--backends", file.string(), "--backend", "ext.hangs", "--cases", "4", "--jobs", "2",
           "--shrink-seconds", "0", "--quarantine-after", "0", "--out", dir.string()});
  ASSERT_EQ(found.code, 1) << found.err;
  ASSERT_GT(report_of(dir).at("findings").size(), 0u);
  fault_backends("hangs", "hang", 1, 120);
  const Outcome grouped = run({"fuzz", "--resume", "--backends", file.string(), "--cases", "4", "--jobs", "2",
                               "--shrink-seconds", "3", "--out", dir.string()});
  EXPECT_EQ(grouped.code, 1) << grouped.err;
  // 3 s of grouping and the start-ups, with a margin for a loaded machine: far from the 120 s timeout.
  EXPECT_LT(grouped.seconds, 3 + 20) << grouped.err;
  const auto report = report_of(dir);
  ASSERT_EQ(report.at("groups").size(), 1u) << report.at("groups").dump();
  const auto& g = report.at("groups").at(0);
  EXPECT_EQ(g.at("verdict"), "timeout");
  // Labelled by the fault, not by the features of its case; not run again to the end.
  EXPECT_TRUE(g.at("features").empty()) << g.dump();
  EXPECT_EQ(g.at("fault"), "no reply to run request within 1 s (worker killed)");
  EXPECT_TRUE(g.at("fault_reproduced").is_null());
  EXPECT_EQ(g.at("members").size(), report.at("findings").size());
}

// A worker that crashes on every 4th case: every crash is a finding, all of them one group labelled by the
// fault (re-run alone, the fault comes back), the backend's restarts are in report.json and report.md, and
// an older report.json without those fields still loads.
TEST(WorkerFaults, CrashesAreGroupedByTheFaultAndTheirRestartsReported) {
  const auto dir = fresh("crash_groups");
  const auto file = fault_backends("crashes", "crash", 4, 30);
  const Outcome r =
      run({"fuzz", "--backends", file.string(), "--backend", "ext.crashes", "--cases", "40", "--jobs", "1",
           "--shrink-seconds", "30", "--quarantine-after", "0", "--out", dir.string()});
  ASSERT_EQ(r.code, 1) << r.err;
  auto report = report_of(dir);
  const auto& b = report.at("backends").at(0);
  const std::int64_t crashes = b.at("failures_by_verdict").at("crash").get<std::int64_t>();
  EXPECT_GE(crashes, 8);
  EXPECT_GE(b.at("worker_restarts").get<std::int64_t>(), crashes);  // and one per group's re-run
  EXPECT_GT(b.at("restart_seconds").get<double>(), 0);
  EXPECT_EQ(b.at("skipped_restarting"), 0);  // it starts in milliseconds: a case waits for it
  EXPECT_EQ(b.at("quarantined"), "");
  ASSERT_EQ(report.at("groups").size(), 1u) << report.at("groups").dump();
  const auto& g = report.at("groups").at(0);
  EXPECT_EQ(g.at("fault"), "worker killed by signal 6 (SIGABRT: Aborted) during run request");
  EXPECT_EQ(g.at("fault_reproduced"), true);
  EXPECT_TRUE(g.at("features").empty());
  EXPECT_EQ(g.at("cases"), crashes);
  const std::string md = slurp(dir / "report.md");
  EXPECT_NE(md.find("## Worker faults"), std::string::npos);
  EXPECT_NE(md.find("reproduced when its case ran again alone"), std::string::npos);
  EXPECT_EQ(error_lines(
                r, "ext.crashes: " + std::to_string(b.at("worker_restarts").get<int>()) + " worker restarts"),
            1u)
      << r.err;
  // A report written before these fields existed.
  for (auto& backend : report.at("backends"))
    for (const char* key :
         {"worker_restarts", "restart_seconds", "skipped_restarting", "skipped_quarantined", "quarantined"})
      backend.erase(key);
  for (auto& group : report.at("groups")) group.erase("fault"), group.erase("fault_reproduced");
  const reports::Report old = reports::report_from_json(report);
  EXPECT_EQ(old.backends.at(0).worker_restarts, 0);
  EXPECT_TRUE(old.groups.at(0).fault.empty());

  const Outcome bad = run({"fuzz", "--quarantine-after", "-1", "--out", (scratch() / "bad").string()});
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_EQ(lines_of(bad.err).size(), 1u) << bad.err;
}

// A worker that crashes on every other case is quarantined: the campaign says so on stderr and in its
// errors, exits 1 with its findings kept, and the backend next to it runs every case.
TEST(WorkerFaults, AQuarantineIsReportedAndTheOtherBackendsRunOn) {
  const auto dir = fresh("quarantine_cli");
  const auto file = fault_backends("crashes", "crash", 2, 30);
  const Outcome r = run({"fuzz", "--backends", file.string(), "--backend", "ext.crashes,cpu.rmsnorm.native",
                         "--cases", "100", "--jobs", "2", "--shrink-seconds", "5", "--out", dir.string()});
  ASSERT_EQ(r.code, 1) << r.err;
  EXPECT_EQ(error_lines(r, "driftcheck: ext.crashes quarantined after 5 worker faults"), 1u) << r.err;
  EXPECT_EQ(error_lines(r, "error: backend ext.crashes quarantined after 5 worker faults"), 1u) << r.err;
  const auto report = report_of(dir);
  const auto& errors = report.at("errors");
  EXPECT_TRUE(std::any_of(errors.begin(), errors.end(), [](const auto& e) {
    return e.template get<std::string>().find("ext.crashes quarantined") != std::string::npos;
  })) << errors.dump();
  for (const auto& b : report.at("backends")) {
    const std::int64_t seen =
        b.at("cases_run").get<std::int64_t>() + b.at("unsupported").get<std::int64_t>() +
        b.at("skipped_restarting").get<std::int64_t>() + b.at("skipped_quarantined").get<std::int64_t>();
    EXPECT_EQ(seen, 100) << b.dump();
    if (b.at("name") == "ext.crashes") {
      EXPECT_NE(b.at("quarantined"), "");
      EXPECT_GT(b.at("skipped_quarantined").get<int>(), 50);
      EXPECT_GT(b.at("distinct_findings").get<int>(), 0);
    } else {
      EXPECT_EQ(b.at("skipped_quarantined"), 0);
    }
  }
  // Its findings are kept, and (not run again) grouped as found.
  bool crash_group = false;
  for (const auto& g : report.at("groups")) {
    if (g.at("backend") != "ext.crashes") continue;
    crash_group = true;
    EXPECT_TRUE(g.at("fault_reproduced").is_null()) << g.dump();
  }
  EXPECT_TRUE(crash_group);
}

}  // namespace
}  // namespace driftcheck::testing
