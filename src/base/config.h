// Every BRAID_* knob is declared once, in src/config.cc, with its default, its kind, the values it
// accepts and a line of help. Read them at setup (communicator init), never per call.
// `braid-topo --config` prints the table.
//
// The typed readers enforce the declared range themselves, so no caller can see a value outside
// it (a heartbeat period near INT64_MAX would overflow the nanosecond arithmetic). checkParams(),
// called first thing at communicator init, validates every knob the environment sets, so a bad
// value is one clear error naming the variable and what it accepts, on every rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/base/status.h"

namespace braid {

enum class ParamKind {
  kString,  // free text, checked where it is used (a host:port, a path, an algorithm spec)
  kInt,     // a decimal integer in [min, max]
  kSize,    // bytes: a decimal integer with an optional K, M or G suffix, in [min, max]
  kDouble,  // a finite number in [min, max]
  kBool,    // 1/0, true/false, yes/no, on/off, any case
  kEnum,    // one of `allowed`, any case
  kList,    // comma-separated items of `allowed`, any case; a leading ^ when `allowed` starts with ^
};

struct ParamInfo {
  const char* name;          // "BRAID_TIMEOUT"
  const char* defaultValue;  // "300"; "" = unset
  const char* help;          // one line
  ParamKind kind = ParamKind::kString;
  // kInt, kSize, kDouble: the accepted range, inclusive. Doubles hold every bound exactly (all
  // are below 2^53).
  double min = 0;
  double max = 0;
  bool zeroToo = false;           // 0 is accepted besides [min, max] (0 = off, or the system's default)
  const char* allowed = nullptr;  // kEnum, kList: the spellings, "a|b|c"
};

// All declared knobs, in declaration order.
const std::vector<ParamInfo>& allParams();
// One declared knob (its range, for a value from elsewhere that must fit it).
const ParamInfo& paramInfo(const char* name);

// What a knob accepts, for messages and `braid-topo --config`: "1..315360000", "0 or 64K..1G",
// "NONE|WARN|INFO|TRACE", "1|0|true|false|yes|no|on|off", "" for free text.
std::string paramRange(const ParamInfo& p);

// The value of a declared knob: the environment's when set and non-empty, else the default.
// Asking for an undeclared name is a bug and aborts in debug builds.
std::string paramString(const char* name);
// Integer knobs. Not an integer, or outside the declared range: braidInvalidArgument naming the
// variable and the range.
Status paramInt(const char* name, int64_t* value);

// Floating-point knobs; not a finite number in range -> braidInvalidArgument naming the variable.
Status paramDouble(const char* name, double* value);
// The declared default ("" = unset) and whether the environment sets the knob.
const char* paramDefault(const char* name);
bool paramIsSet(const char* name);
// The declared default of an integer or size knob as a number ("256K" -> 262144), whatever the
// environment says; 0 when the default is unset.
int64_t paramDefaultInt(const char* name);

// Size knobs accept K/M/G suffixes ("256K"); a value whose bytes do not fit in 63 bits is out of
// range, not wrapped.
Status paramSize(const char* name, size_t* value);

// Boolean knobs: 1/0, true/false, yes/no, on/off in any case; anything else is an error.
Status paramBool(const char* name, bool* value);

// Enum knobs: the table's spelling of the value ("auto" for "AUTO"); "" when unset without default.
Status paramEnum(const char* name, std::string* value);

// The non-empty items of a comma-separated list, in order ("a,,b" -> a, b): how every list knob
// (and a config's list standing for one) is read.
std::vector<std::string> listItems(const std::string& text);

// Validates one declared knob if the environment sets it (its kind, range or spellings).
Status checkParam(const char* name);
// Validates `text` as a value of the declared knob, wherever it came from (a braidConfig_t field
// that overrides the knob, say); "" is accepted as unset.
Status checkParamText(const char* name, const std::string& text);

// Validates every declared knob that the environment sets, and that the log file (when one is
// set) can be used. The first problem is returned, naming the variable.
Status checkParams();

// The parsers behind the readers, for tests: `text` as the knob's kind wants it.
Status parseParamInt(const ParamInfo& p, const std::string& text, int64_t* value);
Status parseParamBool(const ParamInfo& p, const std::string& text, bool* value);

}  // namespace braid
