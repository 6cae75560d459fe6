// loom-trace: merges the flight recorder dumps of a communicator's ranks (LOOM_FLIGHT_RECORDER,
// loomCommDumpTrace) and says who is behind, which collective the ranks called differently,
// which rank failed first and whom the failed calls waited on.
#include <dirent.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "toolkit/trace_analysis.h"

namespace {

const char* kUsage =
    "usage: loom-trace FILE|DIR...   merge flight recorder dumps (loom-trace-*.json; a DIR is\n"
    "                                searched for them) and report per communicator\n"
    "       loom-trace --comm HASH FILE|DIR...   only that communicator's dumps\n";

bool isDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The dumps in dir: loom-trace-<comm>-rank<r>.json.
std::vector<std::string> dumpsIn(const std::string& dir) {
  std::vector<std::string> files;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return files;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind("loom-trace-", 0) == 0 && name.size() > 5 &&
        name.compare(name.size() - 5, 5, ".json") == 0)
      files.push_back(dir + "/" + name);
  }
  closedir(d);
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  std::string onlyComm;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      fputs(kUsage, stdout);
      return 0;
    }
    if (arg == "--comm" && i + 1 < argc) {
      onlyComm = argv[++i];
      continue;
    }
    if (isDirectory(arg)) {
      for (std::string& f : dumpsIn(arg)) files.push_back(f);
    } else {
      files.push_back(arg);
    }
  }
  if (files.empty()) {
    fputs(kUsage, stderr);
    return 2;
  }
  std::vector<loom::toolkit::TraceDump> dumps;
  int unreadable = 0;
  for (const std::string& f : files) {
    std::string error;
    auto d = loom::toolkit::readTraceDump(f, &error);
    if (!d) {
      fprintf(stderr, "loom-trace: %s\n", error.c_str());
      ++unreadable;
      continue;
    }
    if (onlyComm.empty() || d->comm == onlyComm) dumps.push_back(std::move(*d));
  }
  if (dumps.empty()) {
    fprintf(stderr, "loom-trace: no flight recorder dump to read\n");
    return 1;
  }
  for (const auto& a : loom::toolkit::analyzeTraces(dumps)) {
    for (const std::string& line : a.report) printf("%s\n", line.c_str());
    printf("\n");
  }
  return unreadable == 0 ? 0 : 1;
}
