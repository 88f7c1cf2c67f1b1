#include "executor/train/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "core/json.h"
#include "core/schedule.h"
#include "executor/backend/cuda.h"
#include "executor/backend/timed.h"
#include "executor/model/context_parallel.h"
#include "executor/model/gpt.h"
#include "executor/model/gpt_params.h"
#include "executor/model/rng.h"
#include "executor/train/checkpoint.h"
#include "executor/train/data.h"
#include "executor/train/optimizer.h"
#include "executor/train/pipeline.h"

namespace ptdp {
namespace {

bool Synthetic(const ExecuteOptions& o) { return o.data == "synthetic"; }

// Ranks sharing this machine, from the launcher (OpenMPI, MPICH/PMI, Slurm); `fallback` else.
int64_t LocalRanks(int64_t fallback) {
  for (const char* name :
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* v = std::getenv(name); v != nullptr && std::atoi(v) > 0) return std::atoi(v);
  }
  return fallback;
}

// Rough bytes one rank needs: weights, gradients, optimizer state and the activations of the
// micro-batches in flight (Korthikanti et al. 2022, Table 2: its 2 bytes for 16-bit data, else
// 4, and counting the first stage's p micro-batches; a CP rank holds s / cp tokens).
// The experts split over etp x ep x pp ranks, their state over the expert data-parallel ranks.
// Mixed precision: 16-bit weights, fp32 main_grad, and fp32 main weights beside the moments.
double EstimateRankBytes(const Plan& plan, DType dtype) {
  const ModelSpec& m = plan.model;
  const ParallelConfig& p = plan.parallel;
  const double experts = static_cast<double>(m.NumMoeLayers()) * m.num_experts *
                         static_cast<double>(MlpParameters(m, m.moe_ffn_hidden_size));
  const double dense =
      (static_cast<double>(CountParameters(m, p.tp).total) - experts) / (p.tp * p.pp) +
      static_cast<double>(PaddedVocabSize(m, p.tp)) * m.hidden_size / p.tp;
  const double expert_share = experts / (static_cast<double>(p.expert_tp()) * p.ep * p.pp);
  const double bytes = static_cast<double>(SizeOf(dtype));
  const double main = static_cast<double>(SizeOf(MainDType(dtype)));
  const double optimizer = (plan.training.optimizer == Optimizer::kAdam ? 2.0 : 1.0) +
                           (Is16Bit(dtype) ? 1.0 : 0.0);  // the main weights
  const bool sharded = p.distributed_optimizer;
  // Per parameter: weights and gradients (both in `bytes`, or 16-bit and fp32), and the state.
  const double replicated = (bytes + main) / main;
  const double state =
      main *
      (dense * (replicated + optimizer / static_cast<double>(sharded ? p.dp_cp() : 1)) +
       expert_share * (replicated + optimizer / static_cast<double>(sharded ? p.expert_dp() : 1)));
  const double s = static_cast<double>(m.seq_length) / p.cp, b = p.micro_batch_size,
               h = m.hidden_size, a = m.num_attention_heads;
  const double per_layer = (Is16Bit(dtype) ? 1.0 : 2.0) * s * b * h * (34.0 + 5.0 * a * s / h);
  // 1F1B's first stage holds pp micro-batches of L / pp layers: L layers' worth.
  const double activations = per_layer * m.num_layers / p.tp;
  return state + activations;
}

std::string Eta(double seconds) {
  if (seconds < 60) return fmt::format("{:.1f} s", seconds);
  const auto s = static_cast<int64_t>(seconds);
  if (s < 3600) return fmt::format("{}m {:02d}s", s / 60, s % 60);
  return fmt::format("{}h {:02d}m", s / 3600, s / 60 % 60);
}

std::string RankName(const RankReport& r, const ParallelConfig& p) {
  const RankCoords& c = r.coords;
  const std::string cp = p.cp > 1 ? fmt::format(", cp {}", c.cp) : "";
  const std::string ep = p.ep > 1 ? fmt::format(", ep {}", r.expert.ep) : "";
  return fmt::format("rank {} (tp {}{}, pp {}, dp {}{})", r.world_rank, c.tp, cp, c.pp, c.dp, ep);
}

// Per-rank measurements shipped to rank 0 as text: a header line, one line per step, one line
// per event (only when traces are kept).
std::string PackRank(const RankReport& r, const std::vector<PipelineStepStats>& steps,
                     const std::vector<TraceEvent>& events) {
  std::ostringstream out;
  out.precision(17);
  out << r.world_rank << ' ' << r.coords.tp << ' ' << r.coords.pp << ' ' << r.coords.dp << ' '
      << r.coords.cp << ' ' << r.expert.etp << ' ' << r.expert.ep << ' ' << r.expert.edp << ' '
      << r.busy_s << ' ' << r.recv_wait_s << ' ' << r.parameters << ' ' << r.memory.peak_total_bytes
      << ' ' << r.peak_reserved_bytes;
  for (int i = 0; i < kNumMemCategories; ++i)
    out << ' ' << r.memory.peak_bytes[static_cast<size_t>(i)];
  out << ' ' << steps.size() << ' ' << events.size() << '\n';
  for (const PipelineStepStats& s : steps) {
    out << s.start_s << ' ' << s.end_s << ' ' << s.busy_s;
    for (double k : s.kernel_s) out << ' ' << k;
    out << '\n';
  }
  for (const TraceEvent& e : events) {
    out << e.start_s << ' ' << e.duration_s << ' ' << e.microbatch << ' ' << e.chunk << ' '
        << e.category << ' ' << e.name << '\n';
  }
  return out.str();
}

void UnpackRank(const std::string& text, RankReport* r, std::vector<PipelineStepStats>* steps,
                std::vector<TraceEvent>* events) {
  std::istringstream in(text);
  size_t nsteps = 0, nevents = 0;
  in >> r->world_rank >> r->coords.tp >> r->coords.pp >> r->coords.dp >> r->coords.cp >>
      r->expert.etp >> r->expert.ep >> r->expert.edp >> r->busy_s >> r->recv_wait_s >>
      r->parameters >> r->memory.peak_total_bytes >> r->peak_reserved_bytes;
  for (int i = 0; i < kNumMemCategories; ++i) in >> r->memory.peak_bytes[static_cast<size_t>(i)];
  in >> nsteps >> nevents;
  steps->resize(nsteps);
  for (PipelineStepStats& s : *steps) {
    in >> s.start_s >> s.end_s >> s.busy_s;
    for (double& k : s.kernel_s) in >> k;
  }
  for (size_t i = 0; i < nevents; ++i) {
    TraceEvent e;
    e.track = r->world_rank;
    in >> e.start_s >> e.duration_s >> e.microbatch >> e.chunk >> e.category;
    in.get();
    std::getline(in, e.name);
    events->push_back(std::move(e));
  }
  PTDP_CHECK(!in.fail());
}

// The token source: synthetic, or a file (the default corpus when none is named).
TokenData LoadTokens(const ModelSpec& m, const TrainingSpec& training,
                     const ExecuteOptions& options) {
  return Synthetic(options)
             ? TokenData::Synthetic(m.vocab_size, static_cast<uint64_t>(training.seed))
             : TokenData::FromFile(options.data.empty() ? kDefaultDataFile : options.data,
                                   m.seq_length, static_cast<uint64_t>(training.seed));
}

// A common time origin: the earliest rank's clock after a barrier when every rank runs on this
// host (one monotonic clock), else each rank's own barrier exit.
void SetCommonOrigin(Comm& world, Recorder& recorder) {
  world.Barrier();
  recorder.SetOrigin();
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const auto id = static_cast<double>(Fnv1a64(host) >> 12);  // exact in a double
  const bool one_host =
      world.AllReduceHost(id, ReduceOp::kMax) == -world.AllReduceHost(-id, ReduceOp::kMax);
  const double origin = -world.AllReduceHost(-Recorder::ClockS(), ReduceOp::kMax);
  if (one_host) recorder.SetOriginClockS(origin);
}

// The plan's data-parallel overlap, with Megatron's bucket size for its dp x cp.
DataParallelOverlap Overlap(const Plan& plan) {
  return {plan.options.overlap_grad_reduce, plan.options.overlap_param_gather,
          DdpBucketParameters(plan.options, plan.parallel.dp_cp())};
}

// What the phases of a run share: its inputs and this rank's objects.
struct Run {
  const Plan& plan;
  const ExecuteOptions& options;
  ProcessGroups& groups;
  Backend& backend;
  const TokenData& data;
  Recorder& recorder;
  GptParams& params;
  PipelineRunner& runner;
  TrainingOptimizer& optimizer;
  const std::string& layout;  // the checkpoint layout (CheckpointLayout)
  TimedBackend* timed;        // `backend` when it times kernels by class, else nullptr
  std::string run_id = {};    // the run's identity (checkpoint.h), set once it is known
};

// Loads the checkpoint in options.load_dir into the parameters and optimizer state, checking
// that it continues this run (same seed, consistent data position); returns its state.
CheckpointState LoadResumeCheckpoint(const Run& run) {
  const ExecuteOptions& options = run.options;
  const TrainingSpec& training = run.plan.training;
  const CheckpointState s = LoadCheckpoint(options.load_dir, run.layout, run.params.values(),
                                           run.optimizer.state(), run.groups, run.backend);
  if (s.seed != training.seed) {
    throw InputError({options.load_dir, 0, "training.seed"},
                     fmt::format("the checkpoint was trained with seed {}, the plan says {}",
                                 s.seed, training.seed));
  }
  if (s.sequences_consumed != s.step * training.global_batch_size) {
    throw InputError({options.load_dir, 0, ""}, "inconsistent data position in the checkpoint");
  }
  return s;
}

// A new run's identity, made by world rank 0 and sent to every rank: four 32-bit words, each
// exact in the double of a host all-reduce (a sum with 0 from the other ranks).
std::string AgreeOnNewRunId(Comm& world) {
  const std::string mine = world.rank() == 0 ? NewRunId() : std::string(32, '0');
  std::string id;
  for (size_t i = 0; i < 4; ++i) {
    const uint32_t word = static_cast<uint32_t>(std::stoul(mine.substr(8 * i, 8), nullptr, 16));
    const double sum = world.AllReduceHost(world.rank() == 0 ? word : 0.0, ReduceOp::kSum);
    id += fmt::format("{:08x}", static_cast<uint32_t>(sum));
  }
  PTDP_CHECK(IsRunId(id));
  return id;
}

// The run's identity and its first line on `progress` when it saves or loads checkpoints:
// resuming continues the checkpoint's run (a format-1 checkpoint has none: the run gets a new
// one); a run from the initialisation gets a new one.
std::string DecideRunId(const Run& run, const CheckpointState* loaded, std::ostream* progress) {
  const ExecuteOptions& options = run.options;
  if (loaded != nullptr && !loaded->run_id.empty()) {
    if (progress != nullptr) {
      *progress << fmt::format("run {}: resumed from {} at step {}\n", loaded->run_id,
                               options.load_dir, loaded->step);
    }
    return loaded->run_id;
  }
  // A rank run alone (--profile-rank) has stand-in groups: no other rank to agree with.
  const std::string id =
      options.profile_rank >= 0 ? NewRunId() : AgreeOnNewRunId(*run.groups.world);
  if (progress == nullptr) return id;
  if (loaded != nullptr) {
    *progress << fmt::format(
        "run {}: resumed from {} at step {}, a checkpoint of format version 1 (no run id): a "
        "new run id from here on\n",
        id, options.load_dir, loaded->step);
  } else if (!options.save_dir.empty()) {
    *progress << fmt::format("run {}: a new run, saving into {}\n", id, options.save_dir);
  }
  return id;
}

// A micro-batch from `fill(j, tokens)`, which writes the S + 1 tokens of its sequence j;
// inputs/targets (S_cp * B) in (local sequence, batch) order. Every CP rank of a DP rank reads
// the same sequences and keeps its two chunks of each (get_batch_on_this_cp_rank).
MicroBatch MakeMicroBatch(const Run& run, const std::function<void(int64_t, int32_t*)>& fill) {
  const int64_t seq = run.plan.model.seq_length, mbs = run.plan.parallel.micro_batch_size;
  const SequenceShard shard{seq, run.plan.parallel.cp, run.groups.coords.cp};
  const int64_t local_seq = shard.local();
  std::vector<int32_t> inputs(static_cast<size_t>(local_seq * mbs)), targets(inputs.size());
  std::vector<int32_t> tokens(static_cast<size_t>(seq + 1));
  for (int64_t j = 0; j < mbs; ++j) {
    fill(j, tokens.data());
    for (int64_t s = 0; s < local_seq; ++s) {
      const auto at = static_cast<size_t>(shard.Position(s));
      inputs[static_cast<size_t>(s * mbs + j)] = tokens[at];
      targets[static_cast<size_t>(s * mbs + j)] = tokens[at + 1];
    }
  }
  MicroBatch mb;
  mb.inputs = std::make_shared<Tensor>(
      run.backend, DType::kI32, std::vector<int64_t>{local_seq * mbs}, MemCategory::kActivations);
  mb.targets = std::make_shared<Tensor>(
      run.backend, DType::kI32, std::vector<int64_t>{local_seq * mbs}, MemCategory::kActivations);
  run.backend.Upload(mb.inputs->span(), inputs.data());
  run.backend.Upload(mb.targets->span(), targets.data());
  return mb;
}

// The job's loss from each rank's `mine` (its last stage's mean over its micro-batches): the
// mean over the data-parallel replicas and context-parallel ranks of the last stage's (tp rank 0
// reports), each of which averages the same number of tokens, so this is the mean over every
// token of the step, as Megatron's loss summed over the CP group and divided by the total token
// count. A profiled rank alone: its own on the last stage, else 0.
double JobLoss(const Run& run, double mine) {
  const ParallelConfig& par = run.plan.parallel;
  const RankCoords& coords = run.groups.coords;
  const bool last_stage = coords.pp == par.pp - 1;
  if (run.options.profile_rank >= 0) return last_stage ? mine : 0.0;
  const double contribution = last_stage && coords.tp == 0 ? mine : 0.0;
  return run.groups.world->AllReduceHost(contribution, ReduceOp::kSum) /
         static_cast<double>(par.dp_cp());
}

// Validation: the first GBS windows of the held-out split (wrapping around when it is
// shorter), the same every time, in the training batch's shape; the mean loss per token.
double ValidationLoss(const Run& run, int64_t val_count) {
  const ParallelConfig& par = run.plan.parallel;
  const RankCoords& coords = run.groups.coords;
  const int64_t gbs = run.plan.training.global_batch_size, mbs = par.micro_batch_size;
  const int64_t seq = run.plan.model.seq_length;
  const int64_t vbase = coords.dp * (gbs / par.dp);
  const double mine = run.runner.Evaluate([&](int i) {
    return MakeMicroBatch(run, [&](int64_t j, int32_t* tokens) {
      run.data.ValidationSequence(static_cast<uint64_t>((vbase + i * mbs + j) % val_count),
                                  static_cast<int>(seq), tokens);
    });
  });
  return JobLoss(run, mine);
}

// One training step: the pipeline over this rank's micro-batches (its stats appended to
// `step_stats`), the optimizer, and the step's loss, gradient norm and time.
StepLog TrainStep(const Run& run, int64_t step, std::vector<PipelineStepStats>& step_stats) {
  const ExecuteOptions& options = run.options;
  const ParallelConfig& par = run.plan.parallel;
  const RankCoords& coords = run.groups.coords;
  const int64_t gbs = run.plan.training.global_batch_size, mbs = par.micro_batch_size;
  const int64_t seq = run.plan.model.seq_length;
  if (options.on_step_begin) options.on_step_begin(step);
  if (options.on_operation) {
    run.runner.set_after_operation(
        [&on_operation = options.on_operation, step](int64_t op) { on_operation(step, op); });
  }
  if (run.timed != nullptr) run.timed->Lap();  // what ran since the last step is not the step's
  const double t0 = run.recorder.Now();
  // This rank's sequences: the step's block for its data-parallel index.
  const int64_t base = (step - 1) * gbs + coords.dp * (gbs / par.dp);
  auto batch = [&](int i) {
    return MakeMicroBatch(run, [&](int64_t j, int32_t* tokens) {
      run.data.TrainSequence(static_cast<uint64_t>(base + i * mbs + j), static_cast<int>(seq),
                             tokens);
    });
  };
  // fp16 multiplies the loss by the loss scaler's scale too (the optimizer divides it out).
  const double loss_scale = 1.0 / static_cast<double>(gbs * seq) * run.optimizer.loss_scale();
  const PipelineStepStats stats = run.runner.RunStep(batch, loss_scale);
  step_stats.push_back(stats);
  if (run.timed != nullptr) run.timed->set_phase(TimedBackend::Phase::kOptimizer);
  const OptimizerStepInfo info = run.optimizer.Step(step);
  if (run.timed != nullptr) run.timed->set_phase(TimedBackend::Phase::kByMethod);
  const double loss = JobLoss(run, stats.loss);
  Synchronize(run.backend);  // the optimizer's last kernels belong to the step
  const double t1 = run.recorder.Now();
  if (run.timed != nullptr) step_stats.back().kernel_s = run.timed->Lap();
  run.recorder.Add(fmt::format("step {}", step), "other", t0, t1);

  StepLog log;
  log.step = step;
  log.loss = loss;
  log.grad_norm = info.grad_norm;
  log.loss_scale = info.loss_scale;
  log.skipped = info.skipped;
  log.time_s = t1 - t0;
  return log;
}

// Whether a step is due for something done every `interval` steps (0: never) and after the last.
bool Due(int64_t step, int64_t last, int64_t interval) {
  return step == last || (interval > 0 && step % interval == 0);
}

// The progress line of the last step in result.steps, with the time left at the mean step time.
void PrintProgress(std::ostream& out, const ExecuteOptions& options, const ExecuteResult& result,
                   bool evaluated) {
  const StepLog& log = result.steps.back();
  const int width = static_cast<int>(std::to_string(options.steps).size());
  double mean = 0;
  for (const StepLog& s : result.steps) mean += s.time_s;
  mean /= static_cast<double>(result.steps.size());
  // fp16: the loss scale of the step, and whether an overflow skipped its update.
  const std::string scaling =
      options.dtype != DType::kF16
          ? ""
          : fmt::format(" | loss scale {:g}{}", log.loss_scale, log.skipped ? " (skipped)" : "");
  out << fmt::format(
      "step {:>{}}/{} | loss {:.4f} | grad norm {:.3f}{} | {:.3f} s | {:.0f} tokens/s | ETA "
      "{}{}\n",
      log.step, width, options.steps, log.loss, log.grad_norm, scaling, log.time_s,
      static_cast<double>(result.tokens_per_step) / log.time_s,
      Eta(mean * static_cast<double>(options.steps - log.step)),
      evaluated ? fmt::format(" | validation loss {:.4f}", log.validation_loss) : "");
  out.flush();
}

// Saves the checkpoint of `step` in options.save_dir, and says so on `progress` when given.
void SaveStepCheckpoint(const Run& run, int64_t step, std::ostream* progress) {
  const TrainingSpec& training = run.plan.training;
  const double ts = run.recorder.Now();
  const ExecuteOptions& options = run.options;
  SaveOptions save;
  save.replace_other_runs =
      options.save_overwrite || ResumesFromFolder(options.load_dir, options.save_dir);
  if (options.on_save) {
    save.fault_hook = [&options, step](std::string_view phase) { options.on_save(step, phase); };
  }
  SaveCheckpoint(options.save_dir,
                 {step, step * training.global_batch_size, training.seed, run.run_id}, run.layout,
                 run.params.values(), run.optimizer.state(), run.groups, run.backend, save);
  run.recorder.Add("checkpoint", "other", ts, run.recorder.Now());
  if (progress != nullptr) {
    *progress << fmt::format("saved checkpoint of step {} in {}\n", step, run.options.save_dir);
  }
}

// Steps first_step to options.steps, each trained, then validated and saved when due, logged in
// result.steps and on world rank 0's `progress`; returns this rank's pipeline stats per step.
std::vector<PipelineStepStats> TrainSteps(const Run& run, int64_t first_step, int64_t val_count,
                                          std::ostream* progress, ExecuteResult& result) {
  const ExecuteOptions& options = run.options;
  const bool reports = run.groups.world->rank() == 0 || options.profile_rank >= 0;
  std::ostream* const rank0_progress = reports ? progress : nullptr;
  std::vector<PipelineStepStats> step_stats;
  for (int64_t step = first_step; step <= options.steps; ++step) {
    StepLog log = TrainStep(run, step, step_stats);
    if (options.on_step_end) options.on_step_end(step);
    const bool eval_now = val_count > 0 && Due(step, options.steps, options.eval_interval);
    if (eval_now) {
      run.optimizer.FinishParamGather();
      const double te = run.recorder.Now();
      log.validation_loss = ValidationLoss(run, val_count);
      run.recorder.Add("validation", "other", te, run.recorder.Now());
    }
    result.steps.push_back(log);
    if (rank0_progress != nullptr) PrintProgress(*rank0_progress, options, result, eval_now);
    if (!options.save_dir.empty() && Due(step, options.steps, options.save_interval)) {
      run.optimizer.FinishParamGather();
      SaveStepCheckpoint(run, step, rank0_progress);
    }
  }
  run.optimizer.FinishParamGather();  // the final model is complete
  return step_stats;
}

// This rank's report for world rank 0: where it sits, its memory and parameters, and its busy
// and receive-wait time over the measured steps (the steps from `skip` on).
RankReport OwnReport(const Run& run, const std::vector<PipelineStepStats>& step_stats,
                     size_t skip) {
  RankReport mine;
  mine.world_rank = run.groups.world->rank();
  mine.coords = run.groups.coords;
  mine.expert = run.groups.expert_coords;
  mine.memory = run.backend.memory();
  mine.peak_reserved_bytes = CudaMemory(run.backend).peak_reserved_bytes;
  mine.parameters = run.params.values().numel;
  for (size_t i = skip; i < step_stats.size(); ++i) {
    mine.busy_s += step_stats[i].busy_s;
    mine.recv_wait_s += step_stats[i].recv_wait_s;
    for (size_t c = 0; c < mine.kernel_s.size(); ++c) mine.kernel_s[c] += step_stats[i].kernel_s[c];
  }
  return mine;
}

// On world rank 0: every rank's report, track and trace events from `packed` into `result`;
// returns each rank's pipeline stats per step.
std::vector<std::vector<PipelineStepStats>> UnpackRanks(const std::vector<std::string>& packed,
                                                        const ParallelConfig& par,
                                                        ExecuteResult& result) {
  std::vector<std::vector<PipelineStepStats>> all_steps(packed.size());
  for (size_t r = 0; r < packed.size(); ++r) {
    RankReport report;
    UnpackRank(packed[r], &report, &all_steps[r], &result.events);
    report.expert.pp = report.coords.pp;
    result.ranks.push_back(report);
    result.tracks.push_back({report.world_rank, RankName(report, par)});
  }
  return all_steps;
}

// On world rank 0: per step, the pipeline's span over every rank and its bubble; over the
// measured steps (from `skip` on), the mean bubble and each stage's mean busy time per rank, and
// with `kernel_classes` each rank's kernel seconds by class and each stage's mean per step.
void StepFigures(const std::vector<std::vector<PipelineStepStats>>& all_steps, size_t nsteps,
                 size_t skip, const ParallelConfig& par, bool kernel_classes,
                 ExecuteResult& result) {
  result.stage_busy_s.assign(static_cast<size_t>(par.pp), 0.0);
  const auto measured = static_cast<int64_t>(nsteps - skip);
  result.measured_steps = measured;
  for (size_t i = 0; i < nsteps; ++i) {
    double start = 1e300, end = -1e300;
    for (const auto& steps : all_steps) {
      start = std::min(start, steps[i].start_s);
      end = std::max(end, steps[i].end_s);
    }
    const double span = end - start;
    double idle = 0;
    for (const auto& steps : all_steps) idle += 1.0 - steps[i].busy_s / span;
    result.steps[i].pipeline_s = span;
    result.steps[i].bubble_fraction = idle / static_cast<double>(all_steps.size());
    if (i >= skip) result.bubble_fraction += result.steps[i].bubble_fraction / measured;
  }
  // The ranks reported per stage: all tp x cp x dp of a job, the one of a profiled rank.
  std::vector<double> ranks_per_stage(static_cast<size_t>(par.pp), 0.0);
  for (const RankReport& r : result.ranks) ranks_per_stage[static_cast<size_t>(r.coords.pp)] += 1;
  for (const RankReport& r : result.ranks) {
    if (measured > 0) {
      result.stage_busy_s[static_cast<size_t>(r.coords.pp)] +=
          r.busy_s / measured / ranks_per_stage[static_cast<size_t>(r.coords.pp)];
    }
  }
  if (!kernel_classes || measured <= 0) return;
  result.stage_kernel_s.assign(static_cast<size_t>(par.pp), KernelSeconds{});
  for (size_t r = 0; r < result.ranks.size(); ++r) {
    RankReport& report = result.ranks[r];
    report.kernel_s = {};
    for (size_t i = skip; i < nsteps; ++i) {
      for (size_t c = 0; c < report.kernel_s.size(); ++c) {
        report.kernel_s[c] += all_steps[r][i].kernel_s[c];
      }
    }
    KernelSeconds& stage = result.stage_kernel_s[static_cast<size_t>(report.coords.pp)];
    for (size_t c = 0; c < stage.size(); ++c) {
      stage[c] += report.kernel_s[c] / static_cast<double>(measured) /
                  ranks_per_stage[static_cast<size_t>(report.coords.pp)];
    }
  }
}

// The plan's shapes and splits: what the executor's layers and groups need of them.
void CheckShapes(const ModelSpec& m, const ParallelConfig& p, const ExecuteOptions& options,
                 std::vector<std::string>* out) {
  if (p.cp > 1 && m.seq_length % (2 * p.cp) != 0) {
    out->push_back(fmt::format(
        "parallel.cp: seq_length {} must be a multiple of 2 x cp = {} (each CP rank holds two "
        "chunks of every sequence)",
        m.seq_length, 2 * p.cp));
  }
  if (p.cp > 1 && p.cp_comm == CpComm::kA2a && m.num_query_groups % p.tp == 0 &&
      (m.num_query_groups / p.tp) % p.cp != 0) {
    out->push_back(fmt::format(
        "parallel.cp_comm: a2a gives each CP rank 1/cp of the query groups of its tensor rank, "
        "but {} query groups over tp {} do not split over cp {}; use cp_comm p2p or allgather",
        m.num_query_groups, p.tp, p.cp));
  }
  if (m.num_query_groups % p.tp != 0) {
    out->push_back(fmt::format(
        "parallel.tp: tp {} larger than num_query_groups {} (key/value heads replicated over "
        "tensor-parallel ranks) is not implemented by the CPU executor; use tp dividing the "
        "query groups",
        p.tp, m.num_query_groups));
  }
  if (m.position_embedding == PositionEmbedding::kRope && m.kv_channels % 2 != 0) {
    out->push_back(fmt::format(
        "model.kv_channels: rotary embeddings need an even head size, got {}", m.kv_channels));
  }
  if (m.position_embedding == PositionEmbedding::kLearned &&
      m.seq_length > m.max_position_embeddings) {
    out->push_back(fmt::format("model.seq_length: {} exceeds max_position_embeddings {}",
                               m.seq_length, m.max_position_embeddings));
  }
  if (!Synthetic(options) && m.vocab_size < kByteVocabulary) {
    out->push_back(fmt::format(
        "model.vocab_size: the executor trains on byte tokens (0..255), so the vocabulary must "
        "have at least 256 entries, got {} (set vocab_size: 256, or use --data synthetic)",
        m.vocab_size));
  }
  if (p.sequence_parallel && (m.seq_length % p.cp != 0 || (m.seq_length / p.cp) % p.tp != 0)) {
    out->push_back(p.cp > 1 ? fmt::format("parallel.sequence_parallel: each context-parallel "
                                          "rank's {} tokens (seq_length {} / cp {}) must be "
                                          "divisible by tp {} to shard them",
                                          m.seq_length / p.cp, m.seq_length, p.cp, p.tp)
                            : fmt::format("parallel.sequence_parallel: seq_length {} must be "
                                          "divisible by tp {} to shard the sequence",
                                          m.seq_length, p.tp));
  }
  if ((int64_t{p.tp} * p.cp * p.dp) % (int64_t{p.expert_tp()} * p.ep) != 0) {
    out->push_back(fmt::format(
        "parallel.etp: etp {} x ep {} must divide the {} ranks of a pipeline stage (tp x cp x dp): "
        "Megatron's expert grid etp-ep-edp-pp covers the same ranks as tp-cp-dp-pp",
        p.expert_tp(), p.ep, int64_t{p.tp} * p.cp * p.dp));
  }
}

// Model features and recompute modes the CPU executor does not implement.
void CheckImplemented(const ModelSpec& m, const ParallelConfig& p, std::vector<std::string>* out) {
  if (m.multi_latent_attention) {
    out->push_back(
        "model.multi_latent_attention: multi-head latent attention (DeepSeek's MLA) is not "
        "implemented by the CPU executor; use multi-head or grouped-query attention");
  }
  if (p.recompute == Recompute::kSelective && p.recompute_modules != kRecomputeCoreAttn) {
    out->push_back(fmt::format(
        "parallel.recompute_modules: \"{}\": the CPU executor's selective recompute re-runs "
        "the core attention only; use recompute_modules: \"core_attn\" (or drop the key)",
        RecomputeModulesText(p.recompute_modules)));
  }
  if (m.hybrid()) {
    out->push_back(fmt::format(
        "model.hybrid_layer_pattern: hybrid models (Mamba, attention-only, MLP-only and MoE-only "
        "layers, \"{}\") are not implemented by the CPU executor; use a transformer",
        m.hybrid_layer_pattern));
  }
  if (m.activation == Activation::kSquaredRelu) {
    out->push_back(
        "model.activation: squared_relu is not implemented by the CPU executor; use gelu or "
        "swiglu");
  }
  if (m.position_embedding == PositionEmbedding::kNone) {
    out->push_back(
        "model.position_embedding: none (no position embedding) is not implemented by the CPU "
        "executor; use learned or rope");
  }
  if (m.mtp_num_layers > 0) {
    out->push_back(fmt::format(
        "model.mtp_num_layers: {} multi-token prediction layers are not implemented by the CPU "
        "executor; set mtp_num_layers: 0",
        m.mtp_num_layers));
  }
  if (m.qk_layernorm) {
    out->push_back(
        "model.qk_layernorm: the norm on each head's queries and keys is not implemented by the "
        "CPU executor; set qk_layernorm: false");
  }
}

// What executor/model/moe.h runs of Megatron's MoE layer: dropless top-k softmax routing
// without biases.
void CheckMoe(const ModelSpec& m, const ParallelConfig& p, std::vector<std::string>* out) {
  if (m.moe_expert_capacity_factor > 0) {
    out->push_back(fmt::format(
        "model.moe_expert_capacity_factor: {} drops the tokens beyond each expert's capacity; "
        "the CPU executor runs dropless MoE only (Megatron's default): set it to 0",
        m.moe_expert_capacity_factor));
  }
  if (m.moe_router_load_balancing_type == MoeLoadBalancing::kSinkhorn) {
    out->push_back(
        "model.moe_router_load_balancing_type: sinkhorn routes through the Sinkhorn algorithm, "
        "which the CPU executor does not implement; use aux_loss, seq_aux_loss or none (run "
        "with Megatron's default --moe-aux-loss-coeff 0: top-k routing, no auxiliary loss)");
  }
  if (m.add_bias_linear) {
    out->push_back(
        "model.add_bias_linear: the CPU executor's MoE layers have no biases (router, experts, "
        "shared experts); set add_bias_linear: false, as Megatron's MoE recipes pass "
        "--disable-bias-linear");
  }
  if (p.tp > 1 && !p.sequence_parallel) {
    out->push_back(fmt::format(
        "parallel.sequence_parallel: a MoE model with tp {} needs sequence parallelism, so "
        "that each tensor-parallel rank routes its own tokens (Megatron's MoELayer refuses to "
        "train without it)",
        p.tp));
  }
  if (m.moe_shared_expert_intermediate_size % p.tp != 0) {
    out->push_back(fmt::format(
        "model.moe_shared_expert_intermediate_size: {} is not divisible by tp {} (the shared "
        "experts are a tensor-parallel MLP)",
        m.moe_shared_expert_intermediate_size, p.tp));
  }
}

// Whether each rank's memory fits: its GPU's, or this machine's shared by the ranks it runs.
void CheckMemory(const Plan& plan, const ExecuteOptions& options, std::vector<std::string>* out) {
  const double need = EstimateRankBytes(plan, options.dtype);
  if (options.device_memory_bytes != 0) {
    if (options.device_memory_bytes > 0 &&
        need > static_cast<double>(options.device_memory_bytes)) {
      out->push_back(fmt::format(
          "model: each rank needs about {:.2f} GB (weights, gradients, optimizer state, "
          "activations in {}) but its GPU has {:.2f} GB; use a smaller model or more GPUs",
          need / 1e9, Name(options.dtype), static_cast<double>(options.device_memory_bytes) / 1e9));
    }
    return;
  }
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  const int64_t local = options.profile_rank >= 0 ? 1 : LocalRanks(plan.parallel.world_size());
  if (ram > 0 && need * static_cast<double>(local) > ram) {
    out->push_back(fmt::format(
        "model: each rank needs about {:.2f} GB (weights, gradients, optimizer state, "
        "activations in {}) and {} ranks share this machine's {:.2f} GB; use a smaller model "
        "or more machines",
        need / 1e9, Name(options.dtype), local, ram / 1e9));
  }
}

}  // namespace

std::vector<std::string> CheckExecutable(const Plan& plan, const ExecuteOptions& options) {
  std::vector<std::string> out;
  CheckShapes(plan.model, plan.parallel, options, &out);
  CheckImplemented(plan.model, plan.parallel, &out);
  if (plan.model.moe()) CheckMoe(plan.model, plan.parallel, &out);
  if (options.steps < 1) out.push_back("--steps: must be at least 1");
  if (options.dtype == DType::kI32) out.push_back("dtype: must be fp32, fp64, bf16 or fp16");
  CheckMemory(plan, options, &out);
  return out;
}

ExecuteResult Execute(const Plan& plan, const ExecuteOptions& options, ProcessGroups& groups,
                      Backend& given_backend, std::ostream* progress) {
  const ModelSpec& model_spec = plan.model;
  const ParallelConfig& par = plan.parallel;
  const TrainingSpec& training = plan.training;
  PTDP_CHECK(groups.world->size() == par.world_size());
  const int64_t m = NumMicrobatches(training, par);
  const PipelineSchedule schedule =
      MakeSchedule(par.schedule, par.pp, static_cast<int>(m), par.virtual_stages);
  const TokenData data = LoadTokens(model_spec, training, options);

  Recorder recorder(options.keep_trace);
  SetCommonOrigin(*groups.world, recorder);
  // Everything below computes through `backend`: the given one, or it wrapped in a clock.
  std::optional<TimedBackend> timed;
  if (options.time_kernel_classes) timed.emplace(given_backend);
  Backend& backend = timed ? static_cast<Backend&>(*timed) : given_backend;

  // The distributed optimizer shards the dense parameters over data parallel with context
  // parallel (Megatron's get_data_parallel_group(with_context_parallel=True)) and the experts
  // over the expert data-parallel group.
  const bool distributed = par.distributed_optimizer;
  GptParams params(model_spec, par, groups.coords, options.dtype, backend,
                   distributed ? par.dp_cp() : 1, distributed ? par.expert_dp() : 1);
  params.Initialize(static_cast<uint64_t>(training.seed));
  GptModel model(params, backend, groups,
                 {par.sequence_parallel, par.recompute, par.recompute_num_layers, 1e-5, par.cp_comm,
                  plan.options.attention != AttentionBackend::kUnfused,
                  plan.options.async_tensor_parallel_allreduce},
                 recorder);
  model.set_micro_batch_size(par.micro_batch_size);
  PipelineRunner runner(model, backend, *groups.pp, schedule, recorder);
  TrainingOptimizer optimizer(params, backend, groups, training, distributed, par.sequence_parallel,
                              recorder, options.loss_scaler, Overlap(plan));
  runner.set_listener(&optimizer);
  const std::string layout = CheckpointLayout(plan, options.dtype);
  Run run{plan,
          options,
          groups,
          backend,
          data,
          recorder,
          params,
          runner,
          optimizer,
          layout,
          timed ? &*timed : nullptr,
          ""};

  ExecuteResult result;
  result.backend = std::string(backend.name());
  result.profile_rank = options.profile_rank;
  result.data_description = data.description();
  result.tokens_per_step = training.global_batch_size * model_spec.seq_length;
  std::optional<CheckpointState> loaded;
  if (!options.load_dir.empty()) loaded = LoadResumeCheckpoint(run);
  const int64_t done = loaded ? loaded->step : 0;
  const bool reports = groups.world->rank() == 0 && options.profile_rank < 0;
  run.run_id = DecideRunId(run, loaded ? &*loaded : nullptr, reports ? progress : nullptr);
  result.run_id = run.run_id;
  result.first_step = done + 1;
  const int64_t val_count = data.validation_sequences(model_spec.seq_length);
  const double run_start = recorder.Now();
  const std::vector<PipelineStepStats> step_stats =
      TrainSteps(run, done + 1, val_count, progress, result);
  result.total_time_s = recorder.Now() - run_start;

  if (options.gather_parameters) {
    result.parameters = GatherFullParameters(params, groups, backend);
  }
  // Gather the measurements on world rank 0 (a profiled rank's stand-in world gives its own).
  const size_t skip = step_stats.size() > 1 ? 1 : 0;  // the first step warms up
  const std::vector<std::string> packed = groups.world->GatherStrings(
      PackRank(OwnReport(run, step_stats, skip), step_stats, recorder.events()), 0);
  if (groups.world->rank() != 0 && options.profile_rank < 0) return result;
  PTDP_CHECK(options.profile_rank < 0 || packed.size() == 1);
  const auto all_steps = UnpackRanks(packed, par, result);
  StepFigures(all_steps, step_stats.size(), skip, par, options.time_kernel_classes, result);
  return result;
}

std::string ResultsJson(const Plan& plan, const ExecuteOptions& options, const ExecuteResult& r) {
  const ParallelConfig& p = plan.parallel;
  auto num = [](double v) { return JsonNumber(v); };
  std::string out = "{\n";
  out += fmt::format("  \"model\": {},\n", JsonString(plan.model.name));
  out += fmt::format(
      "  \"parallel\": {{\"tp\": {}, \"pp\": {}, \"dp\": {}, \"cp\": {}, \"cp_comm\": {}, "
      "\"ep\": {}, \"etp\": {}, \"edp\": {}, "
      "\"micro_batch_size\": {}, \"microbatches\": {}, \"schedule\": {}, \"virtual_stages\": "
      "{}, \"sequence_parallel\": {}, \"recompute\": {}, \"distributed_optimizer\": {}}},\n",
      p.tp, p.pp, p.dp, p.cp, JsonString(Name(p.cp_comm)), p.ep, p.expert_tp(), p.expert_dp(),
      p.micro_batch_size, NumMicrobatches(plan.training, p), JsonString(Name(p.schedule)),
      p.virtual_stages, p.sequence_parallel ? "true" : "false", JsonString(Name(p.recompute)),
      p.distributed_optimizer ? "true" : "false");
  out += fmt::format(
      "  \"backend\": {},\n  \"dtype\": {},\n  \"data\": {},\n  \"global_batch_size\": "
      "{},\n  \"tokens_per_step\": {},\n",
      JsonString(r.backend), JsonString(Name(options.dtype)), JsonString(r.data_description),
      plan.training.global_batch_size, r.tokens_per_step);
  out += fmt::format("  \"run_id\": {},\n", JsonString(r.run_id));
  out += fmt::format("  \"first_step\": {},\n  \"steps_run\": {},\n", r.first_step, r.steps.size());
  std::string losses, times, norms, bubbles, validation;
  double time_sum = 0;
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const char* sep = i == 0 ? "" : ", ";
    losses += sep + num(r.steps[i].loss);
    times += sep + num(r.steps[i].time_s);
    norms += sep + num(r.steps[i].grad_norm);
    bubbles += sep + num(r.steps[i].bubble_fraction);
    if (r.steps[i].validation_loss >= 0) {
      validation += fmt::format("{}[{}, {}]", validation.empty() ? "" : ", ", r.steps[i].step,
                                num(r.steps[i].validation_loss));
    }
    if (i > 0 || r.steps.size() == 1) time_sum += r.steps[i].time_s;
  }
  const double mean_step =
      r.steps.size() > 1 ? time_sum / static_cast<double>(r.steps.size() - 1) : time_sum;
  out += fmt::format(
      "  \"losses\": [{}],\n  \"grad_norms\": [{}],\n  \"step_times_s\": [{}],\n  "
      "\"step_bubble_fractions\": [{}],\n  \"validation_losses\": [{}],\n",
      losses, norms, times, bubbles, validation);
  if (options.dtype == DType::kF16) {  // the loss scaler's figures
    std::string scales;
    int64_t skipped = 0;
    for (size_t i = 0; i < r.steps.size(); ++i) {
      scales += (i == 0 ? "" : ", ") + num(r.steps[i].loss_scale);
      skipped += r.steps[i].skipped ? 1 : 0;
    }
    out += fmt::format("  \"loss_scales\": [{}],\n  \"skipped_steps\": {},\n", scales, skipped);
  }
  out +=
      fmt::format("  \"final_loss\": {},\n", r.steps.empty() ? "null" : num(r.steps.back().loss));
  out += fmt::format(
      "  \"mean_step_time_s\": {},\n  \"tokens_per_s\": {},\n  \"total_time_s\": {},\n",
      num(mean_step), num(mean_step > 0 ? static_cast<double>(r.tokens_per_step) / mean_step : 0),
      num(r.total_time_s));
  out += fmt::format("  \"measured_steps\": {},\n  \"bubble_fraction\": {},\n", r.measured_steps,
                     num(r.bubble_fraction));
  // --profile-rank: the figures are that rank's, alone.
  out += fmt::format("  \"profile_rank\": {},\n",
                     r.profile_rank >= 0 ? std::to_string(r.profile_rank) : "null");
  std::string stages;
  for (size_t s = 0; s < r.stage_busy_s.size(); ++s) {
    std::string kernels;  // with time_kernel_classes: seconds per step by class
    if (s < r.stage_kernel_s.size()) {
      for (int c = 0; c < kNumKernelClasses; ++c) {
        kernels +=
            fmt::format("{}\"{}\": {}", c == 0 ? "" : ", ", Name(static_cast<KernelClass>(c)),
                        num(r.stage_kernel_s[s][static_cast<size_t>(c)]));
      }
      kernels = ", \"kernels_s_per_step\": {" + kernels + "}";
    }
    stages += fmt::format("{}{{\"stage\": {}, \"busy_s_per_step\": {}{}}}", s == 0 ? "" : ", ", s,
                          num(r.stage_busy_s[s]), kernels);
  }
  out += "  \"stages\": [" + stages + "],\n  \"ranks\": [\n";
  for (size_t i = 0; i < r.ranks.size(); ++i) {
    const RankReport& k = r.ranks[i];
    std::string mem;
    for (int c = 0; c < kNumMemCategories; ++c) {
      mem += fmt::format("\"{}\": {}, ", Name(static_cast<MemCategory>(c)),
                         k.memory.peak_bytes[static_cast<size_t>(c)]);
    }
    out += fmt::format(
        "    {{\"rank\": {}, \"tp\": {}, \"pp\": {}, \"dp\": {}, \"cp\": {}, \"etp\": {}, "
        "\"ep\": {}, \"edp\": {}, \"parameters\": {}, \"busy_s\": {}, \"recv_wait_s\": {}, "
        "\"peak_memory_bytes\": {{{}\"total\": {}}}}}{}\n",
        k.world_rank, k.coords.tp, k.coords.pp, k.coords.dp, k.coords.cp, k.expert.etp, k.expert.ep,
        k.expert.edp, k.parameters, num(k.busy_s), num(k.recv_wait_s), mem,
        k.memory.peak_total_bytes, i + 1 < r.ranks.size() ? "," : "");
  }
  out += "  ]\n}\n";
  return out;
}

}  // namespace ptdp
