// NCCL's environment variables as loom reads them (docs/NCCL_ENV.md). base/params.cc's registry
// names, per parameter, NCCL's variable of the same meaning and, where NCCL's syntax differs, a
// translation from here. This file also lists NCCL's variables that have no loom meaning, and
// says at communicator creation which NCCL values were taken and which were not.
#pragma once

#include <string>
#include <vector>

#include "base/params.h"

namespace loom::ncclenv {

// NCCL_DEBUG → LOOM_DEBUG: NONE, WARN, INFO and TRACE as they are; VERSION → WARN (loom has no
// level that prints only its version); ABORT → INFO (NCCL prints at ABORT what it does at INFO).
params::Translation debugLevel(const std::string& nccl);
// NCCL_DEBUG_SUBSYS → LOOM_DEBUG_SUBSYS: each of NCCL's subsystems as loom's that logs the same
// kind of event (kSubsystems in nccl_env.cc), a leading ^ kept.
params::Translation debugSubsystems(const std::string& nccl);
// NCCL_ALGO → LOOM_ALGO. NCCL's syntax: "[LIST][;FUNCTION:LIST]...", a LIST of algorithms,
// comma separated, or ^ and those it excludes; the first LIST (without a function) applies to
// every function, later ones to theirs. Per collective loom forces one builder: the first
// algorithm of the list (for ^, in NCCL's order: Tree, Ring, CollNetDirect, CollNetChain, NVLS,
// NVLSTree, PAT) that loom has a counterpart for in that collective; with none, loom's tuner
// chooses. Algorithms loom has no counterpart for at all are a warning; names NCCL does not know
// are an error.
params::Translation algorithms(const std::string& nccl);
// NCCL_SHM_DISABLE → LOOM_TRANSPORT: non-zero → tcp, 0 → auto.
params::Translation shmDisable(const std::string& nccl);

// loom's builder for NCCL algorithm `algorithm` in one collective (loom's name), as
// algorithms() maps them: the table, for tests to check against the collectives' registry.
struct Counterpart {
  const char* ncclAlgorithm;
  const char* ncclFunction;
  const char* collective;
  const char* builder;  // null: none
};
std::vector<Counterpart> algorithmCounterparts();

// An NCCL variable, or family of variables (a name ending in '*'), that loom does not read.
struct Ignored {
  const char* pattern;
  const char* reason;
  bool warn;  // set, it is a warning at communicator creation (else INFO)
};
const std::vector<Ignored>& ignoredVariables();

// The NCCL_* variables of this process's environment that no parameter reads, with why.
struct IgnoredSetting {
  std::string name;
  std::string value;
  const char* reason;
  bool warn;
};
std::vector<IgnoredSetting> ignoredSettings();

// At communicator creation: logs, once per reading of the environment (params::generation),
// each NCCL value in force and its loom text (INFO, subsystem ENV), what of it loom cannot
// honour (WARN), NCCL values a LOOM_* variable overrides (INFO), and the ignored NCCL
// variables that are set (INFO; WARN where Ignored::warn).
void reportOnce();

}  // namespace loom::ncclenv
