// Every BRAID_* knob is declared once, in src/config.cc, with its default and a line of help.
// Read them at setup (communicator init), never per call. `braid-topo --config` prints the table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/status.h"

namespace braid {

struct ParamInfo {
  const char* name;          // "BRAID_TIMEOUT"
  const char* defaultValue;  // "300"; "" = unset
  const char* help;          // one line
};

// All declared knobs, in declaration order.
const std::vector<ParamInfo>& allParams();

// The value of a declared knob: the environment's when set and non-empty, else the default.
// Asking for an undeclared name is a bug and aborts in debug builds.
std::string paramString(const char* name);
// Integer knobs. A value that is not an integer gets braidInvalidArgument naming the variable.
Status paramInt(const char* name, int64_t* value);
// Convenience for knobs whose value was validated at init: the default on a parse failure.
int64_t paramIntOr(const char* name, int64_t fallback);

// Floating-point knobs; not a finite number -> braidInvalidArgument naming the variable.
Status paramDouble(const char* name, double* value);
// The declared default ("" = unset) and whether the environment sets the knob.
const char* paramDefault(const char* name);
bool paramIsSet(const char* name);

// Size knobs accept K/M/G suffixes ("256K").
Status paramSize(const char* name, size_t* value);

}  // namespace braid
