// The one typed registry of every tunable. Each entry is read from its LOOM_* environment
// variable once, on first use; loom-info prints them all with their documentation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::params {

enum class Type { Int, Bool, String, Bytes };  // Bytes: an Int that accepts K/M/G suffixes

struct Entry {
  const char* name;         // full variable name, e.g. "LOOM_TIMEOUT_MS"
  Type type;
  const char* defaultValue;
  const char* description;
};

struct Value {
  const Entry* entry;
  std::string text;     // the value in force, as text
  const char* source;   // "default" or "environment"
};

// Typed accessors. The name must be in the registry (a typo is a bug: it aborts loudly).
int64_t getInt(const char* name);   // Int and Bytes
bool getBool(const char* name);
std::string getString(const char* name);

// Every entry with its value in force, in registry order (for loom-info and logs).
std::vector<Value> all();

// Reads the environment again on next use. Values are otherwise read once per process; tests
// that fork ranks with their own LOOM_* settings call this in the child.
void reloadFromEnvironment();

}  // namespace loom::params
