// The errors driftcheck reports, and their exit codes (docs/CAMPAIGN.md "Exit codes and errors"). run_cli
// maps each to one line on stderr:
// - exit 2, bad usage or bad input:
//   UsageError "driftcheck: error: ..." (bad flag values, unknown names, an --out that cannot be used, a
//   directory in use by another run); JournalError "driftcheck: bad journal: ..." (file, line, field);
//   BundleError "driftcheck: bad bundle: ..." (file, field); external::BackendFileError, BadBackend,
//   PluginError, ExchangeError "driftcheck: bad backends file / backend / plugin / input: ..."
//   (docs/PROTOCOL.md, PLUGIN.md, EXCHANGE.md); InputError "driftcheck: bad <kind>: ..." (a gate config,
//   baseline, corpus entry or golden file: input_error.hpp, docs/GATE.md).
// - exit 3, internal or I/O error: std::system_error "driftcheck: I/O error: ..." (a write or read
//   of campaign files failed mid-run: disk full, I/O error, no thread; the file named), std::bad_alloc
//   "driftcheck: out of memory", anything else "driftcheck: internal error: ...".
// Readers of the JSON files driftcheck writes use json_fields.hpp, whose FieldError names the field; the
// reader turns it into its own error naming the file.
#pragma once

#include <stdexcept>

namespace driftcheck::fuzz {

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A journal that could not be read: malformed line, wrong format or version, a record with a missing or
// mistyped field. The message names the file, the line and the field.
class JournalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bundle or tensor file that cannot be read: the message names the file and the problem.
class BundleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace driftcheck::fuzz
