// Every parameter's parser (base/params.h, base/nccl_env.h, comm/options.h): the input is
// lines "NAME=value", each setting one LOOM_* variable or the NCCL variable it reads instead
// (a name that is neither picks an entry by its hash, so mutated names still reach them all).
// Then every value is read as its type and the communicator's options are read as at init, each
// bad setting an error with a message, or a warning and the default.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "base/params.h"
#include "base/socket.h"
#include "comm/options.h"
#include "tests/fuzz/fuzz.h"

namespace params = loom::params;

namespace {

// The variable a line's name sets: itself when it is a registry entry's LOOM_* or NCCL name.
const char* variableFor(const std::string& name, const std::vector<params::Value>& all) {
  for (const params::Value& v : all) {
    if (name == v.entry->name) return v.entry->name;
    if (v.entry->ncclName != nullptr && name == v.entry->ncclName) return v.entry->ncclName;
  }
  const params::Entry* e = all[std::hash<std::string>()(name) % all.size()].entry;
  return e->ncclName != nullptr && (name.size() & 1) ? e->ncclName : e->name;
}

// Variables that name files or hosts rather than having a grammar: setting them would make
// the fuzzer write logs where its input says, or resolve host names.
bool leftAlone(const std::string& variable, const std::string& value) {
  return variable == "LOOM_DEBUG_FILE" || variable == "NCCL_DEBUG_FILE" ||
         variable == "LOOM_ROOT" || variable == "NCCL_COMM_ID" ||
         ((variable == "LOOM_TUNE" || variable == "NCCL_TUNE") && value.rfind('@', 0) == 0);
}

void readEverything() {
  for (const params::Value& v : params::all()) {
    switch (v.entry->type) {
      case params::Type::Int:
      case params::Type::Bytes: (void)params::getInt(v.entry->name); break;
      case params::Type::Bool: (void)params::getBool(v.entry->name); break;
      case params::Type::String: (void)params::getString(v.entry->name); break;
    }
  }
  loom::CommOptions options;
  const loom::Status st = loom::readCommOptions(nullptr, &options);
  LOOM_FUZZ_CHECK(st.isOk() || !st.message().empty(), "an error without a message");
  std::vector<loom::net::Interface> interfaces;
  (void)loom::net::listInterfaces(&interfaces);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<params::Value> all = params::all();
  std::string input = loom::fuzz::text(data, size);
  std::replace(input.begin(), input.end(), '\0', ' ');  // an environment holds no NULs
  std::vector<const char*> set;
  size_t start = 0;
  while (start < input.size()) {
    size_t end = input.find('\n', start);
    if (end == std::string::npos) end = input.size();
    const std::string line = input.substr(start, end - start);
    start = end + 1;
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const char* variable = variableFor(line.substr(0, eq), all);
    const std::string value = line.substr(eq + 1);
    if (leftAlone(variable, value)) continue;
    setenv(variable, value.c_str(), 1);
    set.push_back(variable);
  }
  params::reloadFromEnvironment();
  readEverything();
  for (const char* variable : set) unsetenv(variable);
  params::reloadFromEnvironment();
  return 0;
}
