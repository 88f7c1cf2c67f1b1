// The flags that shape a plan search (planner/space.h SearchConstraints and the memory kept
// free), shared by the commands that search: plan and sweep.
#pragma once

#include <boost/program_options.hpp>

#include "cli/flags.h"
#include "core/model_spec.h"
#include "planner/space.h"

namespace ptdp::cli {

// --fix KEY=VALUE (repeatable), --num-layers-per-virtual-pipeline-stage, --max-tp, --max-pp,
// --max-cp, --max-ep, --max-micro-batch, --memory-headroom, --no-recompute,
// --no-sequence-parallel, --no-distributed-optimizer, --no-overlap, --schedules.
void AddSearchConstraintOptions(boost::program_options::options_description& options);

// Those flags (all but --memory-headroom and --no-overlap) as constraints; `model` gives the
// layers --num-layers-per-virtual-pipeline-stage divides. Errors name the flag.
SearchConstraints ReadSearchConstraints(const Flags& flags, const ModelSpec& model);

// --memory-headroom: a fraction (0.1) or a percentage (10%) below 1; 0 when not given.
double ReadHeadroom(const Flags& flags);

}  // namespace ptdp::cli
