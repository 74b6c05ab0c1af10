// Exchange files: `export` then a kernel elsewhere then `check`. The NumPy consumer of examples/exchange
// passes and its planted bug is found; missing, truncated or mismatched outputs and manifests that disagree
// with their files are one-line errors naming the file, exit 2, with every other case still judged;
// guard-band and input checks apply to returned storages; a consumer can decline a case or report its
// kernel's error.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/bundle.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "driftcheck/fuzz/exchange.hpp"
#include "driftcheck/io/safetensors.hpp"
#include "driftcheck/reference/reference.hpp"

namespace driftcheck::fuzz {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kCases = 48;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A directory per test with an export of kCases rmsnorm cases in it (exported once per test binary).
struct Exchange {
  fs::path dir;
  fs::path cases() const { return dir / "cases"; }
  fs::path outputs() const { return dir / "outputs"; }
};

Exchange fresh_exchange(const std::string& name) {
  static const fs::path exported = [] {
    const fs::path d = fs::temp_directory_path() / ("driftcheck_exchange_test_" + std::to_string(::getpid()));
    fs::remove_all(d);
    ExportOptions o;
    o.ops = {OpKind::kRmsNorm}, o.cases = kCases, o.seed = 3, o.out_dir = d / "export";
    export_cases(o);
    return d;
  }();
  Exchange e{exported / name};
  fs::remove_all(e.dir);
  fs::create_directories(e.dir);
  fs::copy(exported / "export", e.cases(), fs::copy_options::recursive);
  return e;
}

void run_consumer(const Exchange& e, const std::string& flags = "") {
  const std::string cmd = std::string(DRIFTCHECK_PYTHON) + " " + DRIFTCHECK_EXAMPLES_DIR +
                          "/exchange/numpy_consumer.py " + e.cases().string() + " " + e.outputs().string() +
                          " " + flags + " 2>/dev/null";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd;
}

CheckResultSet check(const Exchange& e) {
  CheckOptions o;
  o.cases_dir = e.cases(), o.outputs_dir = e.outputs(), o.out_dir = e.dir / "report";
  o.backend_config = std::string(DRIFTCHECK_EXAMPLES_DIR) + "/exchange/numpy_rmsnorm.toml";
  return check_outputs(o);
}

const reports::BackendReport& the_backend(const CheckResultSet& r) {
  EXPECT_EQ(r.report.backends.size(), 1u);
  return r.report.backends.front();
}

TEST(Exchange, CorrectConsumerPasses) {
  const Exchange e = fresh_exchange("correct");
  run_consumer(e);
  const CheckResultSet r = check(e);
  EXPECT_EQ(r.exit_code, 0) << (r.report.findings.empty() ? "" : r.report.findings.front().detail);
  EXPECT_EQ(the_backend(r).name, "ext.numpy_rmsnorm_files");
  EXPECT_EQ(the_backend(r).cases_run, static_cast<std::int64_t>(kCases));
  EXPECT_EQ(the_backend(r).passed, static_cast<std::int64_t>(kCases));
  EXPECT_TRUE(fs::exists(e.dir / "report" / "report.json"));
}

TEST(Exchange, ManifestGivesEveryViewItsLayoutAndRole) {
  const Exchange e = fresh_exchange("manifest");
  const auto m = nlohmann::json::parse(slurp(e.cases() / "manifest.json"));
  EXPECT_EQ(m["format"], "driftcheck.exchange");
  std::set<std::string> roles;
  for (const auto& entry : m["cases"]) {
    const auto& c = entry["case"];
    for (const auto& [name, t] : c["tensors"].items()) {
      const bool in = std::count(c["inputs"].begin(), c["inputs"].end(), name) > 0;
      const bool out = std::count(c["outputs"].begin(), c["outputs"].end(), name) > 0;
      EXPECT_EQ(t["role"], in && out ? "in_place" : out ? "output" : "input") << name;
      roles.insert(t["role"].get<std::string>());
      for (const char* key : {"storage", "dtype", "shape", "strides", "offset"}) EXPECT_TRUE(t.contains(key));
    }
    EXPECT_EQ(entry["replay"].get<std::string>().find("driftcheck replay --seed 3 --case "), 0u);
  }
  EXPECT_EQ(roles, (std::set<std::string>{"input", "output", "in_place"}));  // residual cases are drawn
}

TEST(Exchange, PlantedBugIsFoundWithABundle) {
  const Exchange e = fresh_exchange("planted");
  run_consumer(e, "--planted-bug eps_outside");
  const CheckResultSet r = check(e);
  EXPECT_EQ(r.exit_code, 1);
  ASSERT_FALSE(r.report.findings.empty());
  for (const auto& f : r.report.findings) {
    EXPECT_EQ(f.verdict, "beyond_tolerance");
    EXPECT_NE(f.replay.find("--case"), std::string::npos);
    const Bundle b = read_bundle(e.dir / "report" / f.bundle);  // replayable on any built-in backend
    EXPECT_EQ(b.pristine.index, f.case_index);
  }
}

// Every line of `errors` that names `file`.
bool mentions(const std::vector<std::string>& errors, const std::string& file, const std::string& what) {
  for (const auto& line : errors)
    if (line.find(file) != std::string::npos && line.find(what) != std::string::npos &&
        line.find('\n') == std::string::npos)
      return true;
  return false;
}

TEST(Exchange, BadOutputsAreOneLineErrorsAndTheOtherCasesAreStillJudged) {
  const Exchange e = fresh_exchange("bad_outputs");
  run_consumer(e);
  fs::remove(e.outputs() / "000001.safetensors");
  const std::string whole = slurp(e.outputs() / "000002.safetensors");
  std::ofstream(e.outputs() / "000002.safetensors", std::ios::binary) << whole.substr(0, whole.size() - 3);
  // 000003: a returned storage of the wrong dtype; 000004: a tensor that is no storage of the case.
  io::Safetensors three = io::read_safetensors(e.outputs() / "000003.safetensors");
  auto& x = three.tensors.begin()->second;
  x.data =
      std::make_shared<Storage>(x.data->dtype == DType::kF32 ? DType::kF16 : DType::kF32, x.data->numel());
  io::write_safetensors(e.outputs() / "000003.safetensors", three);
  io::Safetensors four = io::read_safetensors(e.outputs() / "000004.safetensors");
  four.tensors["stray"] = four.tensors.begin()->second;
  io::write_safetensors(e.outputs() / "000004.safetensors", four);

  const CheckResultSet r = check(e);
  EXPECT_EQ(r.exit_code, 2);
  const auto& errors = r.report.errors;
  EXPECT_TRUE(mentions(errors, "000001.safetensors", "missing: no outputs for case 000001"));
  EXPECT_TRUE(mentions(errors, "000002.safetensors", "outside the"));  // the last tensor runs past the end
  EXPECT_TRUE(mentions(errors, "000003.safetensors", "the manifest says"));
  EXPECT_TRUE(mentions(errors, "000004.safetensors", "\"stray\", which is no storage of case 000004"));
  EXPECT_EQ(the_backend(r).cases_run, static_cast<std::int64_t>(kCases) - 4);  // the rest is judged
  EXPECT_EQ(the_backend(r).passed, static_cast<std::int64_t>(kCases) - 4);
}

TEST(Exchange, ManifestsThatDisagreeWithTheirFilesAreErrors) {
  const Exchange e = fresh_exchange("bad_manifest");
  run_consumer(e);
  nlohmann::json m = nlohmann::json::parse(slurp(e.cases() / "manifest.json"));
  auto& cases = m["cases"];
  cases[0]["case"]["storages"][0]["numel"] = cases[0]["case"]["storages"][0]["numel"].get<int>() + 1;
  cases[1]["id"] = "../../etc/passwd";
  cases[2]["case"]["op"] = "concat";
  fs::remove(e.cases() / "cases" / "000003.safetensors");
  std::ofstream(e.cases() / "manifest.json") << m.dump();

  const CheckResultSet r = check(e);
  EXPECT_EQ(r.exit_code, 2);
  const auto& errors = r.report.errors;
  EXPECT_TRUE(mentions(errors, "manifest.json: case 1", "is not [A-Za-z0-9_-]"));
  EXPECT_TRUE(mentions(errors, "manifest.json: case 2", "disagrees with the spec's rmsnorm"));
  EXPECT_TRUE(mentions(errors, "000003.safetensors", "cannot be read"));
  EXPECT_TRUE(mentions(errors, "000000", "nbytes"));  // numel no longer matches nbytes
  EXPECT_EQ(the_backend(r).cases_run, static_cast<std::int64_t>(kCases) - 4);
}

// Outputs written in C++ from the reference (a correct kernel), then broken one way at a time.
void write_exact_outputs(const Exchange& e, const std::string& id,
                         const std::function<void(io::Safetensors&, const Case&)>& tamper) {
  const Manifest m = read_manifest(e.cases());
  const auto mc = std::find_if(m.cases.begin(), m.cases.end(), [&](const auto& c) { return c.id == id; });
  Case c = load_case(m, *mc);
  const Outputs ref = reference(c);
  for (const auto& name : op_signature(c).outputs) c.tensor(name).copy_from(ref.at(name).to_f64());
  io::Safetensors out;
  for (std::size_t i = 0; i < mc->storage_names.size(); ++i) {
    const auto& s = c.tensor(mc->storage_views[i]).storage();
    out.tensors[mc->storage_names[i]] = {{s->numel()}, s};
  }
  tamper(out, c);
  io::write_safetensors(e.outputs() / (id + ".safetensors"), out);
}

TEST(Exchange, StorageChecksApplyToReturnedStorages) {
  const Exchange e = fresh_exchange("storage_checks");
  run_consumer(e);
  write_exact_outputs(e, "000005", [](io::Safetensors&, const Case&) {});
  write_exact_outputs(e, "000006", [](io::Safetensors& out, const Case& c) {
    // The byte right after the last element of y: a guard band.
    const Tensor& y = c.tensor("y");
    y.storage()->store_bits(y.index({y.size(0) - 1, y.size(1) - 1}) + 1, 0x3c);
    (void)out;
  });
  write_exact_outputs(e, "000007", [](io::Safetensors&, const Case& c) {
    c.tensor("w").storage()->store_bits(c.tensor("w").offset(), 0x3c);  // an input that is not in place
  });
  write_exact_outputs(e, "000008", [](io::Safetensors& out, const Case&) {
    out.tensors.clear();
    out.metadata["driftcheck.error"] = "CUDA error: an illegal memory access was encountered";
  });
  write_exact_outputs(e, "000009", [](io::Safetensors& out, const Case&) {
    out.tensors.clear();
    out.metadata["driftcheck.unsupported"] = "hidden 8192: the kernel's tile is 4096";
  });
  const CheckResultSet r = check(e);
  EXPECT_EQ(r.exit_code, 1);
  const auto& b = the_backend(r);
  EXPECT_EQ(b.failures_by_verdict.at("guard_violation"), 1);
  EXPECT_EQ(b.failures_by_verdict.at("input_modified"), 1);
  EXPECT_EQ(b.failures_by_verdict.at("error"), 1);
  EXPECT_EQ(b.unsupported, 1);
  ASSERT_FALSE(b.top_unsupported.empty());
  EXPECT_EQ(b.top_unsupported.front().reason, "hidden 8192: the kernel's tile is 4096");
  EXPECT_EQ(b.passed, static_cast<std::int64_t>(kCases) - 4);
}

// parse_manifest of `text` as dir/manifest.json throws an ExchangeError saying `what` about that file.
void expect_unusable(const std::string& text, const std::string& what) {
  try {
    parse_manifest(text, "dir/manifest.json");
    ADD_FAILURE() << "parsed: " << text;
  } catch (const ExchangeError& e) {
    EXPECT_EQ(std::string(e.what()), "dir/manifest.json: " + what);
  }
}

TEST(Exchange, UnusableManifestsThrowNamingTheFile) {
  const fs::path f = "dir/manifest.json";
  expect_unusable("{", "not a JSON object");
  expect_unusable(R"({"format": "driftcheck.report", "format_version": 1})",
                  "format is not driftcheck.exchange");
  expect_unusable(R"({"format": "driftcheck.exchange", "format_version": 2, "cases": []})",
                  "format version 2 (this driftcheck reads 1)");
  expect_unusable(R"({"format": "driftcheck.exchange", "format_version": 1, "cases": {}})",
                  "\"cases\" is missing or not an array");
  const Manifest m =
      parse_manifest(R"({"format": "driftcheck.exchange", "format_version": 1, "cases": [7]})", f);
  ASSERT_EQ(m.errors.size(), 1u);
  EXPECT_EQ(m.errors.front(), "dir/manifest.json: case 0: not an object");
}

// libFuzzer run 2 (fuzz_exchange_manifest): a duplicate "format" whose last value is a number made
// json::value throw nlohmann's type_error out of parse_manifest (std::terminate instead of exit 2). The crash
// input, byte for byte, then fields of the wrong type or range: each one an ExchangeError or one error line
// naming it.
TEST(Exchange, ManifestFieldsOfTheWrongTypeAreNamedNeverThrownAsJsonErrors) {
  const fs::path f = "dir/manifest.json";
  expect_unusable(
      R"({"cases":[{"case":{"in_dtype":"fp16","base_ofeed":4440503804641499250}}],"command":"driftchecj expor2 --trueseed 1","format":"driftcheck.exch\nge","format_versiommand":"driftchecj expor2 --trueseed 1","format":2,"tool_version":"0.1.0"})",
      "format is not driftcheck.exchange");
  expect_unusable(R"({"format": "driftcheck.exchange", "format_version": "1", "cases": []})",
                  "format version \"1\" (this driftcheck reads 1)");
  expect_unusable(R"({"format": "driftcheck.exchange", "format_version": 1e300, "cases": []})",
                  "format version 1e+300 (this driftcheck reads 1)");
  const Manifest m = parse_manifest(
      R"({"format": "driftcheck.exchange", "format_version": 1, "cases": [{"id": "a", "seed": "1"}, )"
      R"({"id": "b", "seed": 1, "index": 1.5}, {"id": 3}]})",
      f);
  EXPECT_EQ(m.errors,
            (std::vector<std::string>{
                "dir/manifest.json: case 0: field 'seed': expected a non-negative integer, got string",
                "dir/manifest.json: case 1: field 'index': expected a non-negative integer, got number",
                "dir/manifest.json: case 2: field 'id': expected a string, got number"}));
}

TEST(Exchange, ExportRefusesADirectoryWithAnExport) {
  const Exchange e = fresh_exchange("twice");
  ExportOptions o;
  o.cases = 1, o.out_dir = e.cases();
  EXPECT_THROW(export_cases(o), UsageError);
}

}  // namespace
}  // namespace driftcheck::fuzz
