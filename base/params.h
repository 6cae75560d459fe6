// The one typed registry of every tunable. Each entry is read once, on first use, from its
// LOOM_* environment variable, else from NCCL's variable of the same meaning where it has one
// (translated where NCCL's syntax differs: base/nccl_env.h), else its default; loom-info prints
// them all with their documentation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace loom::params {

enum class Type { Int, Bool, String, Bytes };  // Bytes: an Int that accepts K/M/G suffixes

// What a translation made of an NCCL variable's value.
struct Translation {
  std::string text;     // the value in loom's syntax
  std::string warning;  // what of NCCL's value loom cannot honour; empty: nothing
  std::string error;    // why NCCL's value is invalid; empty: it is valid
};
using FromNccl = Translation (*)(const std::string& ncclValue);

struct Entry {
  const char* name;         // full variable name, e.g. "LOOM_TIMEOUT_MS"
  Type type;
  const char* defaultValue;
  const char* description;
  const char* ncclName = nullptr;  // NCCL's variable of the same meaning, read when `name` is unset
  FromNccl fromNccl = nullptr;     // its value in loom's syntax; null: the syntax is the same
};

struct Value {
  const Entry* entry;
  std::string text;      // the value in force, as text in loom's syntax
  const char* source;    // the variable it came from (entry->name or entry->ncclName) or "default"
  std::string ncclText;  // NCCL's value as set, where NCCL's variable was read
  std::string warning;   // what of NCCL's value loom cannot honour (the value is used without it)
  std::string error;     // why NCCL's value is invalid (the default is used; checkNccl fails)
};

// Typed accessors. The name must be in the registry (a typo is a bug: it aborts loudly).
int64_t getInt(const char* name);   // Int and Bytes
bool getBool(const char* name);
std::string getString(const char* name);
// The whole record of one entry.
Value get(const char* name);

// Every entry with its value in force, in registry order (for loom-info and logs).
std::vector<Value> all();

// The first NCCL variable whose value was invalid, as an error that names it and why.
// Communicator creation calls it: an NCCL value loom cannot read fails there, as in NCCL.
Status checkNccl();

// How many times the environment has been read: one-time reports of the settings
// (ncclenv::reportOnce) say them again after a reload.
uint64_t generation();

// Reads the environment again on next use. Values are otherwise read once per process; tests
// that fork ranks with their own LOOM_* settings call this in the child.
void reloadFromEnvironment();

}  // namespace loom::params
