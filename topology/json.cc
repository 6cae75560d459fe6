// JSON models (docs/TOPOLOGY.md): nodes are referred to by name so a file reads and diffs well,
// bandwidths and latencies may carry units, and a full-duplex pair is one line ("duplex").
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "topology/topology.h"

namespace loom::topology {

namespace {

using nlohmann::json;

// Reads a node reference: a name, or an index for hand-written files.
Status resolveNode(const json& ref, const std::unordered_map<std::string, int32_t>& byName,
                   const std::string& where, int32_t* out) {
  if (ref.is_number_integer()) {
    *out = ref.get<int32_t>();
    return Status::ok();
  }
  if (!ref.is_string())
    return Status(loomInvalidArgument, where + ": expected a node name, got " + ref.dump());
  auto it = byName.find(ref.get<std::string>());
  if (it == byName.end())
    return Status(loomInvalidArgument, where + ": no node named '" + ref.get<std::string>() + "'");
  *out = it->second;
  return Status::ok();
}

// A host reference (the name of a Host node) → host index.
Status resolveHost(const json& ref, const std::unordered_map<std::string, int32_t>& byName,
                   const Topology& t, const std::string& where, int32_t* out) {
  int32_t node = 0;
  LOOM_TRY(resolveNode(ref, byName, where, &node));
  if (node < 0 || size_t(node) >= t.nodes.size() || t.nodes[size_t(node)].kind != NodeKind::Host)
    return Status(loomInvalidArgument, where + ": " + ref.dump() + " is not a host node");
  *out = t.nodes[size_t(node)].host;
  return Status::ok();
}

template <typename Parse>
Status readQuantity(const json& v, Parse parse, const std::string& where, double* out) {
  if (v.is_number()) return parse(v.dump(), out).withContext(where);
  if (v.is_string()) return parse(v.get<std::string>(), out).withContext(where);
  return Status(loomInvalidArgument, where + ": expected a number or a string, got " + v.dump());
}

const json& member(const json& object, const char* key) {
  static const json kNull;
  auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}

// The optional CPU figures of a host node (HostCpu): absent keys stay 0 ("not modelled").
Status readHostCpu(const json& node, NodeKind kind, const std::string& where, HostCpu* out) {
  static const char* const kKeys[] = {"cores",         "memBandwidth",      "stepOverhead",
                                      "cacheBytes",    "cacheBandwidth",    "messageCopies",
                                      "netMessageOverhead", "peerReadCopies",
                                      "singleCopyOverhead", "privateCacheBytes",
                                      "dirtyReadCopies", "streamingCopies", "barrierLatency",
                                      "sharedCoreLatency", "machine"};
  bool any = false;
  for (const char* key : kKeys) any = any || !member(node, key).is_null();
  if (!any) return Status::ok();
  if (kind != NodeKind::Host) {
    // "'cores', 'memBandwidth', ... and 'netMessageOverhead' belong on host nodes"
    std::string keys;
    const size_t n = std::size(kKeys);
    for (size_t i = 0; i < n; ++i)
      keys += (i == 0 ? "'" : i + 1 == n ? " and '" : ", '") + std::string(kKeys[i]) + "'";
    return Status(loomInvalidArgument, where + ": " + keys + " belong on host nodes");
  }
  auto count = [&](const char* key, uint64_t max, uint64_t* value) {
    const json& v = member(node, key);
    if (v.is_null()) return Status::ok();
    if (!v.is_number_unsigned() || v.get<uint64_t>() < 1 || v.get<uint64_t>() > max)
      return Status(loomInvalidArgument,
                    where + "." + key + ": expected a positive whole number, got " + v.dump());
    *value = v.get<uint64_t>();
    return Status::ok();
  };
  auto bandwidth = [&](const char* key, double* value) {
    const json& v = member(node, key);
    if (v.is_null()) return Status::ok();
    LOOM_TRY(readQuantity(v, parseBandwidth, where + "." + key, value));
    if (!(*value > 0)) return Status(loomInvalidArgument, where + "." + key + ": must be positive");
    return Status::ok();
  };
  uint64_t cores = 0;
  LOOM_TRY(count("cores", 1 << 20, &cores));
  out->cores = int32_t(cores);
  LOOM_TRY(count("cacheBytes", UINT64_MAX, &out->cacheBytes));
  LOOM_TRY(count("privateCacheBytes", UINT64_MAX, &out->privateCacheBytes));
  LOOM_TRY(bandwidth("memBandwidth", &out->memBandwidth));
  LOOM_TRY(bandwidth("cacheBandwidth", &out->cacheBandwidth));
  for (auto [key, value] : {std::pair{"messageCopies", &out->messageCopies},
                            std::pair{"peerReadCopies", &out->peerReadCopies},
                            std::pair{"dirtyReadCopies", &out->dirtyReadCopies},
                            std::pair{"streamingCopies", &out->streamingCopies}}) {
    const json& copies = member(node, key);
    if (copies.is_null()) continue;
    if (!copies.is_number() || !(copies.get<double>() > 0))
      return Status(loomInvalidArgument, where + "." + key +
                                             ": expected a positive number, got " + copies.dump());
    *value = copies.get<double>();
  }
  for (auto [key, value] : {std::pair{"stepOverhead", &out->stepOverhead},
                            std::pair{"netMessageOverhead", &out->netMessageOverhead},
                            std::pair{"singleCopyOverhead", &out->singleCopyOverhead},
                            std::pair{"barrierLatency", &out->barrierLatency},
                            std::pair{"sharedCoreLatency", &out->sharedCoreLatency}})
    if (!member(node, key).is_null())
      LOOM_TRY(readQuantity(node[key], parseLatency, where + "." + key, value));
  if (const json& machine = member(node, "machine"); !machine.is_null()) {
    if (!machine.is_string() || machine.get<std::string>().empty())
      return Status(loomInvalidArgument,
                    where + ".machine: expected the machine's name, got " + machine.dump());
    out->machine = machine.get<std::string>();
  }
  return Status::ok();
}

Status parseDocument(const json& doc, Topology* out) {
  Topology t;
  if (!doc.is_object()) return Status(loomInvalidArgument, "the model is not a JSON object");
  if (doc.contains("name")) t.name = doc["name"].get<std::string>();
  std::unordered_map<std::string, int32_t> byName;
  const json& nodes = member(doc, "nodes");
  if (!nodes.is_array()) return Status(loomInvalidArgument, "'nodes' must be an array");
  int32_t hosts = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {  // first pass: names, kinds, host order
    std::string where = strprintf("nodes[%zu]", i);
    Node node;
    auto kind = parseNodeKind(member(nodes[i], "kind").is_string()
                                  ? nodes[i]["kind"].get<std::string>() : "");
    if (!kind)
      return Status(loomInvalidArgument, where + ": 'kind' must be one of host, cpu, numa, gpu, "
                                                 "nic, switch; got " + member(nodes[i], "kind").dump());
    node.kind = *kind;
    if (!member(nodes[i], "name").is_string())
      return Status(loomInvalidArgument, where + ": 'name' must be a string");
    node.name = nodes[i]["name"].get<std::string>();
    if (node.kind == NodeKind::Host) node.host = hosts++;
    LOOM_TRY(readHostCpu(nodes[i], node.kind, where, &node.cpu));
    if (!byName.emplace(node.name, int32_t(i)).second)
      return Status(loomInvalidArgument, where + ": a second node named '" + node.name + "'");
    t.nodes.push_back(std::move(node));
  }
  for (size_t i = 0; i < nodes.size(); ++i) {  // second pass: hosts may be named before them
    const json& host = member(nodes[i], "host");
    if (host.is_null() || t.nodes[i].kind == NodeKind::Host) continue;
    LOOM_TRY(resolveHost(host, byName, t, strprintf("nodes[%zu].host", i), &t.nodes[i].host));
  }
  const json& links = member(doc, "links");
  if (!links.is_array() && !links.is_null())
    return Status(loomInvalidArgument, "'links' must be an array");
  for (size_t i = 0; i < links.size(); ++i) {
    const json& l = links[i];
    std::string where = strprintf("links[%zu]", i);
    Link link;
    LOOM_TRY(resolveNode(member(l, "from"), byName, where + ".from", &link.from));
    LOOM_TRY(resolveNode(member(l, "to"), byName, where + ".to", &link.to));
    LOOM_TRY(readQuantity(member(l, "bandwidth"), parseBandwidth, where + ".bandwidth",
                          &link.bandwidth));
    if (!member(l, "latency").is_null())
      LOOM_TRY(readQuantity(l["latency"], parseLatency, where + ".latency", &link.latency));
    if (member(l, "kind").is_string()) link.kind = l["kind"].get<std::string>();
    if (const json& b = member(l, "burstBytes"); !b.is_null()) {
      if (!b.is_number_unsigned())
        return Status(loomInvalidArgument,
                      where + ".burstBytes: expected a whole number of bytes, got " + b.dump());
      link.burstBytes = b.get<uint64_t>();
    }
    bool duplex = member(l, "duplex").is_boolean() && l["duplex"].get<bool>();
    t.links.push_back(link);
    if (duplex) {
      std::swap(link.from, link.to);
      t.links.push_back(std::move(link));
    }
  }
  const json& ranks = member(doc, "ranks");
  if (!ranks.is_array() && !ranks.is_null())
    return Status(loomInvalidArgument, "'ranks' must be an array");
  for (size_t i = 0; i < ranks.size(); ++i) {
    std::string where = strprintf("ranks[%zu]", i);
    Rank rank;
    LOOM_TRY(resolveNode(member(ranks[i], "endpoint"), byName, where + ".endpoint",
                         &rank.endpoint));
    const json& host = member(ranks[i], "host");
    if (!host.is_null()) {
      LOOM_TRY(resolveHost(host, byName, t, where + ".host", &rank.host));
    } else if (rank.endpoint >= 0 && size_t(rank.endpoint) < t.nodes.size()) {
      rank.host = t.nodes[size_t(rank.endpoint)].host;  // the endpoint's host by default
    }
    if (rank.host < 0)
      return Status(loomInvalidArgument,
                    where + ": no host: name one, or give the endpoint node a 'host'");
    t.ranks.push_back(rank);
  }
  *out = std::move(t);
  return Status::ok();
}

bool isReverse(const Link& a, const Link& b) {
  return a.from == b.to && a.to == b.from && a.bandwidth == b.bandwidth &&
         a.latency == b.latency && a.kind == b.kind && a.burstBytes == b.burstBytes;
}

}  // namespace

Status parseTopology(const std::string& text, Topology* out) {
  try {
    return parseDocument(json::parse(text), out);
  } catch (const json::exception& e) {
    return Status(loomInvalidArgument, std::string("topology JSON: ") + e.what());
  }
}

Status loadTopology(const std::string& path, Topology* out) {
  std::ifstream in(path);
  if (!in) return errorf(loomSystemError, "cannot open topology file '%s'", path.c_str());
  std::stringstream text;
  text << in.rdbuf();
  return parseTopology(text.str(), out).withContext(path);
}

// One node, link or rank per line: a 1024-node model stays a few MB and diffs line by line.
std::string toJson(const Topology& t) {
  auto nodeName = [&t](int32_t v) -> json {
    if (v >= 0 && size_t(v) < t.nodes.size()) return t.nodes[size_t(v)].name;
    return v;  // out of range: kept as an index so validate() can still say so after a load
  };
  std::vector<int32_t> hostNode = t.hostNodes();
  auto hostName = [&](int32_t h) -> json {
    return h >= 0 && size_t(h) < hostNode.size() ? nodeName(hostNode[size_t(h)]) : json(h);
  };
  std::string s = "{\n  \"name\": " + json(t.name).dump() + ",\n  \"nodes\": [";
  auto append = [&s](const json& item, bool first) { s += (first ? "\n    " : ",\n    ") + item.dump(); };
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    const Node& n = t.nodes[i];
    json item = {{"kind", nodeKindName(n.kind)}, {"name", n.name}};
    if (n.kind != NodeKind::Host && n.host >= 0) item["host"] = hostName(n.host);
    if (n.cpu.cores > 0) item["cores"] = n.cpu.cores;
    if (n.cpu.memBandwidth > 0) item["memBandwidth"] = formatBandwidth(n.cpu.memBandwidth);
    if (n.cpu.stepOverhead > 0) item["stepOverhead"] = formatLatency(n.cpu.stepOverhead);
    if (n.cpu.cacheBytes > 0) item["cacheBytes"] = n.cpu.cacheBytes;
    if (n.cpu.cacheBandwidth > 0) item["cacheBandwidth"] = formatBandwidth(n.cpu.cacheBandwidth);
    if (n.cpu.messageCopies > 0) item["messageCopies"] = n.cpu.messageCopies;
    if (n.cpu.peerReadCopies > 0) item["peerReadCopies"] = n.cpu.peerReadCopies;
    if (n.cpu.netMessageOverhead > 0)
      item["netMessageOverhead"] = formatLatency(n.cpu.netMessageOverhead);
    if (n.cpu.singleCopyOverhead > 0)
      item["singleCopyOverhead"] = formatLatency(n.cpu.singleCopyOverhead);
    if (n.cpu.privateCacheBytes > 0) item["privateCacheBytes"] = n.cpu.privateCacheBytes;
    if (n.cpu.dirtyReadCopies > 0) item["dirtyReadCopies"] = n.cpu.dirtyReadCopies;
    if (n.cpu.streamingCopies > 0) item["streamingCopies"] = n.cpu.streamingCopies;
    if (n.cpu.barrierLatency > 0) item["barrierLatency"] = formatLatency(n.cpu.barrierLatency);
    if (n.cpu.sharedCoreLatency > 0)
      item["sharedCoreLatency"] = formatLatency(n.cpu.sharedCoreLatency);
    if (!n.cpu.machine.empty()) item["machine"] = n.cpu.machine;
    append(item, i == 0);
  }
  s += "\n  ],\n  \"links\": [";
  for (size_t i = 0; i < t.links.size(); ++i) {
    const Link& l = t.links[i];
    json item = {{"from", nodeName(l.from)}, {"to", nodeName(l.to)},
                 {"bandwidth", formatBandwidth(l.bandwidth, isNetworkLinkKind(l.kind))},
                 {"latency", formatLatency(l.latency)}, {"kind", l.kind}};
    if (l.burstBytes > 0) item["burstBytes"] = l.burstBytes;
    bool duplex = i + 1 < t.links.size() && isReverse(l, t.links[i + 1]);
    if (duplex) item["duplex"] = true;
    append(item, i == 0);
    i += duplex;
  }
  s += "\n  ],\n  \"ranks\": [";
  for (size_t i = 0; i < t.ranks.size(); ++i)
    append({{"host", hostName(t.ranks[i].host)}, {"endpoint", nodeName(t.ranks[i].endpoint)}},
           i == 0);
  s += "\n  ]\n}\n";
  return s;
}

Status saveTopology(const Topology& t, const std::string& path) {
  std::ofstream out(path);
  out << toJson(t);
  out.close();
  if (!out) return errorf(loomSystemError, "cannot write topology file '%s'", path.c_str());
  return Status::ok();
}

}  // namespace loom::topology
