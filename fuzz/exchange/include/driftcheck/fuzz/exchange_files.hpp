// Pieces of the exchange files shared by export, check and the manifest reader (docs/EXCHANGE.md). Internal
// to the fuzz library.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "driftcheck/fuzz/exchange.hpp"
#include "driftcheck/io/safetensors.hpp"
#include "driftcheck/reference/reference.hpp"

namespace driftcheck::fuzz {

inline constexpr std::string_view kManifestName = "manifest.json";
// Case files hold the fp64 reference of output `y` as "reference.y" next to the storages; an export with
// --new-kv both adds "reference_from_inputs.y" (NewKv::kInputs) where that reference differs.
inline constexpr std::string_view kReferencePrefix = "reference.";
inline constexpr std::string_view kFromInputsPrefix = "reference_from_inputs.";
inline bool is_reference_tensor(std::string_view name) {
  return name.starts_with(kReferencePrefix) || name.starts_with(kFromInputsPrefix);
}

// The name of a storage in the exchange files: the first tensor (in name order) that views it.
std::string storage_name(const Case& c, const Storage* s);
// The manifest entry of a case: the worker protocol's case object with a name per storage, plus id, files,
// seed/index, spec, shape class and replay command; `references` (attention: new-token source -> tensor
// prefix, ManifestCase::references) when not null.
nlohmann::json manifest_entry(const std::string& id, const CaseSpec& spec, const Case& c,
                              const nlohmann::json& references = nullptr);
// The case file: every storage whole under its name, the reference outputs (`reference.*`), those of the
// other new-token source when given (`reference_from_inputs.*`), and the case id in the metadata.
io::Safetensors case_file(const std::string& id, const Case& c, const Outputs& reference,
                          const Outputs* from_inputs = nullptr);
// Copies storage i's bytes from file tensor mc.storage_names[i] into storages[i], after checking its dtype
// and size against the manifest; a storage the file lacks is an error when `require_all`, else left as it is.
// Throws ExchangeError naming `path`.
void fill_storages(const io::Safetensors& file, const ManifestCase& mc,
                   const std::vector<std::shared_ptr<Storage>>& storages, const std::filesystem::path& path,
                   bool require_all);

}  // namespace driftcheck::fuzz
