#include "driftcheck/fuzz/group_hints.hpp"

#include "driftcheck/fuzz/features.hpp"

namespace driftcheck::fuzz {

std::string group_hint(std::string_view verdict, const std::vector<std::string>& features) {
  // One side of eps = 1e-5 only (features.cpp: each edit moves eps across it): a kernel that adds an eps of
  // its own, not the one it is given.
  if (has_any(features, {"eps < 1e-5", "eps >= 1e-5"}) && verdict != "nan_mismatch")
    return "fails only where eps is " +
           std::string(has_all(features, {"eps < 1e-5"}) ? "below" : "at or above") +
           " 1e-5 and passes when eps moves across it: does the kernel use the eps it is given?";
  // eps = 0 only (its edit sets eps = 1e-6 on the same inputs): a kernel that clamps or replaces a zero eps.
  if (has_all(features, {"eps = 0"}) && verdict != "nan_mismatch")
    return "fails only where eps = 0 and passes with eps = 1e-6 on the same inputs: does the kernel use the "
           "eps it is given?";
  if (verdict != "nan_mismatch") return {};
  // Masks over live keys: causal rows of a sequence with several queries, a sliding window.
  const bool live_mask = has_any(features, {"query_len > 1", "sliding window"});
  // Slots no sequence uses at a position, which driftcheck poisons with NaN and infinities as a reused page
  // holds stale data: the tail of the last page, spare pages, table entries past a sequence's blocks.
  const bool unused_slots =
      has_any(features, {"seq_len % block_size != 0", "spare pages", "poisoned unread table entries"});
  if (has_all(features, {"inf input"}) && (live_mask || unused_slots))
    return "a masked key's infinite value reached P.V (P = 0 times inf is NaN): leave masked keys out of "
           "P.V, or "
           "zero their V, rather than only zeroing their P";
  if (has_all(features, {"NaN input"}) && (live_mask || unused_slots))
    return "a masked key's NaN reached the softmax or P.V (neither a -inf mask bias nor P = 0 removes a "
           "NaN): mask "
           "by selecting, not by adding or multiplying";
  if (unused_slots && !has_any(features, {"NaN input", "inf input"}))
    return "an unused cache slot's NaN/inf reached P.V (driftcheck poisons slots past seq_len and pages no "
           "sequence owns, as a reused page holds stale data; P = 0 times inf or NaN is NaN): leave masked "
           "keys "
           "out of P.V, not only their P";
  return {};
}

std::string with_group_hint(std::string_view verdict, const std::vector<std::string>& features,
                            const std::string& detail) {
  const std::string hint = group_hint(verdict, features);
  if (hint.empty()) return detail;
  return detail.empty() ? hint : hint + "; " + detail;
}

}  // namespace driftcheck::fuzz
