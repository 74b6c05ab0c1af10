// C plugins (driftcheck/plugin.h): the example RMSNorm plugin passes a campaign and its planted bug is found;
// plugins that cannot be loaded are one-line errors naming the file; plugins that misbehave on a case get the
// verdict the oracle gives a built-in backend (error, guard_violation, input_modified); the dc_case a plugin
// sees has every storage whole, shared between the views that alias it, with each view's role.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "case_builders.hpp"
#include "driftcheck/device/plugin_backend.hpp"
#include "driftcheck/external/backends_file.hpp"
#include "driftcheck/fuzz/campaign.hpp"
#include "scratch_dir.hpp"

namespace driftcheck {
namespace {

namespace fs = std::filesystem;

std::string test_plugin(const std::string& variant) {
  return std::string(DRIFTCHECK_PLUGIN_DIR) + "/test_plugin_" + variant + ".so";
}

PluginOptions options(std::string config, std::string name = "", std::optional<Numerics> numerics = {}) {
  PluginOptions o;
  o.config = std::move(config), o.name = std::move(name), o.numerics = numerics;
  return o;
}

std::string slurp_text(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

fs::path fresh_dir(const std::string& name) {
  return testing::fresh_scratch_dir("plugin_test", name);
}

// A campaign over rmsnorm cases with the example plugin (configured with `config`) as the only backend.
reports::Report example_campaign(const std::string& config, const std::string& dir_name) {
  Registry reg;
  reg.add(load_plugin(DRIFTCHECK_EXAMPLE_PLUGIN, options(config)));
  fuzz::CampaignOptions o;
  o.ops = {OpKind::kRmsNorm};
  o.cases = 240;
  o.seed = 11;
  o.jobs = 2;
  o.out_dir = fresh_dir(dir_name);
  o.gen.large_shapes = false;
  o.shrink_seconds = 0;
  o.backends = &reg;
  reports::Report r = fuzz::run_campaign(o).report;
  fs::remove_all(o.out_dir);
  return r;
}

TEST(Plugin, ExamplePluginDeclaresItself) {
  const auto b = load_plugin(DRIFTCHECK_EXAMPLE_PLUGIN);
  EXPECT_EQ(b->name(), "plugin.example_rmsnorm");
  EXPECT_EQ(b->op(), OpKind::kRmsNorm);
  EXPECT_EQ(b->numerics().output_roundings, 1);
  EXPECT_NE(b->description().find("C99"), std::string_view::npos);
  const auto named = load_plugin(DRIFTCHECK_EXAMPLE_PLUGIN, options("", "ext.my_norm"));
  EXPECT_EQ(named->name(), "ext.my_norm");
}

TEST(Plugin, ExamplePluginPassesACampaign) {
  const reports::Report r = example_campaign("", "correct");
  EXPECT_EQ(r.exit_code, 0) << (r.findings.empty() ? "" : r.findings.front().detail);
  ASSERT_EQ(r.backends.size(), 1u);
  const auto& b = r.backends.front();
  EXPECT_GT(b.cases_run, 100);
  EXPECT_EQ(b.passed, b.cases_run);
  EXPECT_GT(b.unsupported, 0);  // residual and fp16/fp8 cases are declined, with the plugin's reason
  EXPECT_TRUE(r.findings.empty());
}

TEST(Plugin, ExamplePluginsPlantedBugIsFound) {
  const reports::Report r = example_campaign("planted_bug=stride_ignored", "planted");
  EXPECT_EQ(r.exit_code, 1);
  ASSERT_FALSE(r.findings.empty());
  // Reading rows as packed takes the next row's head and the poisoned padding between rows (NaN) instead.
  for (const auto& f : r.findings) {
    EXPECT_EQ(f.backend, "plugin.example_rmsnorm");
    EXPECT_TRUE(f.verdict == "beyond_tolerance" || f.verdict == "nan_mismatch") << f.verdict;
  }
}

void expect_load_error(const std::string& path, const std::string& mentions, const PluginOptions& o = {}) {
  try {
    load_plugin(path, o);
    ADD_FAILURE() << path << " loaded; expected: " << mentions;
  } catch (const PluginError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.starts_with("plugin " + path + ": ")) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_NE(what.find(mentions), std::string::npos) << what;
  }
}

TEST(Plugin, PluginsThatCannotBeLoadedAreOneLineErrors) {
  expect_load_error("/nonexistent/p.so", "cannot be loaded");
  expect_load_error(test_plugin("no_entry"), "exports no function driftcheck_plugin");
  expect_load_error(test_plugin("abi_9"),
                    "built for plugin ABI version 9, this driftcheck loads versions 1 to 3");
  expect_load_error(test_plugin("bad_query"), "query_supports applies to attention plugins only");
  expect_load_error(test_plugin("null_run"), "supports and run must not be NULL");
  expect_load_error(test_plugin("create_fails"), "create failed: cannot open device for config 'x=1'",
                    options("x=1"));
  expect_load_error(DRIFTCHECK_EXAMPLE_PLUGIN, "unknown plugin_config 'planted_bug=nosuch'",
                    options("planted_bug=nosuch"));
  Numerics wider;
  wider.output_roundings = 3;
  expect_load_error(
      DRIFTCHECK_EXAMPLE_PLUGIN,
      "numerics in the backends file disagree with the ones the plugin declares: output_roundings "
      "(the file says 3, the plugin 1)",
      options("", "", wider));
  // Every numerics term a backends file can declare is in the ABI (version 2's numerics2 carries the
  // attention terms version 1 lacked): a disagreement on any of them names it.
  const Numerics declared = load_plugin(DRIFTCHECK_EXAMPLE_PLUGIN, options(""))->numerics();
  Numerics prefill = declared, inputs = declared, mfma = declared, nondet = declared;
  prefill.kv_dequant_rounded_prefill = true;
  inputs.new_kv = NewKv::kInputs;
  mfma.fp8_mfma_decode = true;
  nondet.deterministic = false;
  expect_load_error(DRIFTCHECK_EXAMPLE_PLUGIN,
                    "kv_dequant_rounded_prefill (the file says true, the plugin false)",
                    options("", "", prefill));
  expect_load_error(DRIFTCHECK_EXAMPLE_PLUGIN, "new_kv (the file says inputs, the plugin cache)",
                    options("", "", inputs));
  expect_load_error(DRIFTCHECK_EXAMPLE_PLUGIN, "fp8_mfma_decode (the file says true, the plugin false)",
                    options("", "", mfma));
  expect_load_error(DRIFTCHECK_EXAMPLE_PLUGIN, "deterministic (the file says false, the plugin true)",
                    options("", "", nondet));
}

// A plugin built against version 1's header (tests/plugins/v1) loads and runs, its version-2 fields taken as
// their zero defaults (read past its struct, they would be whatever follows it in the library).
TEST(Plugin, VersionOnePluginsStillLoad) {
  const auto b = load_plugin(test_plugin("abi_1"));
  EXPECT_EQ(b->name(), "plugin.test_concat");
  const Numerics n = b->numerics();
  EXPECT_FALSE(n.kv_dequant_rounded_prefill || n.fp8_mfma_decode);
  EXPECT_EQ(n.new_kv, NewKv::kCache);
  EXPECT_EQ(
      fuzz::check_case(*b, builders::concat_case(4, 24, 40, DType::kBF16, 3, {3, 2, 5})).evaluation.verdict,
      fuzz::Verdict::kPass);
}

// A plugin built against version 2's header (tests/plugins/v2) loads and runs; version 3's reduction shape is
// the default (nothing declared, read past its struct it would be whatever follows it), and a backends file's
// reduction is not held against a plugin that cannot declare one.
TEST(Plugin, VersionTwoPluginsStillLoad) {
  const auto b = load_plugin(test_plugin("abi_2"));
  EXPECT_EQ(b->name(), "plugin.test_concat");
  const Numerics n = b->numerics();
  EXPECT_EQ(n.reduction.threads, ReductionShape{}.threads);
  EXPECT_EQ(n.reduction.vec, ReductionShape{}.vec);
  EXPECT_EQ(n.reduction.warp, ReductionShape{}.warp);
  EXPECT_EQ(
      fuzz::check_case(*b, builders::concat_case(4, 24, 40, DType::kBF16, 3, {3, 2, 5})).evaluation.verdict,
      fuzz::Verdict::kPass);
  Numerics file = n;
  file.reduction = {256, 4, 32};
  EXPECT_NO_THROW(load_plugin(test_plugin("abi_2"), options("", "", file)));
}

// Version 3: the reduction shape (numerics3), read into Numerics::reduction; a backends file that says
// otherwise names the term, and a shape with a zero among non-zero fields is refused before any case.
TEST(Plugin, VersionThreeDeclaresTheReductionShape) {
  const auto b = load_plugin(test_plugin("reduction"));
  const Numerics n = b->numerics();
  EXPECT_EQ(n.reduction.threads, 256);
  EXPECT_EQ(n.reduction.vec, 4);
  EXPECT_EQ(n.reduction.warp, 32);
  EXPECT_NO_THROW(load_plugin(test_plugin("reduction"), options("", "", n)));
  Numerics other = n;
  other.reduction.vec = 8;
  expect_load_error(
      test_plugin("reduction"),
      "reduction (the file says threads 256 vec 8 warp 32, the plugin threads 256 vec 4 warp 32)",
      options("", "", other));
  expect_load_error(test_plugin("bad_reduction"),
                    "numerics3: reduction_threads 256, reduction_vec 0, reduction_warp 32: all zero");
}

// Version 2's declarations: the attention numerics terms, and query shapes the kernel does not run, declined
// before its supports() is called (whose answer would say it was asked).
TEST(Plugin, VersionTwoDeclaresNumericsAndQueryShapes) {
  const auto b = load_plugin(test_plugin("attn_decode"));
  EXPECT_EQ(b->op(), OpKind::kAttention);
  const Numerics n = b->numerics();
  EXPECT_TRUE(n.kv_dequant_rounded_prefill);
  EXPECT_FALSE(n.fp8_mfma_decode);
  EXPECT_EQ(n.new_kv, NewKv::kInputs);
  EXPECT_NE(b->supports_summary().find("decode only; head_dim 32/64; head_dim <= 64"), std::string::npos)
      << b->supports_summary();
  const Support prefill = b->supports(builders::attention_case(builders::one_head(DType::kBF16, 3, 20), 1));
  EXPECT_EQ(
      prefill.reason,
      "a prefill/extend sequence (query length > 1; decode_only): plugin.test_attention declares otherwise "
      "(query_supports)");
  builders::AttentionSpec wide = builders::one_head(DType::kBF16, 1, 20);
  wide.params.head_dim = 128;
  EXPECT_NE(b->supports(builders::attention_case(wide, 1)).reason.find("head_dim 128 (head_dims 32/64)"),
            std::string::npos);
  // Within the declaration the plugin is asked.
  EXPECT_EQ(b->supports(builders::attention_case(builders::one_head(DType::kBF16, 1, 20), 1)).reason,
            "the plugin's supports() was asked");
  // A backends file that repeats the plugin's numerics loads; one that differs names the field.
  Numerics same = n;
  EXPECT_NO_THROW(load_plugin(test_plugin("attn_decode"), options("", "", same)));
  Numerics other = n;
  other.new_kv = NewKv::kCache;
  expect_load_error(test_plugin("attn_decode"), "new_kv (the file says cache, the plugin inputs)",
                    options("", "", other));
}

fuzz::Verdict verdict_of(const std::string& variant, Case c, std::string* detail = nullptr) {
  const auto b = load_plugin(test_plugin(variant));
  const fuzz::CheckResult r = fuzz::check_case(*b, std::move(c));
  if (!r.support.ok) {
    if (detail) *detail = r.support.reason;
    return fuzz::Verdict::kUnsupported;
  }
  if (detail) *detail = r.evaluation.detail;
  return r.evaluation.verdict;
}

TEST(Plugin, MisbehavingPluginsGetVerdicts) {
  const builders::Layout padded{3, 2, 5};
  const Case c = builders::concat_case(4, 24, 40, DType::kBF16, 3, padded);
  std::string detail;
  EXPECT_EQ(verdict_of("correct", c.clone()), fuzz::Verdict::kPass);
  EXPECT_EQ(verdict_of("run_fails", c.clone(), &detail), fuzz::Verdict::kError);
  EXPECT_EQ(detail, "CUDA error: an illegal memory access was encountered");  // first line only
  EXPECT_EQ(verdict_of("guard_write", c.clone()), fuzz::Verdict::kGuardViolation);
  EXPECT_EQ(verdict_of("input_write", c.clone()), fuzz::Verdict::kInputModified);
  EXPECT_EQ(verdict_of("correct", builders::concat_case(2, 8, 8, DType::kF64, 3), &detail),
            fuzz::Verdict::kUnsupported);
  EXPECT_EQ(detail, "fp64: not in this test plugin");
}

// Common mistakes in writing outputs get a hint at the front of the verdict's detail: a kernel that returns
// without writing (as one that returns its result would), and one that writes float32 values into a bf16
// storage (a bf16 buffer taken for float*). The verdict is the oracle's as before.
TEST(Plugin, OutputWritingMistakesAreNamed) {
  const Case c = builders::concat_case(2, 24, 40, DType::kBF16, 3, {3, 2, 5});
  std::string detail;
  const fuzz::Verdict unwritten = verdict_of("unwritten", c.clone(), &detail);
  EXPECT_TRUE(fuzz::is_failure(unwritten)) << fuzz::verdict_name(unwritten);
  EXPECT_TRUE(detail.starts_with(
      "output out was never written (the kernel returned its result instead of writing into out?); "))
      << detail;
  const fuzz::Verdict floats = verdict_of("float32_out", c.clone(), &detail);
  EXPECT_TRUE(fuzz::is_failure(floats)) << fuzz::verdict_name(floats);
  EXPECT_TRUE(detail.starts_with("out looks like float32 values written into a bf16 view")) << detail;
  // A correct kernel, and one whose failure is something else (a write past the view), get no hint.
  EXPECT_EQ(verdict_of("correct", c.clone(), &detail), fuzz::Verdict::kPass);
  EXPECT_EQ(verdict_of("guard_write", c.clone(), &detail), fuzz::Verdict::kGuardViolation);
  EXPECT_TRUE(detail.starts_with("write outside every output view")) << detail;
}

TEST(Plugin, CaseHandsOverWholeStoragesWithAliasingAndRoles) {
  Case c = builders::rmsnorm_case(3, 16, DType::kBF16, {1e-6, WeightMode::kPlain, true}, 5, {2, 1, 4});
  c.tensors["y"] = c.tensor("x");  // in place: y aliases x
  const PluginCase abi(c, /*with_data=*/true);
  const dc_case* d = abi.get();
  ASSERT_EQ(d->num_tensors, 4);
  EXPECT_EQ(d->num_storages, 3);  // residual, w, x (= y)
  const dc_tensor* x = dc_find_tensor(d, "x");
  const dc_tensor* y = dc_find_tensor(d, "y");
  const dc_tensor* r = dc_find_tensor(d, "residual");
  ASSERT_TRUE(x && y && r);
  EXPECT_EQ(dc_find_tensor(d, "nosuch"), nullptr);
  EXPECT_EQ(x->storage, y->storage);
  EXPECT_EQ(x->role, DC_ROLE_INPUT);
  EXPECT_EQ(y->role, DC_ROLE_OUTPUT);
  EXPECT_EQ(r->role, DC_ROLE_INPUT | DC_ROLE_OUTPUT);
  EXPECT_EQ(x->strides[0], 18);
  EXPECT_EQ(x->offset, c.tensor("x").offset());
  const dc_storage& s = d->storages[x->storage];
  EXPECT_EQ(s.numel, c.tensor("x").storage()->numel());  // the whole storage, guard bands included
  EXPECT_EQ(s.data, c.tensor("x").storage()->bytes.data());
  EXPECT_EQ(dc_element(d, x, 17), c.tensor("x").storage()->bytes.data() + 2 * c.tensor("x").index({1, 1}));
  EXPECT_EQ(d->params.residual, 1);
  EXPECT_DOUBLE_EQ(d->params.eps, 1e-6);
  EXPECT_EQ(PluginCase(c, false).get()->storages[0].data, nullptr);
}

// A backends file with one plugin entry (`extra` appended to the [[backend]] table).
fs::path plugin_file(const std::string& name, const std::string& extra) {
  const fs::path dir = fresh_dir("toml_" + name);
  fs::create_directories(dir);
  std::ofstream(dir / "backends.toml")
      << "format = \"driftcheck.backends\"\nversion = 1\n[[backend]]\nname = \"" << name
      << "\"\nop = \"rmsnorm\"\nplugin = \"" << DRIFTCHECK_EXAMPLE_PLUGIN << "\"\n"
      << extra;
  return dir / "backends.toml";
}

TEST(Plugin, BackendsFileEntriesLoadPlugins) {
  Registry reg;
  external::register_backends_files(
      reg, {plugin_file("norm",
                        "plugin_config = \"planted_bug=stride_ignored\"\n[backend.supports]\n"
                        "dtypes = [\"bf16\"]\n")
                .string()});
  const Backend* b = reg.find("ext.norm");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->kind(), BackendKind::kExternal);
  EXPECT_EQ(b->numerics().output_roundings, 1);  // the plugin's own declaration
  EXPECT_NE(b->origin().find("backends.toml:3"), std::string::npos) << b->origin();
  const Support s = b->supports(builders::rmsnorm_case(2, 8, DType::kF32, {}, 1));
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("ext.norm"), std::string::npos) << s.reason;  // the static supports said no
  const Case padded = builders::rmsnorm_case(4, 32, DType::kBF16, {}, 1, {5, 0, 4});
  EXPECT_EQ(fuzz::check_case(*b, padded.clone()).evaluation.verdict, fuzz::Verdict::kBeyondTolerance)
      << "plugin_config reached the plugin: its planted bug reads the padding";
}

void expect_file_error(const fs::path& file, const std::string& mentions) {
  Registry reg;
  try {
    external::register_backends_files(reg, {file.string()});
    ADD_FAILURE() << "loaded; expected: " << mentions;
  } catch (const external::BackendFileError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.starts_with(file.string() + ":3: ext.")) << what;
    EXPECT_NE(what.find(mentions), std::string::npos) << what;
  }
}

TEST(Plugin, BackendsFileEntriesThatDisagreeWithThePluginAreErrors) {
  expect_file_error(plugin_file("wider", "numerics = { output_roundings = 2 }\n"),
                    "numerics in the backends file disagree");
  expect_file_error(plugin_file("badcfg", "plugin_config = \"nosuch\"\n"), "unknown plugin_config 'nosuch'");
  std::string concat_entry = slurp_text(plugin_file("concat", ""));
  concat_entry.replace(concat_entry.find("rmsnorm"), 7, "concat");
  const fs::path f = fresh_dir("toml_concat2");
  fs::create_directories(f);
  std::ofstream(f / "backends.toml") << concat_entry;
  expect_file_error(f / "backends.toml", "the plugin runs rmsnorm, the file says concat");
}

// The driftcheck binary with --plugin: a correct plugin's campaign exits 0, a bad plugin is exit 2, one line.
int driftcheck(const std::string& args, std::string* err = nullptr) {
  const fs::path log = fresh_dir("cli").string() + ".err";
  const std::string cmd = std::string(DRIFTCHECK_BIN) + " " + args + " >/dev/null 2>" + log.string();
  const int status = std::system(cmd.c_str());
  if (err) *err = slurp_text(log);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(Plugin, CommandLineLoadsPlugins) {
  const std::string out = fresh_dir("cli_campaign").string();
  EXPECT_EQ(driftcheck(std::string("fuzz --plugin ") + DRIFTCHECK_EXAMPLE_PLUGIN +
                       " --backend 'plugin.*' --op rmsnorm --cases 40 --shrink-seconds 0 --out " + out),
            0);
  fs::remove_all(out);
  // A plugin that crashes on some cases: isolated, each crash is a verdict and the campaign completes.
  EXPECT_EQ(driftcheck("fuzz --plugin " + test_plugin("crashes") +
                       " --isolate 'plugin.*' --op concat --cases 24 --shrink-seconds 0 --out " + out),
            1);
  const std::string report = slurp_text(fs::path(out) / "report.json");
  EXPECT_NE(report.find("\"crash\""), std::string::npos);
  EXPECT_NE(report.find("\"passed\": "), std::string::npos);
  fs::remove_all(out);
  std::string err;
  EXPECT_EQ(driftcheck("list --plugin " + test_plugin("abi_9"), &err), 2);
  EXPECT_EQ(err, "driftcheck: bad plugin: plugin " + test_plugin("abi_9") +
                     ": built for plugin ABI version 9, this driftcheck loads versions 1 to 3\n");
}

// A backends file with the example plugin twice (correct and planted), as docs/PLUGIN.md declares them.
fs::path example_pair_file(const std::string& name) {
  const fs::path dir = fresh_dir(name);
  fs::create_directories(dir);
  std::ofstream(dir / "pair.toml") << "format = \"driftcheck.backends\"\nversion = 1\n"
                                   << "[[backend]]\nname = \"c_norm\"\nop = \"rmsnorm\"\nplugin = \""
                                   << DRIFTCHECK_EXAMPLE_PLUGIN << "\"\n"
                                   << "[[backend]]\nname = \"c_norm_planted\"\nop = \"rmsnorm\"\nplugin = \""
                                   << DRIFTCHECK_EXAMPLE_PLUGIN
                                   << "\"\nplugin_config = \"planted_bug=stride_ignored\"\n";
  return dir / "pair.toml";
}

// The backends of a campaign's report.json, by name.
std::vector<std::string> report_backends(const fs::path& out) {
  std::vector<std::string> names;
  const auto report = nlohmann::json::parse(slurp_text(out / "report.json"));
  for (const auto& b : report.at("backends")) names.push_back(b.at("name").get<std::string>());
  return names;
}

TEST(Plugin, PluginOrBackendsFileAloneJudgesOnlyTheKernelsItNames) {
  // Without --backend, the built-in twins would run too (and, in a short run, some run zero cases: exit 1).
  const fs::path out = fresh_dir("alone");
  EXPECT_EQ(driftcheck(std::string("fuzz --plugin ") + DRIFTCHECK_EXAMPLE_PLUGIN +
                       " --cases 40 --shrink-seconds 0 -q --out " + out.string()),
            0);
  const auto names = report_backends(out);
  EXPECT_NE(std::find(names.begin(), names.end(), "plugin.example_rmsnorm"), names.end());
  for (const auto& n : names) EXPECT_FALSE(n.starts_with("cpu.")) << n << " ran beside the plugin";
  fs::remove_all(out);
  const fs::path file = example_pair_file("alone_file");
  EXPECT_EQ(driftcheck("fuzz --backends " + file.string() + " --cases 60 --shrink-seconds 0 -q --out " +
                       out.string()),
            1);  // the planted entry is found
  const auto file_names = report_backends(out);
  for (const auto& n : file_names) EXPECT_TRUE(n.starts_with("ext.c_norm")) << n << " is not in the file";
  EXPECT_NE(std::find(file_names.begin(), file_names.end(), "ext.c_norm_planted"), file_names.end());
  fs::remove_all(out);
}

TEST(Plugin, OptionsNeverSwallowTheBundle) {
  const fs::path file = example_pair_file("replay_file"), out = fresh_dir("replay_campaign");
  ASSERT_EQ(
      driftcheck("fuzz --backends " + file.string() +
                 " --backend ext.c_norm_planted --cases 60 --shrink-seconds 2 -q --out " + out.string()),
      1);
  fs::path bundle;
  for (const auto& e : fs::directory_iterator(out / "findings")) bundle = e.path();
  ASSERT_FALSE(bundle.empty());
  std::string err;
  // The bundle after a repeatable option is the bundle, not a second backends file or plugin.
  EXPECT_EQ(driftcheck("replay --backends " + file.string() + " " + bundle.string(), &err), 1) << err;
  EXPECT_EQ(driftcheck(std::string("replay --plugin ") + DRIFTCHECK_EXAMPLE_PLUGIN + " " + bundle.string() +
                           " --backend plugin.example_rmsnorm",
                       &err),
            0)
      << err;  // the correct kernel passes the planted bug's case
  EXPECT_EQ(driftcheck(
                "replay --backends " + file.string() + " --backends " + file.string() + " " + bundle.string(),
                &err),
            2);  // the same file twice declares ext.c_norm twice
  EXPECT_NE(err.find("already registered"), std::string::npos) << err;
  EXPECT_EQ(driftcheck("replay --backends " + bundle.string(), &err), 2);
  EXPECT_NE(err.find("is a directory, not a backends file"), std::string::npos) << err;
  fs::remove_all(out);
}

}  // namespace
}  // namespace driftcheck
