#include "core/megatron_rules.h"

#include <fmt/format.h>

#include <algorithm>

namespace ptdp {

std::string_view RuleId(Rule rule) {
  switch (rule) {
    case Rule::kWorldSize:
      return "world-size";
    case Rule::kGlobalBatchDivisible:
      return "global-batch-divisible";
    case Rule::kHeadsDivisibleByTp:
      return "heads-divisible-by-tp";
    case Rule::kQueryGroupsVsTp:
      return "query-groups-vs-tp";
    case Rule::kLayersDivisibleByPp:
      return "layers-divisible-by-pp";
    case Rule::kUnevenStages:
      return "uneven-stages";
    case Rule::kVirtualStagesDivideLayers:
      return "virtual-stages-divide-layers";
    case Rule::kInterleavedNeedsPp:
      return "interleaved-needs-pp";
    case Rule::kInterleavedMicrobatches:
      return "interleaved-microbatches";
    case Rule::kSequenceParallelNeedsTp:
      return "sequence-parallel-needs-tp";
    case Rule::kContextParallel:
      return "context-parallel";
    case Rule::kSequenceSplitByTp:
      return "sequence-split-by-tp";
    case Rule::kExpertParallel:
      return "expert-parallel";
    case Rule::kRecomputeNumLayers:
      return "recompute-num-layers";
    case Rule::kRecomputeModules:
      return "recompute-modules";
    case Rule::kFsdpNeedsDistributedOptimizer:
      return "fsdp-needs-distributed-optimizer";
    case Rule::kFp8Options:
      return "fp8-options";
    case Rule::kHybridModel:
      return "hybrid-model";
    case Rule::kScheduleVirtualStages:
      return "schedule-virtual-stages";
  }
  return "?";
}

namespace {

// The rules, in Megatron's order; each broken one goes to add(rule, key, message, hint), the
// message and hint as functions that format them (so that a caller wanting the rule alone pays
// nothing for the words).
// The leading rules, checked before all others: they depend on the model, the batch and the
// sizes tp, pp, cp, dp and the micro-batch alone (FirstBrokenLeadingRule).
template <typename Add>
void CheckLeadingRules(const ModelSpec& model, const TrainingSpec& training,
                       const ParallelConfig& p, int64_t num_gpus, const Add& add) {
  if (p.world_size() != num_gpus) {
    // arguments.py: total_model_size = tp * pp * cp; data_parallel_size = world // it.
    const int64_t model_size = int64_t{p.tp} * p.pp * p.cp;
    if (num_gpus % model_size != 0) {
      add(
          Rule::kWorldSize, "tp",
          [&] {
            return std::string(fmt::format(
                "world size ({}) is not divisible by total_model_size (tp {} x pp {}{} = {})",
                num_gpus, p.tp, p.pp, p.cp > 1 ? fmt::format(" x cp {}", p.cp) : "", model_size));
          },
          [&] {
            return std::string(p.cp > 1
                                   ? "choose tp, pp and cp whose product divides the number of GPUs"
                                   : "choose tp and pp whose product divides the number of GPUs");
          });
    } else {
      add(
          Rule::kWorldSize, "dp",
          [&] {
            return std::string(fmt::format(
                "data-parallel size must be world size / (tp x pp{}) = {} / {} = {}, got {}",
                p.cp > 1 ? " x cp" : "", num_gpus, model_size, num_gpus / model_size, p.dp));
          },
          [&] { return std::string(fmt::format("set dp to {}", num_gpus / model_size)); });
    }
  }

  const int64_t per_step = int64_t{p.micro_batch_size} * p.dp;
  const bool batch_ok = training.global_batch_size % per_step == 0;
  if (!batch_ok) {
    add(
        Rule::kGlobalBatchDivisible, "global_batch_size",
        [&] {
          return std::string(fmt::format(
              "global batch size ({}) is not divisible by micro batch size ({}) times data "
              "parallel size ({})",
              training.global_batch_size, p.micro_batch_size, p.dp));
        },
        [&] {
          return std::string(
              "pick a micro-batch size and data-parallel size whose product divides the global "
              "batch");
        });
  }

  if (model.num_attention_heads % p.tp != 0) {
    add(
        Rule::kHeadsDivisibleByTp, "tp",
        [&] {
          return std::string(fmt::format(
              "num_attention_heads ({}) must be a multiple of tensor_model_parallel_size ({})",
              model.num_attention_heads, p.tp));
        },
        [&] {
          return std::string(
              "use a tensor-parallel size that divides the number of attention heads");
        });
  }
  if (model.num_query_groups % p.tp != 0 && p.tp % model.num_query_groups != 0) {
    add(
        Rule::kQueryGroupsVsTp, "tp",
        [&] {
          return std::string(fmt::format(
              "num_query_groups ({}) must be a multiple of tensor_model_parallel_size ({}), "
              "or tensor_model_parallel_size a multiple of num_query_groups",
              model.num_query_groups, p.tp));
        },
        [&] {
          return std::string(
              "use a tensor-parallel size that divides, or is a multiple of, the query groups");
        });
  }
}

template <typename Add>
void CheckRules(const ModelSpec& model, const TrainingSpec& training, const ParallelConfig& p,
                int64_t num_gpus, const CostOptions& options, const Add& add) {
  CheckLeadingRules(model, training, p, num_gpus, add);
  const int64_t per_step = int64_t{p.micro_batch_size} * p.dp;
  const bool batch_ok = training.global_batch_size % per_step == 0;

  // A hybrid model's Mamba mixers split their heads and groups over TP (mamba_mixer.py
  // MambaMixer.__init__), and over TP x CP with context parallelism (mamba_context_parallel.py).
  const bool mamba = model.hybrid() && model.mamba_num_heads > 0 &&
                     model.hybrid_layer_pattern.find('M') != std::string::npos;
  if (mamba) {
    const auto hybrid_fail = [&](std::string_view key, const auto& message, const auto& hint) {
      add(Rule::kHybridModel, key, message, hint);
    };
    const int heads = model.mamba_num_heads, groups = model.mamba_num_groups;
    if (heads % p.tp != 0) {
      hybrid_fail(
          "tp",
          [&] {
            return fmt::format("nheads must be evenly divisble by tp_size ({} Mamba heads, tp {})",
                               heads, p.tp);
          },
          [] { return std::string("use a tensor-parallel size dividing the Mamba heads"); });
    } else if (groups % p.tp != 0) {
      hybrid_fail(
          "tp",
          [&] {
            return fmt::format(
                "ngroups must be evenly divisible by tp_size ({} Mamba groups, tp {})", groups,
                p.tp);
          },
          [] { return std::string("use a tensor-parallel size dividing the Mamba groups"); });
    } else if (p.cp > 1 && (heads / p.tp) % p.cp != 0) {
      hybrid_fail(
          "cp",
          [&] {
            return fmt::format(
                "nheads must be evenly divisible by tp_size * cp_size ({} Mamba heads, tp {}, "
                "cp {})",
                heads, p.tp, p.cp);
          },
          [] { return std::string("use tp x cp dividing the Mamba heads"); });
    } else if (p.cp > 1 && groups / p.tp < p.cp && p.cp % (groups / p.tp) != 0) {
      hybrid_fail(
          "cp",
          [&] {
            return fmt::format(
                "cp_size must be evenly divisible by ngroups/tp_size ({} Mamba groups, tp {}, cp "
                "{})",
                groups, p.tp, p.cp);
          },
          [] {
            return std::string("use a context-parallel size that the groups per TP rank divide");
          });
    } else if (p.cp > 1 && groups / p.tp >= p.cp && (groups / p.tp) % p.cp != 0) {
      hybrid_fail(
          "cp",
          [&] {
            return fmt::format(
                "ngroups must be evenly divisible by tp_size * cp_size ({} Mamba groups, tp {}, "
                "cp {})",
                groups, p.tp, p.cp);
          },
          [] { return std::string("use tp x cp dividing the Mamba groups"); });
    }
  }
  if (model.hybrid()) {
    // Megatron's hybrid stack takes its pipeline stages from the pattern's '|' separators (here
    // the layout), or splits its layers evenly (or by the first / last stage counts) over pp
    // ranks without virtual stages (mamba_hybrid_layer_allocation.py select_pipeline_segment;
    // mamba_block.py before: no virtual pipeline at all). It does not count the embedding or
    // the loss as layers.
    if (p.virtual_stages > 1 && p.layout.empty()) {
      add(
          Rule::kHybridModel, "virtual_stages",
          [] {
            return std::string(
                "Virtual pipeline parallelism (vp_stage != None) is not supported when "
                "hybrid_layer_pattern has no pipe ('|') separators.");
          },
          [] {
            return std::string(
                "give the stages as a layout (Megatron: '|' separators in the pattern), or use "
                "one model chunk per pipeline rank");
          });
    } else if (p.account_for_embedding || p.account_for_loss) {
      add(
          Rule::kHybridModel,
          p.account_for_embedding ? "account_for_embedding" : "account_for_loss",
          [] {
            return std::string(
                "the hybrid model splits its layers alone: Megatron's hybrid stack does not "
                "count the embedding or the loss as layers");
          },
          [] {
            return std::string(
                "drop account_for_embedding / account_for_loss; use first_stage_layers / "
                "last_stage_layers or a layout");
          });
    }
  }

  // The layer split (arguments.py validate_args; TransformerConfig.__post_init__;
  // transformer_block.py get_num_layers_to_build), then the interleaved schedule's rules.
  const bool interleaved = p.schedule == Schedule::kInterleaved;
  const bool uneven = p.first_stage_layers > 0 || p.last_stage_layers > 0;
  const int accounted = (p.account_for_embedding ? 1 : 0) + (p.account_for_loss ? 1 : 0);
  if (!p.layout.empty()) {
    // pipeline_parallel_layer_layout.py: the layout names every stage's layers; the other split
    // options must be left unset (arguments.py).
    int total = 0;
    for (int n : p.layout) total += n;
    const auto layout_fail = [&](const auto& message, const auto& hint) {
      add(Rule::kUnevenStages, "layout", message, hint);
    };
    if (uneven || accounted > 0) {
      layout_fail(
          [] {
            return std::string(
                "pipeline_model_parallel_layout cannot be combined with the first / last stage "
                "layer counts or the account-for-embedding / loss options");
          },
          [] { return std::string("give the layout alone"); });
    } else if (static_cast<int64_t>(p.layout.size()) != int64_t{p.pp} * p.virtual_stages) {
      layout_fail(
          [&] {
            return fmt::format(
                "the layout has {} stages, pipeline_model_parallel_size {} x virtual stages {} "
                "= {} expected",
                p.layout.size(), p.pp, p.virtual_stages, int64_t{p.pp} * p.virtual_stages);
          },
          [] {
            return std::string("give pp x v stages, or set virtual stages to their number / pp");
          });
    } else if (total != model.num_layers) {
      layout_fail(
          [&] {
            return fmt::format("Number of decoder layers {} must match num_layers {}", total,
                               model.num_layers);
          },
          [] { return std::string("place every transformer layer (t) once"); });
    }
  } else if (uneven) {
    auto uneven_fail = [&](std::string_view key, const auto& message, const auto& hint) {
      add(Rule::kUnevenStages, key, message, hint);
    };
    int rest = model.num_layers, middle = p.pp;
    if (p.first_stage_layers > 0) rest -= p.first_stage_layers, --middle;
    if (p.last_stage_layers > 0) rest -= p.last_stage_layers, --middle;
    if (accounted > 0) {
      uneven_fail(
          "first_stage_layers",
          [&] {
            return std::string(
                "num_layers_in_first_pipeline_stage and num_layers_in_last_pipeline_stage "
                "cannot be set at the same time with account_for_embedding_in_pipeline_split "
                "and account_for_loss_in_pipeline_split");
          },
          [&] {
            return std::string(
                "use either the first/last stage layer counts or the account-for options");
          });
    } else if (p.pp == 1) {
      uneven_fail(
          "first_stage_layers",
          [&] {
            return std::string(
                "first / last pipeline stage layer counts need pipeline parallelism (pp is 1)");
          },
          [&] {
            return std::string("drop first_stage_layers and last_stage_layers, or use pp > 1");
          });
    } else if ((rest != 0) != (middle != 0) || rest < 0) {
      uneven_fail(
          p.first_stage_layers > 0 ? "first_stage_layers" : "last_stage_layers",
          [&] {
            return std::string(
                fmt::format("Mismatch: {} middle layers remaining but {} middle PP stages "
                            "available.",
                            rest, middle));
          },
          [&] {
            return std::string(
                "the first and last stage layers must leave at least one layer per middle "
                "stage (or none when there is no middle stage)");
          });
    } else if (middle > 0 && rest % middle != 0) {
      uneven_fail(
          p.first_stage_layers > 0 ? "first_stage_layers" : "last_stage_layers",
          [&] {
            return std::string(
                fmt::format("number of layers at middle stage: {} must be divisible by the "
                            "middle pipeline model parallel size {}",
                            rest, middle));
          },
          [&] {
            return std::string(
                "choose first and last stage layer counts that leave a multiple of the middle "
                "stages");
          });
    } else if (interleaved) {
      for (auto [key, what, n] : {std::tuple{"first_stage_layers", "first", p.first_stage_layers},
                                  {"last_stage_layers", "last", p.last_stage_layers},
                                  {"virtual_stages", "middle", middle > 0 ? rest / middle : 0}}) {
        if (n > 0 && n % p.virtual_stages != 0) {
          uneven_fail(
              key,
              // Init-captures: a lambda may not capture structured bindings before C++20 in
              // every compiler (clang 14, which builds the fuzz targets).
              [&, what = what, n = n] {
                return std::string(
                    fmt::format("number of layers at {} stage: {} must be divisible by virtual "
                                "pipeline parallel degree {}",
                                what, n, p.virtual_stages));
              },
              [&] {
                return std::string("make each stage's layer count a multiple of virtual_stages");
              });
          break;
        }
      }
    }
  } else {
    const int total = model.num_layers + accounted;
    if (total % p.pp != 0) {
      add(
          Rule::kLayersDivisibleByPp, "pp",
          [&] {
            return std::string(
                accounted > 0
                    ? fmt::format("number of layers ({} + {} for the embedding / loss) should be "
                                  "divisible by the pipeline-model-parallel size ({})",
                                  model.num_layers, accounted, p.pp)
                    : fmt::format("number of layers ({}) should be divisible by the "
                                  "pipeline-model-parallel size ({})",
                                  model.num_layers, p.pp));
          },
          [&] {
            return std::string(
                "use a pipeline size that divides the number of layers, or an uneven split "
                "(first_stage_layers / last_stage_layers, or the account-for options)");
          });
    } else if (interleaved && (total / p.pp) % p.virtual_stages != 0) {
      add(
          Rule::kVirtualStagesDivideLayers, "virtual_stages",
          [&] {
            return std::string(fmt::format(
                "number of layers per pipeline stage ({}) must be divisible by the number of "
                "virtual stages per pipeline rank ({})",
                total / p.pp, p.virtual_stages));
          },
          [&] { return std::string("choose virtual_stages dividing num_layers / pp"); });
    }
  }

  if (interleaved != (p.virtual_stages > 1)) {
    add(
        Rule::kScheduleVirtualStages, "virtual_stages",
        [&] {
          return std::string(
              interleaved ? fmt::format("the interleaved schedule needs virtual_stages > 1, got {}",
                                        p.virtual_stages)
                          : fmt::format("virtual_stages {} needs the interleaved schedule, not {}",
                                        p.virtual_stages, Name(p.schedule)));
        },
        [&] {
          return std::string(interleaved ? "use schedule 1f1b for one model chunk per pipeline rank"
                                         : "set schedule to interleaved, or virtual_stages to 1");
        });
  }
  if (interleaved) {
    // arguments.py: pp > 1 with --overlap-p2p-communication, else pp > 2.
    if (options.overlap_p2p_communication ? p.pp <= 1 : p.pp <= 2) {
      add(
          Rule::kInterleavedNeedsPp, "pp",
          [&] {
            return options.overlap_p2p_communication
                       ? fmt::format(
                             "When interleaved schedule is used, pipeline-model-parallel "
                             "size should be greater than 1, got {}",
                             p.pp)
                       : fmt::format(
                             "pipeline-model-parallel size should be greater than 2 with "
                             "interleaved schedule (without p2p communication overlap), "
                             "got {}",
                             p.pp);
          },
          [&] {
            return std::string(options.overlap_p2p_communication
                                   ? "use pp >= 2, or the 1f1b schedule"
                                   : "use pp >= 3, --overlap-p2p-communication, or the 1f1b "
                                     "schedule");
          });
    }
    if (batch_ok) {
      const int64_t m = training.global_batch_size / per_step;
      if (m < p.pp || m % p.pp != 0) {
        add(
            Rule::kInterleavedMicrobatches, "global_batch_size",
            [&] {
              return std::string(fmt::format(
                  "number of microbatches ({}) must be at least, and a multiple of, the "
                  "pipeline-model-parallel size ({}) with the interleaved schedule",
                  m, p.pp));
            },
            [&] {
              return std::string(
                  "change the global batch or micro-batch size so that m = GBS / (MBS x DP) is a "
                  "multiple of pp");
            });
      }
    }
  }

  if (p.sequence_parallel && p.tp == 1) {
    add(
        Rule::kSequenceParallelNeedsTp, "sequence_parallel",
        [&] {
          return std::string(
              "Cannot use sequence parallelism without tensor parallelism (tp is 1)");
        },
        [&] { return std::string("drop sequence_parallel or use tp > 1"); });
  }
  if (p.cp > 1) {
    // arguments.py validate_args; dot_product_attention.py (the local attention refuses CP);
    // Transformer Engine's a2a exchange splits the heads of each TP rank over the CP ranks.
    if (int64_t{model.seq_length} % (2 * int64_t{p.cp}) != 0) {
      add(
          Rule::kContextParallel, "cp",
          [&] {
            return std::string(
                fmt::format("seq-length should be a multiple of 2 * context-parallel-size if "
                            "context-parallel-size > 1 (seq-length {}, context-parallel-size {})",
                            model.seq_length, p.cp));
          },
          [&] {
            return std::string(
                "use a context-parallel size whose double divides the sequence length");
          });
    } else if (!FlashStyleAttention(training.precision, options)) {
      add(
          Rule::kContextParallel, "cp",
          [&] {
            return std::string(
                training.precision == Precision::kFp32
                    ? "Context parallelism needs Transformer Engine's flash-style attention, which "
                      "takes 16-bit inputs (fp32 training)"
                    : "Context parallelism is only supported by TEDotProductAttention!");
          },
          [&] {
            return std::string(
                training.precision == Precision::kFp32
                    ? "train in bf16 or fp16, or drop context parallelism"
                    : "use the flash or fused attention backend, or drop context parallelism");
          });
    } else if (p.cp_comm == CpComm::kA2a &&
               ((model.num_attention_heads / p.tp) % p.cp != 0 ||
                (std::max(1, model.num_query_groups / p.tp)) % p.cp != 0)) {
      add(
          Rule::kContextParallel, "cp_comm",
          [&] {
            return std::string(fmt::format(
                "The number of attention heads and gqa groups per TP rank ({} and {}) needs "
                "to be divisible by CP size ({}) with the a2a exchange",
                model.num_attention_heads / p.tp, std::max(1, model.num_query_groups / p.tp),
                p.cp));
          },
          [&] {
            return std::string(
                "use cp_comm p2p, or a context-parallel size dividing the heads per TP rank");
          });
    }
  }
  if (p.sequence_parallel && p.tp > 1 && model.seq_length % p.cp == 0 &&
      (model.seq_length / p.cp) % p.tp != 0) {
    // scatter_to_sequence_parallel_region splits each rank's s / cp tokens over TP.
    add(
        Rule::kSequenceSplitByTp, "sequence_parallel",
        [&] {
          return std::string(fmt::format(
              "First dimension of the tensor should be divisible by tensor parallel size: "
              "sequence parallelism splits the {} tokens of {} over tp {}",
              model.seq_length / p.cp, p.cp > 1 ? "each context-parallel rank" : "the sequence",
              p.tp));
        },
        [&] {
          return std::string(
              "use a tensor-parallel size dividing the tokens per rank, or drop sequence_parallel");
        });
  }
  // Expert parallelism (arguments.py validate_args; parallel_state.py initialize_model_parallel
  // builds the expert grid etp x ep x edp x pp; ColumnParallelLinear's ensure_divisibility).
  const int etp = p.expert_tp();
  if (p.ep > 1 && !model.moe()) {
    add(
        Rule::kExpertParallel, "ep",
        [] { return std::string("num_experts must be non None to use expert model parallelism"); },
        [] { return std::string("use ep 1 for a dense model"); });
  } else if (model.moe() && model.num_experts % p.ep != 0) {
    add(
        Rule::kExpertParallel, "ep",
        [&] {
          return fmt::format(
              "Number of experts should be a multiple of expert model parallel_size ({} experts, "
              "ep {})",
              model.num_experts, p.ep);
        },
        [] { return std::string("use an expert-parallel size dividing the experts"); });
  } else if (model.moe() && num_gpus % (int64_t{etp} * p.ep * p.pp) != 0) {
    add(
        Rule::kExpertParallel, "ep",
        [&] {
          return fmt::format(
              "world_size ({}) is not divisible by expert_tensor_model_pipeline_parallel size "
              "({} = etp {} x ep {} x pp {})",
              num_gpus, int64_t{etp} * p.ep * p.pp, etp, p.ep, p.pp);
        },
        [] { return std::string("choose etp x ep dividing the GPUs of a pipeline stage"); });
  } else if (model.moe() && model.moe_ffn_hidden_size % etp != 0) {
    add(
        Rule::kExpertParallel, "etp",
        [&] {
          return fmt::format(
              "{} is not divisible by {} (moe_ffn_hidden_size over "
              "expert_tensor_parallel_size)",
              model.moe_ffn_hidden_size, etp);
        },
        [] { return std::string("use an expert tensor-parallel size dividing the expert width"); });
  }
  if (p.recompute_num_layers > 0 && p.recompute != Recompute::kFull) {
    add(
        Rule::kRecomputeNumLayers, "recompute_num_layers",
        [&] {
          return std::string(
              fmt::format("recompute method is not yet supported for {} recomputing granularity",
                          Name(p.recompute)));
        },
        [&] {
          return std::string("recompute_num_layers (the block method) needs recompute: full");
        });
  }
  if (p.recompute == Recompute::kSelective) {
    // transformer_config.py __post_init__.
    if ((p.recompute_modules & kRecomputeMlaUpProj) && !model.multi_latent_attention) {
      add(
          Rule::kRecomputeModules, "recompute_modules",
          [] {
            return std::string(
                "mla_up_proj in recompute_modules is only supported with multi_latent_attention.");
          },
          [] { return std::string("drop mla_up_proj (the model has no MLA)"); });
    } else if ((p.recompute_modules & (kRecomputeMoeAct | kRecomputeLayernorm)) &&
               training.precision == Precision::kFp8 &&
               training.fp8_recipe == Fp8Recipe::kDelayed) {
      add(
          Rule::kRecomputeModules, "recompute_modules",
          [] {
            return std::string(
                "Delayed scaling does not support moe_act and layernorm recompute for fp8.");
          },
          [] { return std::string("use fp8_recipe: tensorwise, or drop moe_act and layernorm"); });
    }
  }
  if (p.fsdp != Fsdp::kNone && !p.distributed_optimizer) {
    add(
        Rule::kFsdpNeedsDistributedOptimizer, "distributed_optimizer",
        [&] {
          return std::string(
              "Megatron-FSDP v1 is only compatible with --use-distributed-optimizer");
        },
        [&] {
          return std::string("set distributed_optimizer (Megatron turns it on for Megatron-FSDP)");
        });
  }
  if (training.precision == Precision::kFp8) {
    const int most = model.num_layers / p.pp;
    for (auto [key, n] : {std::pair{"fp8_bf16_layers_at_start", training.fp8_bf16_layers_at_start},
                          {"fp8_bf16_layers_at_end", training.fp8_bf16_layers_at_end}}) {
      if (n > most) {
        add(
            Rule::kFp8Options, key,
            [&, key = key, n = n] {  // init-captures: clang 14 (see above)
              return std::string(fmt::format(
                  "{} ({}) must be between 0 and number of layers per pipeline stage ({}).",
                  key == std::string_view("fp8_bf16_layers_at_start")
                      ? "num_layers_at_start_in_bf16"
                      : "num_layers_at_end_in_bf16",
                  n, most));
            },
            [&] { return std::string("keep at most num_layers / pp layers in bf16 at each end"); });
      }
    }
    if (mamba &&
        (2 * model.MambaInnerSize() + 2 * int64_t{model.mamba_num_groups} * model.mamba_state_dim +
         model.mamba_num_heads) %
                16 !=
            0) {
      add(
          Rule::kFp8Options, "precision",
          [] {
            return std::string(
                "For FP8, the innermost dimension of the Mamba layer input projection output "
                "tensor must be a multiple of 16.");
          },
          [] { return std::string("train in bf16, or choose Mamba sizes that satisfy it"); });
    }
    if (training.fp8_param_gather && !p.distributed_optimizer) {
      add(
          Rule::kFp8Options, "fp8_param_gather",
          [&] {
            return std::string(
                "--fp8-param-gather only supported with distributed optimizer, torch fsdp2, "
                "megatron "
                "fsdp, or inference mode");
          },
          [&] { return std::string("use the distributed optimizer, or drop fp8_param_gather"); });
    }
  }
}

}  // namespace

std::vector<Violation> CheckParallelConfig(const ModelSpec& model, const TrainingSpec& training,
                                           const ParallelConfig& p, int64_t num_gpus,
                                           const CostOptions& options) {
  std::vector<Violation> out;
  CheckRules(model, training, p, num_gpus, options,
             [&](Rule rule, std::string_view key, const auto& message, const auto& hint) {
               out.push_back({rule, std::string(key), message(), hint()});
             });
  return out;
}

std::optional<Rule> FirstBrokenLeadingRule(const ModelSpec& model, const TrainingSpec& training,
                                           const ParallelConfig& p, int64_t num_gpus) {
  std::optional<Rule> first;
  CheckLeadingRules(model, training, p, num_gpus,
                    [&](Rule rule, std::string_view, const auto&, const auto&) {
                      if (!first) first = rule;
                    });
  return first;
}

std::optional<Rule> FirstBrokenRule(const ModelSpec& model, const TrainingSpec& training,
                                    const ParallelConfig& p, int64_t num_gpus,
                                    const CostOptions& options) {
  std::optional<Rule> first;
  CheckRules(model, training, p, num_gpus, options,
             [&](Rule rule, std::string_view, const auto&, const auto&) {
               if (!first) first = rule;
             });
  return first;
}

}  // namespace ptdp
