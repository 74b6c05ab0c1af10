// The campaign's shrink phase: after discovery, each finding's drawn case is shrunk along RapidCheck's shrink
// tree and its bundle replaced by the shrunk one (docs/CAMPAIGN.md "Findings, deduplication, shrinking").
// Internal to the campaign runner.
#pragma once

#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "campaign_findings.hpp"
#include "driftcheck/fuzz/campaign.hpp"

namespace driftcheck::fuzz {

// RapidCheck keeps implicit parameters (the handler gen::exec uses) in process-wide stacks, and a Shrinkable
// may regenerate its value lazily through them, so every draw, value() and shrinks() walk holds this lock.
std::mutex& rc_mutex();

// Case k of the stream with its shrink tree, drawn under rc_mutex().
struct DrawnCase {
  rc::Shrinkable<CaseSpec> shrinkable;
  CaseSpec spec;
};
DrawnCase draw_locked(OpKind op, std::uint64_t seed, std::uint64_t index, const GenOptions& gen);

// The shrink phase's budget: --shrink-seconds, else 25% of --seconds (at least 5 s), else 30 s.
double shrink_budget(const CampaignOptions& opts);

// What a phase that writes bundles ran into. It stops at the first failed write (disk full), whose
// std::system_error is kept to be rethrown once the campaign has stopped its threads.
struct PhaseResult {
  std::vector<std::string> internal_errors;
  std::exception_ptr io_error;
};

// Resume, before discovery: writes the bundle of the drawn case of every finding journaled without one (a
// kill landed between the finding's record and its bundle, or the bundle went missing). A finding that does
// not fail again when redrawn (a nondeterministic backend) stays without a bundle, with a warning on
// opts.log. Stops early on opts.interrupt.
PhaseResult bundle_unbundled(Findings& findings, const CampaignOptions& opts);

// Shrinks every finding not yet shrunk, first finding of each (backend, verdict) first, on `jobs` threads
// within shrink_budget(opts), and replaces its bundle. Stops within one shrink step of opts.interrupt.
PhaseResult shrink_phase(Findings& findings, const CampaignOptions& opts, int jobs);

}  // namespace driftcheck::fuzz
