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
#include "driftcheck/fuzz/oracle.hpp"
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
  expect_unusable(R"({"format": "driftcheck.exchange", "format_version": 3, "cases": []})",
                  "format version 3 (this driftcheck reads 1 and 2)");
  expect_unusable(R"({"format": "driftcheck.exchange", "format_version": 2, "cases": []})",
                  "\"new_kv\" is missing, not \"cache\", \"inputs\" or \"both\"");
  expect_unusable(R"({"format": "driftcheck.exchange", "format_version": 2, "new_kv": "kv", "cases": []})",
                  "\"new_kv\" is \"kv\", not \"cache\", \"inputs\" or \"both\"");
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
                  "format version \"1\" (this driftcheck reads 1 and 2)");
  expect_unusable(R"({"format": "driftcheck.exchange", "format_version": 1e300, "cases": []})",
                  "format version 1e+300 (this driftcheck reads 1 and 2)");
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

// --- The references' new-token source (--new-kv, manifest version 2) ---------------------------------------

// The first 24 attention cases of seed 13, exported once per test binary with each --new-kv: 7 of them (all
// fp8-cache cases with a prefill or extend sequence) have k_new / v_new other than their dequantised cache.
constexpr std::uint64_t kAttentionCases = 24;

fs::path attention_export(ExportNewKv n) {
  static const fs::path root = [] {
    const fs::path d = fs::temp_directory_path() / ("driftcheck_exchange_attn_" + std::to_string(::getpid()));
    fs::remove_all(d);
    for (ExportNewKv each : {ExportNewKv::kCache, ExportNewKv::kInputs, ExportNewKv::kBoth}) {
      ExportOptions o;
      o.ops = {OpKind::kAttention}, o.cases = kAttentionCases, o.seed = 13, o.new_kv = each;
      o.out_dir = d / std::string(export_new_kv_name(each));
      export_cases(o);
    }
    return d;
  }();
  return root / std::string(export_new_kv_name(n));
}

bool same_bytes(const io::Safetensors& file, const std::string& name, const Tensor& want) {
  const auto it = file.tensors.find(name);
  return it != file.tensors.end() && it->second.shape == want.shape() &&
         it->second.data->bytes == want.storage()->bytes;
}

// Each export holds, for each attention case, the references its manifest names, bit for bit those of
// reference_attention with that source; where the sources differ (new_kv_differs) only the chosen ones.
TEST(Exchange, NewKvChoosesTheReferencesAndTheManifestSaysWhich) {
  using Refs = std::map<std::string, std::string>;
  for (ExportNewKv n : {ExportNewKv::kCache, ExportNewKv::kInputs, ExportNewKv::kBoth}) {
    SCOPED_TRACE(std::string(export_new_kv_name(n)));
    const Manifest m = read_manifest(attention_export(n));
    EXPECT_EQ(m.format_version, 2);
    EXPECT_EQ(m.new_kv, n);
    EXPECT_TRUE(m.errors.empty());
    const auto raw = nlohmann::json::parse(slurp(attention_export(n) / "manifest.json"));
    EXPECT_EQ(raw["new_kv"], export_new_kv_name(n));
    ASSERT_EQ(m.cases.size(), kAttentionCases);
    std::uint64_t differing = 0, bits_differ = 0;
    for (const ManifestCase& mc : m.cases) {
      const Case c = load_case(m, mc);
      ASSERT_TRUE(c.has("k_new")) << mc.id;
      const Outputs cache = reference_attention(c, NewKv::kCache);
      const Outputs inputs = reference_attention(c, NewKv::kInputs);
      const io::Safetensors file = io::read_safetensors(m.dir / "cases" / (mc.id + ".safetensors"));
      const bool differs = new_kv_differs(c);
      differing += differs;
      Refs want = {{"cache", "reference."}, {"inputs", "reference."}};
      if (differs && n == ExportNewKv::kCache) want = {{"cache", "reference."}};
      if (differs && n == ExportNewKv::kInputs) want = {{"inputs", "reference."}};
      if (differs && n == ExportNewKv::kBoth) want["inputs"] = "reference_from_inputs.";
      EXPECT_EQ(mc.references, want) << mc.id;
      EXPECT_EQ(raw["cases"][&mc - m.cases.data()]["references"].get<Refs>(), want) << mc.id;
      for (const char* out : {"o", "lse"}) {
        for (const auto& [source, prefix] : mc.references)
          EXPECT_TRUE(same_bytes(file, prefix + out, (source == "cache" ? cache : inputs).at(out)))
              << mc.id << " " << source << " " << prefix << out;
        EXPECT_EQ(file.tensors.count(std::string("reference_from_inputs.") + out),
                  differs && n == ExportNewKv::kBoth ? 1u : 0u)
            << mc.id;
        bits_differ += differs && cache.at(out).storage()->bytes != inputs.at(out).storage()->bytes;
      }
    }
    EXPECT_EQ(differing, 7u);
    EXPECT_GE(bits_differ, 7u);  // the two references do differ there (o, and lse, of every such case)
  }
}

// A kernel that reads the new tokens from k_new / v_new, stood for by outputs written from the reference its
// manifest entry names for "inputs" (rounded to the output dtypes): check passes it when the backends file
// declares new_kv = "inputs" and fails exactly the cases whose references differ when it declares the cache.
// A version 1 manifest (the same export written before --new-kv: no new_kv, no references) still checks.
TEST(Exchange, CheckJudgesEachNewKvByItsOwnReference) {
  const fs::path dir = attention_export(ExportNewKv::kBoth).parent_path() / "check";
  fs::remove_all(dir);
  fs::create_directories(dir / "outputs");
  const Manifest m = read_manifest(attention_export(ExportNewKv::kBoth));
  std::uint64_t differing = 0;
  for (const ManifestCase& mc : m.cases) {
    Case c = load_case(m, mc);
    differing += mc.references.at("inputs") != "reference.";
    const io::Safetensors file = io::read_safetensors(m.dir / "cases" / (mc.id + ".safetensors"));
    for (const char* out : {"o", "lse"})
      c.tensor(out).copy_from(Tensor::view(file.tensors.at(mc.references.at("inputs") + out).data,
                                           {c.tensor(out).numel()}, {1}, 0)
                                  .to_f64());
    io::Safetensors outputs;
    for (std::size_t i = 0; i < mc.storage_names.size(); ++i) {
      const auto& st = c.tensor(mc.storage_views[i]).storage();
      outputs.tensors[mc.storage_names[i]] = {{st->numel()}, st};
    }
    io::write_safetensors(dir / "outputs" / (mc.id + ".safetensors"), outputs);
  }
  ASSERT_EQ(differing, 7u);
  const auto check_as = [&](const fs::path& cases, const std::string& new_kv) {
    const fs::path config = dir / (new_kv + ".toml");
    std::ofstream(config)
        << "format = \"driftcheck.backends\"\nversion = 1\n\n[[backend]]\nname = \"attn_files\"\n"
        << "op = \"attention\"\nnumerics = { output_roundings = 1, new_kv = \"" << new_kv << "\" }\n";
    CheckOptions o;
    o.cases_dir = cases, o.outputs_dir = dir / "outputs", o.out_dir = dir / ("report_" + new_kv);
    o.backend_config = config;
    return check_outputs(o);
  };
  const CheckResultSet inputs = check_as(attention_export(ExportNewKv::kBoth), "inputs");
  EXPECT_EQ(inputs.exit_code, 0) << (inputs.report.findings.empty() ? ""
                                                                    : inputs.report.findings.front().detail);
  EXPECT_EQ(the_backend(inputs).passed, static_cast<std::int64_t>(kAttentionCases));
  const CheckResultSet cache = check_as(attention_export(ExportNewKv::kBoth), "cache");
  EXPECT_EQ(cache.exit_code, 1);
  EXPECT_EQ(the_backend(cache).passed, static_cast<std::int64_t>(kAttentionCases - differing));

  // The cache export's manifest as version 1 wrote it.
  const fs::path v1 = dir / "v1";
  fs::copy(attention_export(ExportNewKv::kCache), v1, fs::copy_options::recursive);
  nlohmann::json j = nlohmann::json::parse(slurp(v1 / "manifest.json"));
  j["format_version"] = 1;
  j.erase("new_kv");
  for (auto& entry : j["cases"]) entry.erase("references");
  std::ofstream(v1 / "manifest.json") << j.dump();
  const Manifest old = read_manifest(v1);
  EXPECT_EQ(old.format_version, 1);
  EXPECT_EQ(old.new_kv, ExportNewKv::kCache);
  EXPECT_TRUE(old.errors.empty());
  for (const ManifestCase& mc : old.cases)
    EXPECT_EQ(mc.references, (std::map<std::string, std::string>{{"cache", "reference."}}));
  const CheckResultSet from_v1 = check_as(v1, "inputs");
  EXPECT_EQ(from_v1.exit_code, 0);
  EXPECT_EQ(the_backend(from_v1).passed, static_cast<std::int64_t>(kAttentionCases));

  // Version 2 entries whose references are malformed are skipped, one line each.
  j = nlohmann::json::parse(slurp(attention_export(ExportNewKv::kCache) / "manifest.json"));
  j["cases"][0]["references"] = {{"cache", "ref."}};
  j["cases"][1].erase("references");
  j["cases"][2]["references"] = {{"decode", "reference."}};
  const Manifest bad = parse_manifest(j.dump(), "dir/manifest.json");
  EXPECT_EQ(bad.cases.size(), kAttentionCases - 3);
  ASSERT_EQ(bad.errors.size(), 3u);
  EXPECT_EQ(
      bad.errors[0],
      "dir/manifest.json: case 0: \"references\": \"cache\": \"ref.\": expected \"cache\" or \"inputs\", "
      "each mapped to \"reference.\" or \"reference_from_inputs.\"");
  EXPECT_EQ(
      bad.errors[1],
      "dir/manifest.json: case 1: \"references\" is missing or not a non-empty object (version 2 attention "
      "cases)");
}

TEST(Exchange, ExportRefusesADirectoryWithAnExport) {
  const Exchange e = fresh_exchange("twice");
  ExportOptions o;
  o.cases = 1, o.out_dir = e.cases();
  EXPECT_THROW(export_cases(o), UsageError);
}

}  // namespace
}  // namespace driftcheck::fuzz
