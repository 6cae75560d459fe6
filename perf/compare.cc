#include "perf/compare.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "perf/output.h"

namespace loom::perf {
namespace {

std::string rowKey(const JsonValue& row) {
  const JsonValue* size = row.find("size");
  const JsonValue* type = row.find("type");
  const JsonValue* op = row.find("redop");
  if (!size || !type || !op) return {};
  return std::to_string(static_cast<long long>(size->number)) + " " + type->text + " " + op->text;
}

// busbw of each row of one run, by rowKey; the JSON's full-precision value, not the table's.
std::map<std::string, double> busBwByRow(const JsonValue& run) {
  std::map<std::string, double> out;
  const JsonValue* rows = run.find("rows");
  if (!rows) return out;
  for (const JsonValue& row : rows->items) {
    const JsonValue* oop = row.find("out_of_place");
    const JsonValue* bw = oop ? oop->find("busbw_gbs") : nullptr;
    if (bw && bw->kind == JsonValue::Kind::kNumber) out[rowKey(row)] = bw->number;
  }
  return out;
}

std::string cell(const char* format, double v, const char* missing) {
  char buf[64];
  if (v < 0) {
    std::snprintf(buf, sizeof(buf), "%10s", missing);
  } else {
    std::snprintf(buf, sizeof(buf), format, v);
  }
  return buf;
}

}  // namespace

std::string formatComparison(const std::vector<LibraryRuns>& libs, const Options& o, int nranks) {
  std::string t = "#\n# Comparison: " + std::string(ncclTestsName(o.collective)) + ", " +
                  std::to_string(nranks) + " ranks, busbw in GB/s (out-of-place), median of " +
                  std::to_string(o.repeats) + (o.repeats == 1 ? " run\n" : " runs\n");
  for (const LibraryRuns& lib : libs) {
    if (!lib.unavailable.empty()) {
      t += "# " + lib.name + ": " + lib.unavailable + "\n";
    } else if (lib.name == "nccl") {
      t += "# nccl: loom through NCCL's API, its libnccl.so.2 (loom-perf --api nccl)\n";
    } else if (const auto env = loomTransportSetting(lib.name); !env.empty()) {
      std::string settings;
      for (const std::string& e : env) settings += " " + e;
      t += "# " + lib.name + ": loom with" + settings + "\n";
    }
  }
  // Rows in the order loom ran them; a peer's extra rows (none in practice) are ignored.
  std::vector<std::string> keys;
  std::vector<std::map<std::string, double>> medians;
  for (const LibraryRuns& lib : libs) {
    std::map<std::string, std::vector<double>> values;
    for (const JsonValue& run : lib.runs) {
      for (const auto& [key, bw] : busBwByRow(run)) values[key].push_back(bw);
    }
    std::map<std::string, double> m;
    for (auto& [key, list] : values) m[key] = medianOf(list);
    medians.push_back(std::move(m));
  }
  if (!libs.empty()) {
    for (const LibraryRuns& lib : libs) {
      if (lib.runs.empty()) continue;
      if (const JsonValue* rows = lib.runs.front().find("rows")) {
        for (const JsonValue& row : rows->items) {
          const std::string key = rowKey(row);
          if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
        }
      }
      break;  // the first library with results fixes the order
    }
  }
  char line[256];
  std::snprintf(line, sizeof(line), "# %10s  %8s  %6s", "size (B)", "type", "redop");
  t += line;
  for (size_t i = 0; i < libs.size(); ++i) {
    std::snprintf(line, sizeof(line), "  %10s", libs[i].name.c_str());
    t += line;
    if (i > 0) {
      std::snprintf(line, sizeof(line), "  %10s", ("loom/" + libs[i].name).c_str());
      t += line;
    }
  }
  t += "\n";
  for (const std::string& key : keys) {
    std::istringstream in(key);
    std::string size, type, op;
    in >> size >> type >> op;
    std::snprintf(line, sizeof(line), "  %10s  %8s  %6s", size.c_str(), type.c_str(), op.c_str());
    t += line;
    const auto get = [&](size_t lib) {
      const auto it = medians[lib].find(key);
      return it == medians[lib].end() ? -1.0 : it->second;
    };
    const double loom = get(0);
    for (size_t i = 0; i < libs.size(); ++i) {
      const double v = get(i);
      // A library without results says why once above; its cells say n/a.
      t += "  " + cell("%10.4g", v, "n/a");
      if (i > 0) {
        t += "  " + cell("%10.2f", v > 0 && loom >= 0 ? loom / v : -1, v == 0 ? "inf" : "n/a");
      }
    }
    t += "\n";
  }
  return t;
}

namespace {

std::string readText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The last non-empty line of a file: a failed program's own explanation.
std::string lastLine(const std::string& path) {
  std::istringstream in(readText(path));
  std::string last;
  for (std::string l; std::getline(in, l);) {
    if (!l.empty()) last = l;
  }
  return last;
}

// Runs argv with stdout to the terminal (show) or /dev/null and stderr to errPath; returns
// the exit status (127: could not start).
int runProgram(const std::vector<std::string>& argv, bool show, const std::string& errPath) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    if (!show) {
      const int null = open("/dev/null", O_WRONLY);
      if (null >= 0) dup2(null, STDOUT_FILENO);
    }
    const int err = open(errPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (err >= 0) dup2(err, STDERR_FILENO);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s\n", args[0]);
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 127;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

namespace {

// The command that runs one library's sweep, writing its --json to `json`; empty when the
// library's program was not built (the peers live next to loom-perf).
std::vector<std::string> libraryCommand(const Options& o, const std::string& selfPath,
                                        const std::string& name, const std::string& json) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(selfPath).parent_path();
  const std::string n = std::to_string(o.nranks);
  std::vector<std::string> argv;
  const std::vector<std::string> transport = loomTransportSetting(name);
  const bool loom = name == "loom" || name == "nccl" || !transport.empty();
  if (!transport.empty()) {
    // UCX_TLS is the entry's alone (ucx: UCX's default choice), whatever the caller's.
    argv = {"env", "-u", "UCX_TLS"};
    argv.insert(argv.end(), transport.begin(), transport.end());
    argv.push_back(selfPath);
  } else if (name == "loom" || name == "nccl") {
    argv = {selfPath};
  } else if (name == "mpi") {
    if (!fs::exists(dir / "loom-mpi-perf")) return argv;
    argv = {"mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to",
            o.bindCores ? "core" : "none", "-np", n, (dir / "loom-mpi-perf").string()};
  } else {
    if (!fs::exists(dir / "loom-gloo-perf")) return argv;
    argv = {(dir / "loom-gloo-perf").string()};
  }
  const std::vector<std::string> common = sweepArgs(o);
  argv.insert(argv.end(), common.begin(), common.end());
  if (name != "mpi") argv.insert(argv.end(), {"-N", n});
  if (loom && !o.algorithm.empty())
    argv.insert(argv.end(), {"-A", o.algorithm});
  if (name == "nccl") argv.insert(argv.end(), {"--api", "nccl"});
  argv.insert(argv.end(), {"--json", json});
  return argv;
}

// One run of one library, its files under `base` (.json, .err): its JSON is kept in lib->runs
// and its text in *documents, or the library is marked unavailable, or the failure reported.
// Returns loom-perf's exit code for this run.
int runLibrary(const Options& o, const std::string& selfPath, int rep, const std::string& base,
               LibraryRuns* lib, std::vector<std::string>* documents) {
  const std::vector<std::string> argv = libraryCommand(o, selfPath, lib->name, base + ".json");
  if (argv.empty()) {
    lib->unavailable = "not built (no loom-" + lib->name + "-perf next to loom-perf)";
    return 0;
  }
  // loom's first table is shown as loom-perf alone would show it; the rest go to JSON.
  const int status = runProgram(argv, lib->name == "loom" && rep == 0, base + ".err");
  std::string error;
  const std::string text = readText(base + ".json");
  std::optional<JsonValue> json = parseJson(text, &error);
  if (status == 0 && json) {
    lib->runs.push_back(std::move(*json));
    documents->push_back(text);
    return 0;
  }
  const std::string why = lastLine(base + ".err");
  if (status == 2) {
    // The program refused the call (no such collective, dtype or op): the same every run.
    lib->unavailable = why.empty() ? "refused the sweep" : why;
    return 0;
  }
  std::fprintf(stderr, "loom-perf: %s run %d failed (exit %d): %s\n", lib->name.c_str(), rep + 1,
               status, why.c_str());
  return lib->name == "loom" ? (status == 1 ? 1 : 3) : 0;
}

}  // namespace

std::string formatRunSet(const std::vector<std::string>& documents) {
  std::string out = "{\n  \"schema\": \"loom-perf-set/1\",\n  \"runs\": [";
  for (size_t i = 0; i < documents.size(); ++i) {
    std::string doc = documents[i];
    while (!doc.empty() && doc.back() == '\n') doc.pop_back();
    out += (i ? ",\n" : "\n") + doc;
  }
  return out + (documents.empty() ? "]\n}\n" : "\n  ]\n}\n");
}

int runComparison(const Options& o, const std::string& selfPath) {
  char tmpl[] = "/tmp/loom-perf-compare.XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::perror("loom-perf: mkdtemp");
    return 3;
  }
  const std::string tmp = tmpl;
  std::vector<LibraryRuns> libs(1 + o.compare.size());
  libs[0].name = "loom";
  for (size_t i = 0; i < o.compare.size(); ++i) libs[i + 1].name = o.compare[i];
  std::vector<std::string> documents;  // every run's --json, for --json FILE
  int rc = 0;
  for (int rep = 0; rep < o.repeats; ++rep) {
    for (LibraryRuns& lib : libs) {
      if (!lib.unavailable.empty()) continue;  // not built, or it refused the collective
      const std::string base = tmp + "/" + lib.name + "." + std::to_string(rep);
      const int status = runLibrary(o, selfPath, rep, base, &lib, &documents);
      if (status != 0) rc = status;
    }
    if (o.repeats > 1) std::fprintf(stderr, "loom-perf: round %d of %d done\n", rep + 1, o.repeats);
  }
  std::fputs(formatComparison(libs, o, o.nranks).c_str(), stdout);
  std::fflush(stdout);
  // --json FILE: one document holding every library's runs (perf/plot.py reads it).
  if (!o.jsonPath.empty() && !writeTextFile(o.jsonPath, formatRunSet(documents), "loom-perf"))
    rc = 3;
  std::error_code ignored;
  std::filesystem::remove_all(tmp, ignored);
  return rc;
}

}  // namespace loom::perf
