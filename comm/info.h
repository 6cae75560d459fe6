// What loom-info prints (the version, transports, reduction kernels, algorithms and every
// LOOM_* parameter with its value), as one JSON object: loomGetInfo's answer, for programs
// that read it as data through the C API alone (the Python package's loom.info()).
#pragma once

#include <string>

namespace loom {

// {"version": "0.1.0", "version_code": 100, "transports": [...], "auto_network": "tcp or ucx,
//  ..." (autoNetworkRule), "ucx": {"version", "transports",
//  "memory_types", "rdma", "cuda_memory"} (or {"error"}), "reduction_kernels": "avx2",
//  "algorithms": {"allreduce": ["ring", ...], ...},
//  "parameters": {"LOOM_TIMEOUT_MS": {"value", "default", "source", "description"}, ...}}
std::string infoJson();

}  // namespace loom
