#include "perf/output.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "base/status.h"

namespace loom::perf {


Measurement makeMeasurement(Collective c, size_t bytes, int nranks, double timeUs, int64_t wrong) {
  Measurement m;
  m.timeUs = timeUs;
  // bytes / 1e9 / (timeUs / 1e6)
  m.algBw = timeUs > 0 ? static_cast<double>(bytes) / (timeUs * 1e3) : 0.0;
  m.busBw = m.algBw * busBwFactor(c, nranks);
  m.wrong = wrong;
  return m;
}

namespace {

// nccl-tests' widths: fewer decimals as the time grows, so the column stays 7 wide.
std::string timeColumn(double timeUs) {
  const char* format = timeUs >= 10000.0 ? "%7.0f" : timeUs >= 100.0 ? "%7.1f" : "%7.2f";
  return strprintf(format, timeUs);
}

}  // namespace

std::string rankLine(int rank, int pid, const char* host) {
  return strprintf("#  Rank %2d Pid %6d on %10s\n", rank, pid, host);
}

std::string formatHeader(const std::string& program, const Options& o, int nranks,
                         const std::string& backend, const std::vector<std::string>& ranks) {
  std::string h = strprintf(
      "# %s %s: nranks %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
      "validation: %d bytes per size: %zu average: %d blocking: %d\n",
      program.c_str(), ncclTestsName(o.collective), nranks, o.minBytes, o.maxBytes,
      o.stepFactor > 1 ? static_cast<size_t>(o.stepFactor) : o.stepBytes,
      o.stepFactor > 1 ? "factor" : "bytes", o.warmup, o.iters, o.check ? 1 : 0, o.bytesPerSize,
      static_cast<int>(o.average), o.blocking);
  h += "# " + backend + "\n";
  if (o.bindCores) h += "# Forked ranks bound to one CPU each\n";
  if (o.sharedBuffers) h += "# Buffers from the library's shareable allocator (--mem shared)\n";
  h += "#\n# Using ranks\n";
  for (const std::string& line : ranks) h += line;
  h += "#\n";
  h += strprintf(
      "# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
      "in-place          %s\n",
      "", "", "", "", "", o.sim ? "       simulated" : "");
  h += strprintf(
      "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s%s\n", "size", "count",
      "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
      "#wrong", o.sim ? strprintf("  %7s  %6s  %s", "time", "busbw", "algorithm").c_str() : "");
  h +=
      strprintf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s%s\n", "(B)",
                   "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                   "(GB/s)", "", o.sim ? strprintf("  %7s  %6s", "(us)", "(GB/s)").c_str() : "");
  return h;
}

std::string formatRow(Collective c, const CollSizes& sizes, loomDataType_t dtype, loomRedOp_t op,
                      int root, const Measurement& outOfPlace, const Measurement& inPlace,
                      const Prediction* simulated) {
  std::string row = strprintf(
      "%12zu  %12zu  %8s  %6s  %6d", sizes.bytes(dtypeSize(dtype)), sizes.paramCount,
      dtypeName(dtype), collectiveHasOp(c) ? opName(op) : "none", collectiveHasRoot(c) ? root : -1);
  for (const Measurement* m : {&outOfPlace, &inPlace}) {
    const std::string timeText = timeColumn(m->timeUs);
    if (m->wrong >= 0) {
      row += strprintf("  %7s  %6.2f  %6.2f  %5g", timeText.c_str(), m->algBw, m->busBw,
                          static_cast<double>(m->wrong));
    } else {
      row += strprintf("  %7s  %6.2f  %6.2f  %5s", timeText.c_str(), m->algBw, m->busBw, "N/A");
    }
  }
  if (simulated) {
    const Measurement& m = simulated->time;
    row += m.timeUs > 0 ? strprintf("  %7s  %6.2f  %s", timeColumn(m.timeUs).c_str(), m.busBw,
                                       simulated->algorithm.c_str())
                        : strprintf("  %7s  %6s  %s", "-", "-", simulated->algorithm.c_str());
  }
  return row + "\n";
}

std::string formatFooter(int64_t wrongTotal, double avgBusBw, bool checked) {
  std::string f;
  if (checked) {
    f += strprintf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrongTotal),
                      wrongTotal ? "FAILED" : "OK");
  }
  f += strprintf("# Avg bus bandwidth    : %g \n#\n", avgBusBw);
  return f;
}

std::vector<std::pair<std::string, std::string>> loomEnvironment() {
  std::vector<std::pair<std::string, std::string>> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (entry.rfind("LOOM_", 0) != 0 || eq == std::string_view::npos) continue;
    env.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
  }
  std::sort(env.begin(), env.end());
  return env;
}

namespace {

// Full precision: consumers recompute ratios, and the table's 2 decimals read 0.00 at 8 B.
std::string jsonNumber(double v) { return std::isfinite(v) ? strprintf("%.9g", v) : "null"; }

std::string jsonMeasurement(const Measurement& m) {
  return "{\"time_us\": " + jsonNumber(m.timeUs) + ", \"algbw_gbs\": " + jsonNumber(m.algBw) +
         ", \"busbw_gbs\": " + jsonNumber(m.busBw) +
         ", \"wrong\": " + (m.wrong < 0 ? std::string("null") : std::to_string(m.wrong)) + "}";
}

// CSV fields are quoted only when they must be (RFC 4180).
std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (const char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

}  // namespace

std::string formatJson(const RunMetadata& meta, const Options& o,
                       const std::vector<ResultRow>& rows, int64_t wrongTotal, double avgBusBw) {
  std::string env;
  for (const auto& [key, value] : meta.env) {
    env += (env.empty() ? "" : ", ") + jsonString(key) + ": " + jsonString(value);
  }
  std::string j = "{\n";
  j += "  \"schema\": \"loom-perf/1\",\n";
  j += "  \"program\": " + jsonString(meta.program) + ",\n";
  j += "  \"library\": " + jsonString(meta.library) + ",\n";
  j += "  \"version\": " + jsonString(meta.version) + ",\n";
  j += "  \"git_commit\": " + jsonString(meta.gitCommit) + ",\n";
  j += "  \"backend\": " + jsonString(meta.backend) + ",\n";
  j += "  \"collective\": " + jsonString(ncclTestsName(meta.collective)) + ",\n";
  j += strprintf("  \"ranks\": %d,\n  \"hosts\": %d,\n", meta.ranks, meta.hosts);
  j += strprintf(
      "  \"options\": {\"minbytes\": %zu, \"maxbytes\": %zu, \"stepfactor\": %d, "
      "\"stepbytes\": %zu, \"iters\": %d, \"warmup_iters\": %d, \"check\": %d, "
      "\"average\": %d, \"blocking\": %d, \"bytes_per_size\": %zu},\n",
      o.minBytes, o.maxBytes, o.stepFactor, o.stepBytes, o.iters, o.warmup, o.check ? 1 : 0,
      static_cast<int>(o.average), o.blocking, o.bytesPerSize);
  j += "  \"env\": {" + env + "},\n";
  if (!meta.race.empty()) j += "  \"race\": " + jsonString(meta.race) + ",\n";
  j += "  \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const ResultRow& r = rows[i];
    j += i ? ",\n    " : "\n    ";
    j += strprintf(
        "{\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", "
        "\"root\": %d, \"algorithm\": ",
        r.bytes, r.count, dtypeName(r.dtype),
        collectiveHasOp(meta.collective) ? opName(r.op) : "none", r.root);
    j += jsonString(r.algorithm);
    if (!r.ran.empty()) j += ", \"ran\": " + jsonString(r.ran);
    j += ", \"out_of_place\": " + jsonMeasurement(r.outOfPlace) +
         ", \"in_place\": " + jsonMeasurement(r.inPlace);
    if (!r.roundsUs.empty()) {
      std::string list;
      for (double t : r.roundsUs) list += (list.empty() ? "" : ", ") + jsonNumber(t);
      j += ", \"rounds_us\": [" + list + "]";
    }
    if (r.simulated && r.simulated->time.timeUs > 0) {
      const Measurement& m = r.simulated->time;
      j += ", \"simulated\": {\"time_us\": " + jsonNumber(m.timeUs) +
           ", \"algbw_gbs\": " + jsonNumber(m.algBw) + ", \"busbw_gbs\": " + jsonNumber(m.busBw) +
           ", \"algorithm\": " + jsonString(r.simulated->algorithm) + "}";
    }
    j += "}";
  }
  j += rows.empty() ? "],\n" : "\n  ],\n";
  j += "  \"wrong_total\": " + (o.check ? std::to_string(wrongTotal) : std::string("null")) +
       ",\n  \"avg_busbw_gbs\": " + jsonNumber(avgBusBw) + "\n}\n";
  return j;
}

std::string formatCsv(const RunMetadata& meta, const std::vector<ResultRow>& rows) {
  std::string env;
  for (const auto& [key, value] : meta.env) env += (env.empty() ? "" : ";") + key + "=" + value;
  std::string c =
      "library,version,git_commit,collective,ranks,hosts,algorithm,size,count,type,redop,root,"
      "oop_time_us,oop_algbw_gbs,oop_busbw_gbs,oop_wrong,ip_time_us,ip_algbw_gbs,ip_busbw_gbs,"
      "ip_wrong,env\n";
  for (const ResultRow& r : rows) {
    c += csvField(meta.library) + "," + csvField(meta.version) + "," + csvField(meta.gitCommit) +
         "," + ncclTestsName(meta.collective) + strprintf(",%d,%d,", meta.ranks, meta.hosts) +
         csvField(r.algorithm) +
         strprintf(",%zu,%zu,%s,%s,%d", r.bytes, r.count, dtypeName(r.dtype),
                      collectiveHasOp(meta.collective) ? opName(r.op) : "none", r.root);
    for (const Measurement* m : {&r.outOfPlace, &r.inPlace}) {
      c += strprintf(",%.9g,%.9g,%.9g,", m->timeUs, m->algBw, m->busBw);
      if (m->wrong >= 0) c += std::to_string(m->wrong);
    }
    c += "," + csvField(env) + "\n";
  }
  return c;
}

std::string versionText(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

bool writeTextFile(const std::string& path, const std::string& text, const std::string& program) {
  FILE* f = std::fopen(path.c_str(), "w");
  const bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f && std::fclose(f) != 0) return false;
  if (!ok) std::fprintf(stderr, "%s: cannot write %s\n", program.c_str(), path.c_str());
  return ok;
}

}  // namespace loom::perf
