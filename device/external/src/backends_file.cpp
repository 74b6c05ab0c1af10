// The backends file loader (docs/PROTOCOL.md section 6): every key checked, every problem one line naming the
// file and line.
#include "driftcheck/external/backends_file.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <span>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "driftcheck/device/numerics_terms.hpp"
#include "driftcheck/device/one_line.hpp"

namespace driftcheck::external {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kFormat = "driftcheck.backends";
constexpr std::int64_t kFormatVersion = 1;

// One file being read: every error names it and the line of the node at fault.
class Reader {
 public:
  Reader(fs::path file, bool require_runner) : file_(std::move(file)), require_runner_(require_runner) {}
  // False for `driftcheck check`, which judges outputs written elsewhere: an entry may then have no runner.
  bool require_runner() const { return require_runner_; }

  [[noreturn]] void fail(const toml::source_region& where, std::string_view problem) const {
    throw BackendFileError(one_line(fmt::format("{}:{}: {}", file_.string(), where.begin.line, problem)));
  }
  [[noreturn]] void fail(const toml::node& n, std::string_view problem) const { fail(n.source(), problem); }

  // Every key of `t` must be in `allowed`.
  void only(const toml::table& t, std::initializer_list<std::string_view> allowed,
            std::string_view where) const {
    only(t, std::span(allowed.begin(), allowed.end()), where);
  }
  void only(const toml::table& t, std::span<const std::string_view> allowed, std::string_view where) const {
    for (auto&& [k, v] : t) {
      if (std::find(allowed.begin(), allowed.end(), k.str()) == allowed.end())
        fail(k.source(),
             fmt::format("unknown key \"{}\" in {} (known: {})", k.str(), where, fmt::join(allowed, ", ")));
    }
  }
  std::string string(const toml::node& n, std::string_view key) const {
    if (!n.is_string()) fail(n, fmt::format("\"{}\" must be a string", key));
    return *n.value<std::string>();
  }
  bool boolean(const toml::node& n, std::string_view key) const {
    if (!n.is_boolean()) fail(n, fmt::format("\"{}\" must be true or false", key));
    return *n.value<bool>();
  }
  std::int64_t integer(const toml::node& n, std::string_view key, std::int64_t min) const {
    if (!n.is_integer() || *n.value<std::int64_t>() < min)
      fail(n, fmt::format("\"{}\" must be an integer >= {}", key, min));
    return *n.value<std::int64_t>();
  }
  double positive(const toml::node& n, std::string_view key) const {
    const auto v = n.is_number() ? n.value<double>() : std::nullopt;
    if (!v || !(*v > 0) || !std::isfinite(*v)) fail(n, fmt::format("\"{}\" must be a positive number", key));
    return *v;
  }
  const toml::array& array(const toml::node& n, std::string_view key) const {
    if (!n.is_array()) fail(n, fmt::format("\"{}\" must be an array", key));
    return *n.as_array();
  }
  const toml::table& table(const toml::node& n, std::string_view key) const {
    if (!n.is_table()) fail(n, fmt::format("\"{}\" must be a table", key));
    return *n.as_table();
  }
  std::vector<std::string> strings(const toml::node& n, std::string_view key) const {
    std::vector<std::string> out;
    for (const auto& e : array(n, key)) out.push_back(string(e, key));
    return out;
  }
  const fs::path& file() const { return file_; }

 private:
  fs::path file_;
  bool require_runner_ = true;
};

DType dtype_of(const Reader& r, const toml::node& n, std::string_view key) {
  DType t;
  const std::string name = r.string(n, key);
  if (!parse_dtype(name, &t))
    r.fail(n, fmt::format("unknown dtype \"{}\" in \"{}\" (dtypes: fp64, fp32, fp16, bf16, fp8_e4m3fn, "
                          "fp8_e4m3fnuz, fp8_e5m2, i32)",
                          name, key));
  return t;
}

// --- numerics
// -------------------------------------------------------------------------------------------------

const Backend& like_backend(const Reader& r, const toml::node& n, std::string_view name, OpKind op,
                            const Registry& known) {
  const Backend* b = known.find(name);
  if (b == nullptr)
    r.fail(n, fmt::format("numerics: no backend named \"{}\" (driftcheck list shows them)", name));
  if (b->op() != op)
    r.fail(n, fmt::format("numerics: {} runs {}, this backend runs {}", name, op_name(b->op()), op_name(op)));
  return *b;
}

void read_numerics(const Reader& r, const toml::node& n, const Registry& known, BackendDecl& d) {
  if (n.is_string()) {
    const std::string s = *n.value<std::string>();
    if (!s.starts_with("like:"))
      r.fail(n, fmt::format(
                    "numerics = \"{}\": a string must be \"like:<backend>\"; declare fields in a table", s));
    const Backend& like = like_backend(r, n, s.substr(5), d.op, known);
    d.numerics = like.numerics();
    d.numerics_like = &like;
    d.numerics_source = s;
    return;
  }
  const toml::table& t = r.table(n, "numerics");
  std::vector<std::string_view> keys{"like"};
  for (const NumericsTerm& term : numerics_terms()) keys.push_back(term.key);
  r.only(t, keys, "numerics");
  d.numerics_source = "declared";
  if (const auto* like = t.get("like")) {
    const std::string name = r.string(*like, "like");
    d.numerics = like_backend(r, *like, name, d.op, known).numerics();
    d.numerics_source = "like:" + name + " with declared fields";
  }
  Numerics& x = d.numerics;
  for (const NumericsTerm& term : numerics_terms()) {
    const std::string key(term.key);
    const toml::node* v = t.get(key);
    if (v == nullptr) continue;
    switch (term.type) {
      case TermType::kFlag:
        x.*term.flag = r.boolean(*v, key);
        break;
      case TermType::kCount:
        x.output_roundings = static_cast<int>(r.integer(*v, key, kMinOutputRoundings));
        if (x.output_roundings > kMaxFileOutputRoundings) r.fail(*v, "\"output_roundings\" must be 1 or 2");
        break;
      case TermType::kNewKv: {
        const std::string source = r.string(*v, key);
        if (source != "cache" && source != "inputs")
          r.fail(*v, fmt::format("\"new_kv\" must be \"cache\" or \"inputs\", not \"{}\"", source));
        x.new_kv = source == "inputs" ? NewKv::kInputs : NewKv::kCache;
        break;
      }
      // reduction = { threads = 256, vec = 4, warp = 32 }: a key left out keeps its value (like's, or the
      // default)
      case TermType::kReduction: {
        const toml::table& shape = r.table(*v, key);
        r.only(shape, {"threads", "vec", "warp"}, "reduction");
        for (const auto& [sub, field] :
             {std::pair{"threads", &ReductionShape::threads}, std::pair{"vec", &ReductionShape::vec},
              std::pair{"warp", &ReductionShape::warp}})
          if (const auto* node = shape.get(sub))
            x.reduction.*field = static_cast<int>(r.integer(*node, sub, 1));
        break;
      }
    }
  }
}

// --- supports
// -------------------------------------------------------------------------------------------------

// Which ops each supports key applies to (docs/PROTOCOL.md section 6).
bool applies(std::string_view key, OpKind op) {
  const bool attn = op == OpKind::kAttention, norm = op == OpKind::kRmsNorm || op == OpKind::kDualRmsNormCat;
  if (key == "dtypes" || key == "max_tokens") return true;
  // attention: kv_dtypes, block_sizes, head_dims, max_head_dim, decode_only, max_query_len, gqa, non_causal,
  // sliding_window, softcap, sinks
  if (key == "max_hidden") return !attn;
  if (key == "weight_modes") return norm;
  if (key == "residual") return op == OpKind::kRmsNorm;
  return attn;
}

void read_supports(const Reader& r, const toml::node& n, BackendDecl& d) {
  const toml::table& t = r.table(n, "supports");
  r.only(t,
         {"dtypes", "kv_dtypes", "block_sizes", "head_dims", "max_head_dim", "decode_only", "max_query_len",
          "max_hidden", "max_tokens", "weight_modes", "residual", "gqa", "non_causal", "sliding_window",
          "softcap", "sinks"},
         "supports");
  StaticSupports& s = d.supports;
  for (auto&& [k, v] : t) {
    const std::string key(k.str());
    if (!applies(key, d.op))
      r.fail(k.source(), fmt::format("supports.{} does not apply to op {}", key, op_name(d.op)));
    if (key == "dtypes" || key == "kv_dtypes") {
      auto& out = key == "dtypes" ? s.dtypes : s.kv_dtypes;
      for (const auto& e : r.array(v, key)) out.push_back(dtype_of(r, e, key));
      if (out.empty()) r.fail(v, fmt::format("supports.{} is empty: the backend would run nothing", key));
    } else if (key == "block_sizes" || key == "head_dims") {
      auto& out = key == "block_sizes" ? s.block_sizes : s.query.head_dims;
      for (const auto& e : r.array(v, key)) out.push_back(r.integer(e, key, 1));
      if (out.empty()) r.fail(v, fmt::format("supports.{} is empty: the backend would run nothing", key));
    } else if (key == "max_hidden" || key == "max_tokens") {
      (key == "max_hidden" ? s.max_hidden : s.max_tokens) = r.integer(v, key, 1);
    } else if (key == "max_query_len" || key == "max_head_dim") {
      (key == "max_query_len" ? s.query.max_query_len : s.query.max_head_dim) = r.integer(v, key, 1);
    } else if (key == "decode_only") {
      s.query.decode_only = r.boolean(v, key);
    } else if (key == "weight_modes") {
      for (const auto& e : r.array(v, key)) {
        const std::string m = r.string(e, key);
        if (m != "plain" && m != "one_plus")
          r.fail(e, fmt::format("weight mode \"{}\": plain or one_plus", m));
        s.weight_modes.push_back(m == "plain" ? WeightMode::kPlain : WeightMode::kOnePlus);
      }
      if (s.weight_modes.empty()) r.fail(v, "supports.weight_modes is empty: the backend would run nothing");
    } else {
      const std::pair<std::string_view, bool*> flags[] = {
          {"residual", &s.residual},     {"gqa", &s.gqa},
          {"non_causal", &s.non_causal}, {"sliding_window", &s.sliding_window},
          {"softcap", &s.softcap},       {"sinks", &s.sinks}};
      for (const auto& [name, field] : flags)
        if (key == name) *field = r.boolean(v, key);
    }
  }
  if (s.query.max_head_dim)
    for (const std::int64_t dim : s.query.head_dims)
      if (dim > *s.query.max_head_dim)
        r.fail(*t.get("head_dims"), fmt::format("supports.head_dims lists {}, above max_head_dim {}: the "
                                                "backend would never run it",
                                                dim, *s.query.max_head_dim));
}

// --- how it runs
// ----------------------------------------------------------------------------------------------

// argv[0] as execvp would find it: with a '/', relative to the working directory; else along PATH (the
// backend's own PATH when its env sets one).
std::optional<fs::path> find_executable(const std::string& argv0, const fs::path& cwd,
                                        const std::string& path_var) {
  const auto runnable = [](const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) && access(p.c_str(), X_OK) == 0;
  };
  if (argv0.find('/') != std::string::npos) {
    const fs::path p = fs::path(argv0).is_absolute() ? fs::path(argv0) : cwd / argv0;
    return runnable(p) ? std::optional(p) : std::nullopt;
  }
  for (std::size_t start = 0; start <= path_var.size();) {
    const auto end = std::min(path_var.find(':', start), path_var.size());
    const fs::path dir = path_var.substr(start, end - start);
    if (!dir.empty() && runnable(dir / argv0)) return dir / argv0;
    start = end + 1;
  }
  return std::nullopt;
}

WorkerCommand read_worker(const Reader& r, const toml::table& t, const toml::node& command) {
  WorkerCommand w;
  w.argv = r.strings(command, "command");
  if (w.argv.empty() || w.argv[0].empty()) r.fail(command, "\"command\" must name a program");
  const fs::path dir = r.file().parent_path().empty() ? fs::path(".") : r.file().parent_path();
  w.cwd = dir;
  if (const auto* c = t.get("cwd")) w.cwd = dir / r.string(*c, "cwd");
  std::error_code ec;
  if (!fs::is_directory(w.cwd, ec))
    r.fail(t.get("cwd") ? *t.get("cwd") : command,
           fmt::format("working directory {} does not exist", w.cwd.string()));
  w.cwd = fs::absolute(w.cwd, ec).lexically_normal();
  if (const auto* e = t.get("env")) {
    for (auto&& [k, v] : r.table(*e, "env")) w.env[std::string(k.str())] = r.string(v, k.str());
  }
  const char* inherited = std::getenv("PATH");
  const auto path_it = w.env.find("PATH");
  const std::string path_var = path_it != w.env.end() ? path_it->second : inherited ? inherited : "";
  const auto exe = find_executable(w.argv[0], w.cwd, path_var);
  if (!exe)
    r.fail(command, fmt::format("command \"{}\" not found or not executable ({})", w.argv[0],
                                w.argv[0].find('/') != std::string::npos ? "relative to " + w.cwd.string()
                                                                         : "searched PATH"));
  w.exe = *exe;
  if (const auto* v = t.get("timeout_s")) w.timeout_s = r.positive(*v, "timeout_s");
  if (const auto* v = t.get("startup_timeout_s")) w.startup_timeout_s = r.positive(*v, "startup_timeout_s");
  if (const auto* v = t.get("channel")) {
    const std::string ch = r.string(*v, "channel");
    if (ch != "fds" && ch != "stdio") r.fail(*v, fmt::format("channel \"{}\": fds or stdio", ch));
    w.stdio_channel = ch == "stdio";
  }
  return w;
}

bool valid_name(std::string_view n) {
  return !n.empty() && std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
  });
}

BackendDecl read_backend(const Reader& r, const toml::table& t, const Registry& known) {
  r.only(
      t,
      {"name", "op", "description", "provenance", "twin", "command", "plugin", "plugin_config", "env", "cwd",
       "timeout_s", "startup_timeout_s", "workers", "channel", "numerics", "supports", "compile_set"},
      "[[backend]]");
  BackendDecl d;
  d.file = r.file(), d.line = t.source().begin.line;
  const auto* name = t.get("name");
  if (!name) r.fail(t, "[[backend]] has no \"name\"");
  const std::string short_name = r.string(*name, "name");
  if (!valid_name(short_name))
    r.fail(*name, fmt::format("name \"{}\": use a-z, 0-9, '_', '.', '-'", short_name));
  d.name = "ext." + short_name;
  if (known.find(d.name)) r.fail(*name, fmt::format("a backend named {} is already registered", d.name));
  const auto* op = t.get("op");
  if (!op) r.fail(t, fmt::format("{} has no \"op\"", d.name));
  if (const std::string o = r.string(*op, "op"); !parse_op(o, &d.op))
    r.fail(*op, fmt::format("unknown op \"{}\" (ops: rmsnorm, concat, dual_rmsnorm_cat, attention)", o));
  if (const auto* v = t.get("description")) d.description = r.string(*v, "description");
  if (const auto* v = t.get("provenance")) d.provenance = r.string(*v, "provenance");
  if (const auto* v = t.get("twin")) {
    // Known findings reach this kernel through its twin's defect switches: it must be a built-in CPU twin of
    // the same op.
    d.twin = r.string(*v, "twin");
    const Backend* tw = known.find(d.twin);
    if (tw == nullptr || tw->kind() != BackendKind::kCpu)
      r.fail(*v, fmt::format("twin \"{}\": not a built-in CPU twin (driftcheck list shows them)", d.twin));
    if (tw->op() != d.op)
      r.fail(*v, fmt::format("twin \"{}\" runs {}, {} runs {}", d.twin, op_name(tw->op()), d.name,
                             op_name(d.op)));
  }
  // A plugin declares its numerics itself; a backends file may repeat them (they must then agree).
  if (const auto* numerics = t.get("numerics"))
    read_numerics(r, *numerics, known, d);
  else if (!t.get("plugin"))
    r.fail(t, fmt::format("{} declares no \"numerics\" (a table, or \"like:<backend>\")", d.name));
  if (const auto* s = t.get("supports")) read_supports(r, *s, d);
  if (const auto* v = t.get("compile_set")) {
    const std::int64_t k = r.integer(*v, "compile_set", 0);
    if (k > kMaxCompileSet)
      r.fail(*v, fmt::format("\"compile_set\" must be at most {} (a set that large compiles like no set)",
                             kMaxCompileSet));
    d.compile_set = static_cast<int>(k);
  }
  if (const auto* w = t.get("workers"))
    d.max_workers = static_cast<int>(std::min<std::int64_t>(r.integer(*w, "workers", 0), 1024));
  const auto* command = t.get("command");
  const auto* plugin = t.get("plugin");
  if ((command != nullptr && plugin != nullptr) ||
      (command == nullptr && plugin == nullptr && r.require_runner()))
    r.fail(t,
           fmt::format("{} needs exactly one of \"command\" (a worker) and \"plugin\" (a C plugin)", d.name));
  if (command) {
    d.worker = read_worker(r, t, *command);
    if (const auto* v = t.get("plugin_config"))
      r.fail(*v, "\"plugin_config\" applies to a \"plugin\", not a worker \"command\"");
  } else {
    for (const char* key : {"env", "cwd", "timeout_s", "startup_timeout_s", "channel"})
      if (const auto* v = t.get(key))
        r.fail(*v, fmt::format("\"{}\" applies to a worker \"command\" only", key));
    if (plugin) d.plugin = r.file().parent_path() / r.string(*plugin, "plugin");
    if (const auto* v = t.get("plugin_config")) d.plugin_config = r.string(*v, "plugin_config");
  }
  return d;
}

std::vector<BackendDecl> read_file(const Reader& r, const toml::table& root, const Registry& known) {
  r.only(root, {"format", "version", "backend"}, "the top level");
  const auto* format = root.get("format");
  if (!format || r.string(*format, "format") != kFormat)
    r.fail(format ? *format : static_cast<const toml::node&>(root),
           fmt::format("\"format\" must be \"{}\"", kFormat));
  const auto* version = root.get("version");
  if (!version || !version->is_integer() || *version->value<std::int64_t>() != kFormatVersion)
    r.fail(version ? *version : static_cast<const toml::node&>(root),
           fmt::format("\"version\" must be {} (this driftcheck reads {} version {})", kFormatVersion,
                       kFormat, kFormatVersion));
  const auto* backends = root.get("backend");
  if (!backends || !backends->is_array_of_tables() || backends->as_array()->empty())
    r.fail(backends ? *backends : static_cast<const toml::node&>(root), "no [[backend]] tables");
  std::vector<BackendDecl> out;
  std::set<std::string> names;
  for (const auto& b : *backends->as_array()) {
    BackendDecl d = read_backend(r, *b.as_table(), known);
    if (!names.insert(d.name).second) r.fail(b, fmt::format("{} is declared twice", d.name));
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

std::vector<BackendDecl> load_backends_text(std::string_view text, const fs::path& file,
                                            const Registry& known, bool require_runner) {
  const Reader r(file, require_runner);
  toml::table root;
  try {
    root = toml::parse(text, file.string());
  } catch (const toml::parse_error& e) {
    r.fail(e.source(), std::string(e.description()));
  }
  return read_file(r, root, known);
}

std::vector<BackendDecl> load_backends_file(const fs::path& file, const Registry& known,
                                            bool require_runner) {
  std::error_code ec;
  if (fs::is_directory(file, ec))
    throw BackendFileError(fmt::format("{}: is a directory, not a backends file", file.string()));
  std::ifstream in(file, std::ios::binary);
  if (!in) throw BackendFileError(fmt::format("{}: cannot be read", file.string()));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return load_backends_text(text, file, known, require_runner);
}

void register_backends_files(Registry& registry, const std::vector<std::string>& files) {
  for (const auto& f : files)
    for (auto& d : load_backends_file(f, registry)) registry.add(make_external_backend(std::move(d)));
}

std::vector<std::string> backends_files_with_environment(const std::vector<std::string>& files) {
  std::vector<std::string> out;
  if (const char* env = std::getenv("DRIFTCHECK_BACKENDS")) {
    const std::string_view list(env);
    for (std::size_t start = 0; start <= list.size();) {
      const auto end = std::min(list.find(':', start), list.size());
      if (end > start) out.emplace_back(list.substr(start, end - start));
      start = end + 1;
    }
  }
  out.insert(out.end(), files.begin(), files.end());
  return out;
}

}  // namespace driftcheck::external
