#include "toolkit/units.h"

#include <algorithm>
#include <cstdint>

namespace loom::toolkit {

double busBwFactor(Collective c, int nranks) {
  const double n = nranks;
  switch (c) {
    case Collective::AllReduce:
      return 2.0 * (n - 1) / n;
    case Collective::AllGather:
    case Collective::ReduceScatter:
    case Collective::AlltoAll:
    case Collective::AlltoAllv:
    case Collective::Gather:
    case Collective::Scatter:
      return (n - 1) / n;
    case Collective::Broadcast:
    case Collective::Reduce:
    case Collective::SendRecv:
      return 1.0;
  }
  return 1.0;
}

CollSizes collSizes(Collective c, size_t sizeBytes, size_t elemSize, int nranks) {
  const size_t count = sizeBytes / elemSize;
  const size_t n = static_cast<size_t>(nranks);
  size_t perRank = count / n;
  // nccl-tests' gather and scatter round each rank's block down to whole 16 bytes.
  if (c == Collective::Gather || c == Collective::Scatter)
    perRank -= perRank % std::max<size_t>(1, 16 / elemSize);
  CollSizes s;
  switch (c) {
    case Collective::AllGather:
    case Collective::Gather:
      s.sendCount = perRank;
      s.recvCount = perRank * n;
      s.paramCount = perRank;
      s.sendInPlaceOffset = perRank;
      break;
    case Collective::ReduceScatter:
    case Collective::Scatter:
      s.sendCount = perRank * n;
      s.recvCount = perRank;
      s.paramCount = perRank;
      s.recvInPlaceOffset = perRank;
      break;
    case Collective::AlltoAll:
    case Collective::AlltoAllv:
      s.sendCount = perRank * n;
      s.recvCount = perRank * n;
      s.paramCount = perRank;
      break;
    case Collective::AllReduce:
    case Collective::Broadcast:
    case Collective::Reduce:
    case Collective::SendRecv:
      s.sendCount = s.recvCount = s.paramCount = count;
      break;
  }
  return s;
}

std::optional<size_t> parseSize(std::string_view text) {
  if (text.empty()) return std::nullopt;
  size_t value = 0;
  size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const size_t digit = static_cast<size_t>(text[i] - '0');
    if (value > (SIZE_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  if (i == 0) return std::nullopt;
  int shift = 0;
  if (i < text.size()) {
    switch (text[i]) {
      case 'k':
      case 'K':
        shift = 10;
        break;
      case 'm':
      case 'M':
        shift = 20;
        break;
      case 'g':
      case 'G':
        shift = 30;
        break;
      default:
        return std::nullopt;
    }
    ++i;
    if (i < text.size() && (text[i] == 'B' || text[i] == 'b')) ++i;  // "64KB" too
  }
  if (i != text.size()) return std::nullopt;
  if (shift && value > (SIZE_MAX >> shift)) return std::nullopt;
  return value << shift;
}

std::vector<size_t> sizeSweep(size_t minBytes, size_t maxBytes, int factor, size_t stepBytes) {
  std::vector<size_t> sizes;
  for (size_t size = minBytes; size <= maxBytes;) {
    sizes.push_back(size);
    size_t next;
    if (factor > 1) {
      // 0 * factor would never advance; overflow would wrap around.
      if (size == 0) {
        next = 1;
      } else if (size > SIZE_MAX / static_cast<size_t>(factor)) {
        break;
      } else {
        next = size * static_cast<size_t>(factor);
      }
    } else {
      if (stepBytes == 0 || size > SIZE_MAX - stepBytes) break;
      next = size + stepBytes;
    }
    size = next;
  }
  return sizes;
}

double medianOf(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

double pairedRatio(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return -1;
  std::vector<double> ratios;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] > 0 && b[i] > 0) ratios.push_back(a[i] / b[i]);
  return medianOf(ratios);
}

}  // namespace loom::toolkit
