// What every part of loom-perf and its peer baselines (loom-mpi-perf, loom-gloo-perf) speaks:
// the toolkit's names and nccl-tests' units (toolkit/), in loom::perf. The parts, by job:
// options.h (the command line), check.h (inputs and the result check), output.h (the table,
// --json, --csv), sweep.h (the Backend a program supplies and the sweep that drives it, --race
// included), launch.h (-N's forked ranks) and compare.h (--compare with the peers).
#pragma once

#include "toolkit/json.h"
#include "toolkit/names.h"
#include "toolkit/units.h"

namespace loom::perf {

using toolkit::busBwFactor;
using toolkit::Collective;
using toolkit::collectiveHasOp;
using toolkit::collectiveHasRoot;
using toolkit::CollSizes;
using toolkit::collSizes;
using toolkit::JsonValue;
using toolkit::medianOf;
using toolkit::ncclTestsName;
using toolkit::pairedRatio;
using toolkit::parseCollective;
using toolkit::parseDtype;
using toolkit::parseJson;
using toolkit::parseOp;
using toolkit::parseSize;
using toolkit::sizeSweep;

}  // namespace loom::perf
