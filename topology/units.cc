// Bandwidth and latency spellings for the JSON models ("400Gbit", "1.5us"). Parsing builds the
// decimal exponent into the text handed to strtod, so "400Gbit" is exactly 400e9 / 8 and a
// saved model loads back bit for bit; formatting only offers spellings that parse back exactly.
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "topology/topology.h"

namespace loom::topology {

namespace {

struct Unit {
  const char* suffix;
  int exponent10;  // decimal prefix
  int shift2;      // binary prefix (Ki = 10 ...)
  bool bits;       // divide by 8
};

// Longest suffixes first so "Gbit" is not read as "G" + "bit"... and "ms" before "s".
constexpr Unit kBandwidthUnits[] = {
    {"Tbit", 12, 0, true}, {"Gbit", 9, 0, true},  {"Mbit", 6, 0, true}, {"kbit", 3, 0, true},
    {"bit", 0, 0, true},   {"TiB", 0, 40, false}, {"GiB", 0, 30, false}, {"MiB", 0, 20, false},
    {"KiB", 0, 10, false}, {"Tb", 12, 0, true},   {"Gb", 9, 0, true},    {"Mb", 6, 0, true},
    {"kb", 3, 0, true},    {"TB", 12, 0, false},  {"GB", 9, 0, false},   {"MB", 6, 0, false},
    {"kB", 3, 0, false},   {"KB", 3, 0, false},   {"B", 0, 0, false},
};
constexpr Unit kLatencyUnits[] = {
    {"ns", -9, 0, false}, {"us", -6, 0, false}, {"ms", -3, 0, false}, {"s", 0, 0, false}};
// Spellings formatBandwidth/formatLatency try, in order of preference on equal length.
constexpr Unit kBandwidthOut[] = {{"Tbit", 12, 0, true}, {"Gbit", 9, 0, true},
                                  {"Mbit", 6, 0, true},  {"TB", 12, 0, false},
                                  {"GB", 9, 0, false},   {"MB", 6, 0, false}};

std::string_view trim(std::string_view s) {
  while (!s.empty() && isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Reads "<number><unit>" with the unit from `units` (or none), returning false if malformed.
template <size_t N>
bool parseScaled(std::string_view text, const Unit (&units)[N], double* out) {
  text = trim(text);
  const Unit* unit = nullptr;
  for (const Unit& u : units) {
    if (endsWith(text, u.suffix)) {
      unit = &u;
      text = trim(text.substr(0, text.size() - strlen(u.suffix)));
      break;
    }
  }
  // The exponent is appended to the text, so "1e3Gbit" would not parse: refuse it clearly.
  if (text.empty() || (unit && text.find_first_of("eE") != std::string_view::npos)) return false;
  std::string number(text);
  if (unit && unit->exponent10 != 0) number += "e" + std::to_string(unit->exponent10);
  char* end = nullptr;
  double v = strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(v)) return false;
  if (unit) v = std::ldexp(v, unit->shift2 - (unit->bits ? 3 : 0));
  *out = v;
  return true;
}

// The spelling of `value` among `units` that parses back exactly: the first unit (they come
// in order of preference) whose number is at least 1 with at most four significant digits, or
// failing that the shortest, or the plain number.
template <size_t N>
std::string formatScaled(double value, const std::vector<const Unit*>& units,
                         const Unit (&parseUnits)[N]) {
  std::string shortest = strprintf("%.17g", value);
  for (const Unit* u : units) {
    double mantissa = std::ldexp(value, (u->bits ? 3 : 0) - u->shift2) /
                      std::pow(10.0, u->exponent10);
    for (int precision = 1; precision <= 17; ++precision) {
      std::string s = strprintf("%.*g", precision, mantissa);
      if (s.find_first_of("eE") != std::string::npos) continue;  // "4e+02": more digits
      double back = 0;
      if (!parseScaled(s + u->suffix, parseUnits, &back) || back != value) continue;
      if (precision <= 4 && mantissa >= 1) return s + u->suffix;
      if (s.size() + strlen(u->suffix) < shortest.size()) shortest = s + u->suffix;
      break;
    }
  }
  return shortest;
}

}  // namespace

bool isNetworkLinkKind(std::string_view kind) {
  return kind == "eth" || kind == "ib" || kind == "roce" || kind == "net" || kind == "tcp";
}

Status parseBandwidth(std::string_view text, double* bytesPerSecond) {
  std::string_view t = trim(text);
  for (std::string_view perSecond : {"/s", "ps"})
    if (endsWith(t, perSecond)) t.remove_suffix(perSecond.size());
  double v = 0;
  if (!parseScaled(t, kBandwidthUnits, &v) || !(v > 0))
    return Status(loomInvalidArgument,
                  "bandwidth '" + std::string(text) +
                      "' is not a positive number of bytes/s or a number with a unit such as "
                      "400Gbit, 100Gbps, 25GB, 25GB/s, 1.5GiB");
  *bytesPerSecond = v;
  return Status::ok();
}

Status parseLatency(std::string_view text, double* seconds) {
  double v = 0;
  if (!parseScaled(text, kLatencyUnits, &v) || !(v >= 0))
    return Status(loomInvalidArgument,
                  "latency '" + std::string(text) +
                      "' is not a number of seconds or a number with a unit (ns, us, ms, s)");
  *seconds = v;
  return Status::ok();
}

std::string formatBandwidth(double bytesPerSecond, bool preferBits) {
  std::vector<const Unit*> order;
  for (bool bits : {preferBits, !preferBits})
    for (const Unit& u : kBandwidthOut)
      if (u.bits == bits) order.push_back(&u);
  return formatScaled(bytesPerSecond, order, kBandwidthUnits);
}

std::string formatLatency(double seconds) {
  std::vector<const Unit*> order;  // largest first: "1.5us", not "1500ns"
  for (size_t i = std::size(kLatencyUnits); i-- > 0;) order.push_back(&kLatencyUnits[i]);
  return formatScaled(seconds, order, kLatencyUnits);
}

}  // namespace loom::topology
